import BatonOData
import Crypto
import Foundation
import Hummingbird

/// The users page: list and search, add, and each user's actions (disable, enable, delete, role, password).
extension CockpitRoutes {
    /// `GET /admin/users`.
    func showUsers(_ request: Request) async throws -> Response {
        try await viewing(request) { session in
            let query = request.uri.queryParameters
            return try await usersPage(
                // A browser's form writes a space as '+' (names have neither).
                session,
                search: (query["q"].map(String.init) ?? "").replacingOccurrences(of: "+", with: " ").prefix(
                    scalars: 64),
                page: max(0, min(10_000, query["page"].flatMap { Int(String($0)) } ?? 0)))
        }
    }

    /// `POST /admin/users`.
    func addUser(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await changing(request, context) { session, form in
            let role = User.Role(rawValue: form["role"] ?? "")
            guard let role else {
                return try await usersPage(session, error: "Choose a role: ground-staff, supervisor or admin.")
            }
            let name = form["name"] ?? ""
            let displayName = (form["displayName"] ?? "").trimmingCharacters(in: .whitespaces)
            guard displayName.count <= 128 else {
                return try await usersPage(session, error: "A display name has at most 128 characters.")
            }
            return try await acting(
                session, context, success: "Added \(name) as \(role.rawValue).",
                audited: ("user-added", name, "role \(role.rawValue)")
            ) {
                try await users.add(
                    name: name, displayName: displayName.isEmpty ? nil : displayName, role: role,
                    password: form["password"] ?? "")
            }
        }
    }

    /// `POST /admin/users/:name/:action`.
    func changeUser(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await changing(request, context) { session, form in
            let name = context.parameters.get("name") ?? ""
            switch context.parameters.get("action") ?? "" {
            case "disable":
                return try await acting(
                    session, context, success: "Disabled \(name); their tokens no longer work.",
                    audited: ("user-disabled", name, nil)
                ) {
                    try await users.disable(name)
                }
            case "enable":
                return try await acting(
                    session, context, success: "Enabled \(name).", audited: ("user-enabled", name, nil)
                ) { try await users.enable(name) }
            case "delete":
                return try await acting(
                    session, context, success: "Deleted \(name).", audited: ("user-deleted", name, nil)
                ) {
                    try await users.delete(name)
                }
            case "role":
                guard let role = User.Role(rawValue: form["role"] ?? "") else {
                    return try await usersPage(session, error: "Choose a role: ground-staff, supervisor or admin.")
                }
                return try await acting(
                    session, context, success: "\(name) is now \(role.rawValue).",
                    audited: ("user-role-changed", name, "role \(role.rawValue)")
                ) {
                    try await users.setRole(name, to: role)
                }
            case "password":
                return try await acting(
                    session, context, success: "Set a new password for \(name); they sign in again.",
                    audited: ("user-password-reset", name, nil)
                ) {
                    try await users.setPassword(name, to: form["password"] ?? "")
                }
            default:
                return CockpitPages.message(
                    "Not found", "There is no such action.", status: .notFound, session: session,
                    link: ("Users", "/admin/users"))
            }
        }
    }
}
