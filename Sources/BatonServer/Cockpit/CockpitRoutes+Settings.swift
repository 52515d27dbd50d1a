import BatonOData
import Crypto
import Foundation
import Hummingbird

/// The settings page and the identity providers page: what an admin changes about the server.
extension CockpitRoutes {
    /// `GET /admin/settings`.
    func showSettings(_ request: Request) async throws -> Response {
        try await viewing(request) { session in try await settingsPage(session) }
    }

    /// `POST /admin/settings`.
    func changeSetting(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await changing(request, context) { session, form in
            let key = form["key"] ?? ""
            let value = form["value"] ?? ""
            do {
                _ = try await settings.set(key, to: value)
            } catch let error as ServerError {
                return try await settingsPage(session, error: error.message)
            }
            try await record(session, context, ("settings-changed", key, "value \(value.prefix(scalars: 64))"))
            return try await settingsPage(session, notice: "\(key) is now '\(value)'.")
        }
    }

    /// `GET /admin/identity-providers`.
    func showProviders(_ request: Request) async throws -> Response {
        try await viewing(request) { session in try await providersPage(session) }
    }

    /// `POST /admin/identity-providers`.
    func addProvider(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await changing(request, context) { session, form in
            var provider = IdentityProvider(
                name: form["name"] ?? "",
                displayName: (form["displayName"] ?? "").isEmpty ? nil : form["displayName"],
                issuer: form["issuer"] ?? "", clientID: form["clientID"] ?? "")
            do {
                guard let claim = IdentityProvider.NameClaim(rawValue: form["nameClaim"] ?? "") else {
                    throw ServerError.badRequest("The name claim is preferred_username, email or sub.")
                }
                provider.nameClaim = claim
                provider.roleClaim = form["roleClaim"] ?? "groups"
                provider.roleMap = try IdentityProvider.roleMap(parsing: form["roleMap"] ?? "")
                try await providers.add(provider, clientSecret: form["clientSecret"] ?? "")
            } catch let error as ServerError {
                return try await providersPage(session, error: error.message)
            }
            try await record(session, context, ("idp-added", provider.name, "issuer \(provider.issuer)"))
            return try await providersPage(session, notice: "Added \(provider.name).")
        }
    }

    /// `POST /admin/identity-providers/:name/remove`.
    func removeProvider(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await changing(request, context) { session, _ in
            let name = context.parameters.get("name") ?? ""
            let bound: Int
            do { bound = try await providers.remove(name) } catch let error as ServerError {
                return try await providersPage(session, error: error.message)
            }
            try await record(session, context, ("idp-removed", name, "\(bound) users bound to it"))
            return try await providersPage(
                session,
                notice:
                    "Removed \(name); its \(bound) people cannot sign in until it is added again with the same issuer."
            )
        }
    }
}
