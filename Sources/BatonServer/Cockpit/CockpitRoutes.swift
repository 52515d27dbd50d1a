import BatonOData
import Crypto
import Foundation
import Hummingbird

/// The admin cockpit at `/admin/`: server-rendered pages for the people who run Baton.
///
/// Sign-in is Baton's own authorization code flow with PKCE (the cockpit is the OAuth client `baton-cockpit`,
/// redirected only to this server's `/admin/callback`): the state and verifier travel in a short-lived cookie
/// sealed under a key derived from the master key, so any instance can finish a sign-in another began. The
/// redeemed code opens a ``CockpitSessions`` session (no tokens are issued); only enabled admins get one.
/// Every form that changes something carries the session's CSRF token; cookies are `HttpOnly`,
/// `SameSite=Strict`, path `/admin`, and `Secure` unless the server is reached on loopback.
struct CockpitRoutes: Sendable {
    let tokens: TokenService
    let users: UserDirectory
    let devices: DeviceRegistry
    let settings: SettingsStore
    let audit: AuditLog
    let sessions: CockpitSessions
    let database: ServerDatabase
    let clock: ServerClock
    /// Seals the sign-in cookie.
    let key: SymmetricKey
    /// The identity providers (their own page).
    let providers: IdentityProviders
    /// The data service, for the photos page (`nil` in tests that mount the cockpit alone).
    var data: DataService? = nil

    static let sessionCookie = "baton_cockpit"
    static let signInCookie = "baton_cockpit_sign_in"
    /// How long a sign-in may take, from the cockpit's redirect to the callback.
    static let signInWindow: TimeInterval = 600
    /// Users per page.
    static let pageSize = 25
    /// Devices per page.
    static let devicesPageSize = 50
    /// Backups per page.
    static let backupsPageSize = 50

    func add(to router: Router<BatonRequestContext>) {
        addPhotos(to: router)
        router.get("/admin/style.css") { _, _ in
            var fields = CockpitPages.headers
            fields[.contentType] = "text/css; charset=utf-8"
            return Response(
                status: .ok, headers: fields, body: .init(byteBuffer: ByteBuffer(string: CockpitPages.stylesheet)))
        }
        router.get("/admin/sign-in") { _, _ in try startSignIn() }
        router.get("/admin/callback") { request, _ in try await finishSignIn(request) }
        router.post("/admin/sign-out") { request, context in
            try await changing(request, context) { session, _ in
                if let cookie = request.cookies[Self.sessionCookie]?.value { try await sessions.close(cookie: cookie) }
                var response = CockpitPages.page(
                    "message", title: "Signed out",
                    values: [
                        "heading": "Signed out", "text": "\(session.displayName) signed out of the cockpit.",
                        "link": ["text": "Sign in again", "href": "/admin/sign-in"],
                    ], session: nil)
                response.setCookie(expired(Self.sessionCookie))
                return response
            }
        }
        router.get("/admin/") { request, _ in
            try await viewing(request) { session in try await overview(session) }
        }
        router.get("/admin/users") { request, _ in
            try await viewing(request) { session in
                let query = request.uri.queryParameters
                return try await usersPage(
                    // A browser's form writes a space as '+' (names have neither).
                    session,
                    search: String(
                        (query["q"].map(String.init) ?? "").replacingOccurrences(of: "+", with: " ").prefix(64)),
                    page: max(0, min(10_000, query["page"].flatMap { Int(String($0)) } ?? 0)))
            }
        }
        router.post("/admin/users") { request, context in
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
        router.get("/admin/devices") { request, _ in
            try await viewing(request) { session in
                let query = request.uri.queryParameters
                return try await devicesPage(
                    session, search: query["q"].map { String($0.prefix(128)) } ?? "",
                    page: max(0, min(100_000, query["page"].flatMap { Int(String($0)) } ?? 0)))
            }
        }
        router.post("/admin/devices/:device/:action") { request, context in
            try await changing(request, context) { session, _ in
                let device = context.parameters.get("device") ?? ""
                let action = context.parameters.get("action") ?? ""
                do {
                    switch action {
                    case "revoke":
                        guard try await devices.revoke(device: device) else {
                            return try await devicesPage(session, notice: "\(device) was already revoked.")
                        }
                    case "wipe": try await devices.orderWipe(device: device)
                    case "request-logs":
                        try await devices.requestLogs(device: device)
                        try await record(session, context, ("device-log-requested", device, nil))
                        return try await devicesPage(
                            session, notice: "Asked \(device) for its log: it comes with the device's next sync.")
                    default:
                        return CockpitPages.message(
                            "Not found", "There is no such action.", status: .notFound, session: session,
                            link: ("Devices", "/admin/devices"))
                    }
                } catch let error as ServerError {
                    return try await devicesPage(session, error: error.message)
                }
                let revoked = action == "revoke"
                try await record(session, context, (revoked ? "device-revoked" : "device-wipe-ordered", device, nil))
                return try await devicesPage(
                    session,
                    notice: revoked
                        ? "Revoked \(device): the sign-ins it used are revoked, its store key is no longer released "
                            + "and nobody can register on it again."
                        : "Ordered \(device) to wipe itself at its next contact.")
            }
        }
        router.get("/admin/devices/:device/logs") { request, context in
            try await viewing(request) { session in
                let device = String((context.parameters.get("device") ?? "").prefix(128))
                let formatter = ISO8601DateFormatter()
                let uploads: [[String: Any]] = try await devices.logs(device: device, limit: 20).map {
                    [
                        "id": $0.id, "received": formatter.string(from: $0.receivedAt), "lines": $0.lineCount,
                        "reason": $0.reason, "uploader": $0.uploader, "text": $0.lines.joined(separator: "\n"),
                    ]
                }
                let events: [[String: Any]] = try await devices.usage(device: device, limit: 500).reversed().map {
                    [
                        "at": formatter.string(from: $0.at), "name": $0.name, "count": $0.count.map(String.init) ?? "",
                        "duration": $0.durationMs.map(String.init) ?? "", "code": $0.code ?? "",
                    ]
                }
                return CockpitPages.page(
                    "device-logs", title: "Logs of \(device)",
                    values: [
                        "device": device, "uploads": uploads, "events": events,
                        "requested": try await devices.logsRequested(device: device),
                    ], session: session)
            }
        }
        router.get("/admin/backups") { request, _ in
            try await viewing(request) { session in
                let query = request.uri.queryParameters
                let search = query["q"].map { String($0.prefix(128)) } ?? ""
                let before = query["before"].flatMap { Int64(String($0)) }.flatMap { $0 > 0 ? $0 : nil }
                var shown = try await devices.discardedChanges(
                    search: search, before: before, limit: Self.backupsPageSize + 1)
                var values: [String: Any] = ["query": search]
                func link(before: Int64?) -> String {
                    CockpitPages.link("/admin/backups", [("q", search), ("before", before.map(String.init))])
                }
                if shown.count > Self.backupsPageSize {
                    shown.removeLast()
                    values["older"] = link(before: shown.last?.id)
                }
                if before != nil { values["newest"] = link(before: nil) }
                let formatter = ISO8601DateFormatter()
                values["rows"] = shown.map {
                    [
                        "id": $0.id, "device": $0.device, "author": $0.author, "uploader": $0.uploader,
                        "count": $0.count, "received": formatter.string(from: $0.receivedAt),
                    ] as [String: Any]
                }
                return CockpitPages.page("backups", title: "Discarded changes", values: values, session: session)
            }
        }
        router.get("/admin/backups/:id") { request, context in
            try await viewing(request) { session in
                let id: Int64
                let opened: Data
                do { (id, opened) = try await openedBackup(session, context) } catch let page as PageInstead {
                    return page.response
                }
                try await record(session, context, ("backup-read", String(id), nil))
                return CockpitPages.page(
                    "backup", title: "Backup \(id)",
                    values: ["id": id, "text": Self.readable(opened)], session: session)
            }
        }
        router.get("/admin/backups/:id/download") { request, context in
            try await viewing(request) { session in
                let id: Int64
                let opened: Data
                do { (id, opened) = try await openedBackup(session, context) } catch let page as PageInstead {
                    return page.response
                }
                try await record(session, context, ("backup-downloaded", String(id), nil))
                var fields = CockpitPages.headers
                fields[.contentType] = "application/json"
                fields[.contentDisposition] = "attachment; filename=\"baton-discarded-\(id).json\""
                return Response(status: .ok, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: opened)))
            }
        }
        router.get("/admin/settings") { request, _ in
            try await viewing(request) { session in try await settingsPage(session) }
        }
        router.post("/admin/settings") { request, context in
            try await changing(request, context) { session, form in
                let key = form["key"] ?? ""
                let value = form["value"] ?? ""
                do {
                    _ = try await settings.set(key, to: value)
                } catch let error as ServerError {
                    return try await settingsPage(session, error: error.message)
                }
                try await record(session, context, ("settings-changed", key, "value \(value.prefix(64))"))
                return try await settingsPage(session, notice: "\(key) is now '\(value)'.")
            }
        }
        router.get("/admin/identity-providers") { request, _ in
            try await viewing(request) { session in try await providersPage(session) }
        }
        router.post("/admin/identity-providers") { request, context in
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
        router.post("/admin/identity-providers/:name/remove") { request, context in
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
        router.get("/admin/audit") { request, _ in
            try await viewing(request) { session in
                try await auditPage(
                    session, filter: AuditFilter(request.uri.queryParameters.map { ($0.key, $0.value) }))
            }
        }
        router.get("/admin/audit.csv") { request, _ in
            try await viewing(request) { _ in
                let filter = AuditFilter(request.uri.queryParameters.map { ($0.key, $0.value) })
                guard filter.problem == nil else {
                    return CockpitPages.message(
                        "Audit", filter.problem ?? "", status: .badRequest, link: ("Audit", "/admin/audit"))
                }
                let rows = try await auditRows(filter, limit: Self.csvLimit)
                var fields = CockpitPages.headers
                fields[.contentType] = "text/csv; charset=utf-8"
                fields[.contentDisposition] = "attachment; filename=\"baton-audit.csv\""
                return Response(
                    status: .ok, headers: fields, body: .init(byteBuffer: ByteBuffer(string: AuditRow.csv(rows))))
            }
        }
        router.post("/admin/users/:name/:action") { request, context in
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
}
