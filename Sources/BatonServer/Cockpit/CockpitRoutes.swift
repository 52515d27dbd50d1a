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

    // MARK: Sessions

    /// Runs `page` for a signed-in admin; anyone else is sent to sign in.
    func viewing(_ request: Request, _ page: (CockpitSessions.Session) async throws -> Response) async throws
        -> Response
    {
        guard let cookie = request.cookies[Self.sessionCookie]?.value,
            let session = try await sessions.session(cookie: cookie)
        else { return CockpitPages.redirect(to: "/admin/sign-in") }
        return try await page(session)
    }

    /// Runs `change` for a signed-in admin whose form carries the session's CSRF token; a form without it
    /// changes nothing (403).
    func changing(
        _ request: Request, _ context: BatonRequestContext,
        _ change: (CockpitSessions.Session, FormBody) async throws -> Response
    ) async throws -> Response {
        guard let cookie = request.cookies[Self.sessionCookie]?.value,
            let session = try await sessions.session(cookie: cookie)
        else {
            return CockpitPages.message(
                "Signed out", "Your cockpit session has ended; sign in again. Nothing was changed.",
                status: .unauthorized, link: ("Sign in", "/admin/sign-in"))
        }
        // A body that is not a form carries no token either.
        let form = try? await FormBody.read(request, context: context)
        guard let form, CockpitSessions.isCSRFToken(form["csrf"], of: session) else {
            return CockpitPages.message(
                "Refused",
                "The form did not carry this session's security token (reload the page and try again). "
                    + "Nothing was changed.", status: .forbidden, session: session, link: ("Overview", "/admin/"))
        }
        return try await change(session, form)
    }

    /// Runs an admin action and shows the users page with its outcome: the success notice, or the server's
    /// message for a refused change (nothing changed).
    func acting(
        _ session: CockpitSessions.Session, _ context: BatonRequestContext, success: String,
        audited: (action: String, subject: String, detail: String?), _ action: () async throws -> Void
    ) async throws -> Response {
        do {
            try await action()
        } catch let error as ServerError {
            return try await usersPage(session, error: error.message)
        }
        try await record(session, context, audited)
        return try await usersPage(session, notice: success)
    }

    /// Records what an admin did in the cockpit.
    func record(
        _ session: CockpitSessions.Session, _ context: BatonRequestContext,
        _ entry: (action: String, subject: String, detail: String?)
    ) async throws {
        try await audit.record(
            AuditEntry(
                at: clock.now(), actor: session.user, action: entry.action, subject: entry.subject,
                address: context.clientAddress, detail: entry.detail.map { "\($0) (cockpit)" } ?? "cockpit"))
    }

    // MARK: Sign-in

    /// Sends the browser to the authorization endpoint, with a fresh state and PKCE verifier sealed in a cookie.
    func startSignIn() throws -> Response {
        let state = randomSecret()
        let verifier = randomSecret() + randomSecret()
        let expires = clock.now().timeIntervalSince1970 + Self.signInWindow
        let sealed = try AES.GCM.seal(
            Data("\(state) \(verifier) \(Int(expires))".utf8), using: key, authenticating: Data(Self.signInCookie.utf8))
        guard let combined = sealed.combined else {
            throw ServerError(.internalServerError, "InternalError", "Cannot seal the sign-in state.")
        }
        var query = URLComponents()
        query.queryItems = [
            URLQueryItem(name: "response_type", value: "code"),
            URLQueryItem(name: "client_id", value: OAuthClient.cockpit.id),
            URLQueryItem(name: "redirect_uri", value: callbackURL),
            URLQueryItem(name: "state", value: state),
            URLQueryItem(name: "code_challenge", value: PKCE.challenge(for: verifier)),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ]
        var response = CockpitPages.redirect(to: "/oauth/authorize?" + (query.percentEncodedQuery ?? ""))
        response.setCookie(cookie(Self.signInCookie, base64URL(combined), maxAge: Int(Self.signInWindow)))
        return response
    }

    /// The authorization endpoint's redirect: the state must be the one sealed in this browser's cookie, the code
    /// is redeemed with its verifier, and an enabled admin gets a session; anyone else a 403 page.
    func finishSignIn(_ request: Request) async throws -> Response {
        let parameters = request.uri.queryParameters
        let restart = (text: "Sign in again", href: "/admin/sign-in")
        guard let sealed = request.cookies[Self.signInCookie]?.value, let bytes = Data(base64URLEncoded: sealed),
            let box = try? AES.GCM.SealedBox(combined: bytes),
            let opened = try? AES.GCM.open(box, using: key, authenticating: Data(Self.signInCookie.utf8))
        else {
            return CockpitPages.message(
                "Sign-in not started here", "This browser did not start a cockpit sign-in, or it took too long.",
                status: .badRequest, link: restart)
        }
        let fields = String(decoding: opened, as: UTF8.self).split(separator: " ").map(String.init)
        guard fields.count == 3, let expires = Double(fields[2]), expires > clock.now().timeIntervalSince1970,
            let state = parameters["state"].map(String.init), state == fields[0],
            let code = parameters["code"].map(String.init), !code.isEmpty
        else {
            var response = CockpitPages.message(
                "Sign-in failed", "The sign-in answer does not belong to this browser's sign-in, or it expired.",
                status: .badRequest, link: restart)
            response.setCookie(expired(Self.signInCookie))
            return response
        }
        let user: String
        do {
            user = try await tokens.redeem(
                code: code, verifier: fields[1], redirectURI: callbackURL, client: .cockpit
            ).user
        } catch let error as OAuthError {
            var response = CockpitPages.message(
                "Sign-in failed", error.description, status: .badRequest, link: restart)
            response.setCookie(expired(Self.signInCookie))
            return response
        }
        guard let account = try await users.user(named: user), account.role == .admin, !account.disabled else {
            var response = CockpitPages.message(
                "Not an administrator",
                "\(user) signed in, but the cockpit is only for users with the admin role. Ask an administrator.",
                status: .forbidden, link: restart)
            response.setCookie(expired(Self.signInCookie))
            return response
        }
        let secret = try await sessions.open(for: user)
        // Not a redirect: when the sign-in went through an identity provider on another site, the browser holds
        // every request of that redirect chain to be cross-site and sends no `SameSite=Strict` cookie on it, so
        // /admin/ would not see the new session. A page that moves on by itself starts a same-site navigation.
        var response = CockpitPages.message(
            "Signed in", "Opening the cockpit…", status: .ok, link: ("Open the cockpit", "/admin/"))
        response.headers[CockpitPages.field("Refresh")] = "0; url=/admin/"
        response.setCookie(expired(Self.signInCookie))
        response.setCookie(cookie(Self.sessionCookie, secret, maxAge: Int(CockpitSessions.lifetime)))
        return response
    }

    /// This server's `/admin/callback`, as registered for ``OAuthClient/cockpit``.
    var callbackURL: String { tokens.issuer.value + "/admin/callback" }

    /// Whether cookies may go without `Secure`: only when the server is reached on loopback over plain HTTP.
    var isLoopback: Bool { tokens.issuer.isLoopbackHTTP }

    /// A cookie of the cockpit: `SameSite=Strict`, except the sign-in's own (``signInCookie``), which must come
    /// back on the top-level redirect from the authorization endpoint, possibly by way of an identity provider on
    /// another site (`Lax`: sent on top-level GETs only).
    func cookie(_ name: String, _ value: String, maxAge: Int) -> Cookie {
        Cookie(
            name: name, value: value, maxAge: maxAge, path: "/admin", secure: !isLoopback, httpOnly: true,
            sameSite: name == Self.signInCookie ? .lax : .strict)
    }

    func expired(_ name: String) -> Cookie {
        cookie(name, "", maxAge: 0)
    }

    // MARK: Pages

    func overview(_ session: CockpitSessions.Session) async throws -> Response {
        let now = clock.now().timeIntervalSince1970
        let midnight = (now / 86_400).rounded(.down) * 86_400
        let counts = try await database.storage.read { db in
            let users = try await db.fetchOne("SELECT count(*), coalesce(sum(disabled), 0) FROM users")
            let devices = try await db.fetchOne("SELECT count(*) FROM devices")?[0].integer ?? 0
            let seen =
                try await db.fetchOne("SELECT count(*) FROM devices WHERE lastSeenAt >= ?", now - 86_400)?[0].integer
                ?? 0
            let changes = try await db.fetchOne(
                """
                SELECT count(*), coalesce(sum(CASE WHEN detail <> 'uploaded by ' || actor THEN 1 ELSE 0 END), 0)
                FROM audit WHERE at >= ? AND action IN ('entity-created', 'entity-updated', 'entity-deleted')
                """, midnight)
            // An entry may stand for several events (``AuditEntry/repeats``).
            func today(_ action: String) async throws -> Int64 {
                try await db.fetchOne(
                    "SELECT CAST(coalesce(sum(repeats), 0) AS bigint) FROM audit WHERE at >= ? AND action = ?",
                    midnight, action)?[0]
                    .integer ?? 0
            }
            return await (
                users: users?[0].integer ?? 0, disabled: users?[1].integer ?? 0, devices: devices, seen: seen,
                changes: changes?[0].integer ?? 0, onBehalf: changes?[1].integer ?? 0,
                refusals: try today("change-refused"), discarded: try today("changes-discarded")
            )
        }
        let current = try await settings.current()
        let settingRows: [[String: Any]] = current.lines.map { line in
            let parts = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            return ["key": parts.first ?? "", "value": parts.count > 1 ? parts[1] : ""]
        }
        return CockpitPages.page(
            "overview", title: "Overview",
            values: [
                "users": counts.users, "disabled": counts.disabled, "devices": counts.devices, "seen": counts.seen,
                "changes": counts.changes, "onBehalf": counts.onBehalf, "refusals": counts.refusals,
                "discarded": counts.discarded,
                "settings": settingRows,
            ], session: session)
    }

    /// A page to answer with instead of the one asked for.
    struct PageInstead: Error {
        let response: Response
    }

    /// The backup a route's `:id` names, opened.
    ///
    /// - Throws: ``PageInstead`` saying why not (no such backup, or it cannot be opened).
    func openedBackup(_ session: CockpitSessions.Session, _ context: BatonRequestContext) async throws -> (
        Int64, Data
    ) {
        let back = (text: "Discarded changes", href: "/admin/backups")
        guard let id = context.parameters.get("id").flatMap({ Int64($0) }) else {
            throw PageInstead(
                response: CockpitPages.message(
                    "Not found", "There is no such backup.", status: .notFound, session: session, link: back))
        }
        do {
            return (id, try await devices.openDiscardedChanges(id))
        } catch let error as ServerError {
            throw PageInstead(
                response: CockpitPages.message(
                    "Not found", error.message, status: error.status, session: session, link: back))
        }
    }

    /// A backup's changes as text to read: indented JSON when it is JSON, else its UTF-8 (or a note that it is
    /// not text).
    static func readable(_ data: Data) -> String {
        if let object = try? JSONSerialization.jsonObject(with: data),
            let pretty = try? JSONSerialization.data(withJSONObject: object, options: [.prettyPrinted, .sortedKeys])
        {
            return String(decoding: pretty, as: UTF8.self)
        }
        return String(data: data, encoding: .utf8) ?? "(\(data.count) bytes that are not text: download them)"
    }

    func devicesPage(
        _ session: CockpitSessions.Session, search: String = "", page: Int = 0, error: String? = nil,
        notice: String? = nil
    ) async throws -> Response {
        let formatter = ISO8601DateFormatter()
        let total = try await devices.deviceCount(search: search)
        let start = min(page * Self.devicesPageSize, total)
        let shown = try await devices.summaries(search: search, limit: Self.devicesPageSize, offset: start)
        let rows: [[String: Any]] = shown.map { device -> [String: Any] in
            // An order still to be carried out; one the device reported done gives way to "wiped".
            let pendingWipe: Bool = device.wipeOrderedAt.map { $0 > (device.wipedAt ?? .distantPast) } ?? false
            let wipedAt: String = device.wipedAt.map(formatter.string(from:)) ?? ""
            return [
                "id": device.id, "created": formatter.string(from: device.createdAt),
                "seen": device.lastSeenAt.map(formatter.string(from:)) ?? "never",
                "version": device.appVersion ?? "unknown",
                "revoked": device.revokedAt != nil, "revokedAt": device.revokedAt.map(formatter.string(from:)) ?? "",
                "wipe": pendingWipe, "wipeAt": device.wipeOrderedAt.map(formatter.string(from:)) ?? "",
                "wiped": !wipedAt.isEmpty, "wipedAt": wipedAt,
                "users": device.users.map { ["name": $0.name, "active": $0.active] },
                "keys": device.keys.map {
                    [
                        "id": String($0.id.prefix(12)), "user": $0.user,
                        "registered": formatter.string(from: $0.registeredAt),
                        "retired": $0.replacedAt != nil, "retiredAt": $0.replacedAt.map(formatter.string(from:)) ?? "",
                    ]
                },
            ]
        }
        func link(_ page: Int) -> String {
            CockpitPages.link("/admin/devices", [("q", search), ("page", String(page))])
        }
        var values: [String: Any] = [
            "rows": rows, "csrf": session.csrf, "query": search,
            "range": total == 0 ? "" : "\(start + 1)–\(start + shown.count) of \(total)",
        ]
        if page > 0 { values["previous"] = link(page - 1) }
        if start + shown.count < total { values["next"] = link(page + 1) }
        if let error { values["error"] = error }
        if let notice { values["notice"] = notice }
        return CockpitPages.page(
            "devices", title: "Devices", values: values, session: session, status: error == nil ? .ok : .badRequest)
    }

    func settingsPage(_ session: CockpitSessions.Session, error: String? = nil, notice: String? = nil)
        async throws -> Response
    {
        let current = try await settings.current().lines
        let rows: [[String: Any]] = ServerSettings.keys.map { key in
            let line = current.first { $0.hasPrefix(key.key + " = ") } ?? ""
            return ["key": key.key, "takes": key.takes, "value": String(line.dropFirst(key.key.count + 3))]
        }
        var values: [String: Any] = ["rows": rows, "csrf": session.csrf]
        if let error { values["error"] = error }
        if let notice { values["notice"] = notice }
        return CockpitPages.page(
            "settings", title: "Settings", values: values, session: session, status: error == nil ? .ok : .badRequest)
    }

    func providersPage(_ session: CockpitSessions.Session, error: String? = nil, notice: String? = nil)
        async throws -> Response
    {
        let list = try await providers.list()
        let counts = try await database.storage.read { db in
            try await db.fetchAll(
                """
                SELECT u.idp, count(*) AS people FROM users u
                JOIN identityProviders p ON p.name = u.idp AND p.issuer = u.idpIssuer GROUP BY u.idp
                """
            ).reduce(
                into: [String: Int64]()
            ) { $0[$1["idp"].text ?? ""] = $1["people"].integer ?? 0 }
        }
        let rows: [[String: Any]] = list.map { provider in
            [
                "name": provider.name, "displayName": provider.displayName, "issuer": provider.issuer,
                "clientID": provider.clientID, "roleMap": provider.roleMapText, "roleClaim": provider.roleClaim,
                "nameClaim": provider.nameClaim.rawValue, "people": String(counts[provider.name] ?? 0),
                "callback": provider.callbackURL(issuer: tokens.issuer.value), "csrf": session.csrf,
            ]
        }
        var values: [String: Any] = ["rows": rows, "csrf": session.csrf]
        if let error { values["error"] = error }
        if let notice { values["notice"] = notice }
        return CockpitPages.page(
            "providers", title: "Identity providers", values: values, session: session,
            status: error == nil ? .ok : .badRequest)
    }

    /// Rows of one audit download at most.
    static let csvLimit = 100_000
    /// Rows of one audit page.
    static let auditPageSize = 50

    func auditRows(_ filter: AuditFilter, limit: Int) async throws -> [AuditRow] {
        let (sql, arguments) = filter.query(limit: limit)
        return try await database.storage.read { db in
            try await db.fetchAll(sql, arguments).map(AuditRow.init(row:))
        }
    }

    func auditPage(_ session: CockpitSessions.Session, filter: AuditFilter) async throws -> Response {
        var values: [String: Any] = [
            "user": filter.user ?? "", "device": filter.device ?? "", "action": filter.action ?? "",
            "from": filter.fromText ?? "", "to": filter.toText ?? "",
        ]
        guard filter.problem == nil else {
            values["error"] = filter.problem
            return CockpitPages.page("audit", title: "Audit", values: values, session: session, status: .badRequest)
        }
        var rows = try await auditRows(filter, limit: Self.auditPageSize + 1)
        if rows.count > Self.auditPageSize {
            rows.removeLast()
            var older = filter
            older.before = rows.last?.id
            values["older"] = CockpitPages.link("/admin/audit", older.queryItems)
        }
        if filter.before != nil {
            var newest = filter
            newest.before = nil
            values["newest"] = CockpitPages.link("/admin/audit", newest.queryItems)
        }
        var all = filter
        all.before = nil
        values["csv"] = CockpitPages.link("/admin/audit.csv", all.queryItems)
        values["rows"] = rows.map(\.values)
        return CockpitPages.page("audit", title: "Audit", values: values, session: session)
    }

    func usersPage(
        _ session: CockpitSessions.Session, search: String = "", page: Int = 0, error: String? = nil,
        notice: String? = nil
    ) async throws -> Response {
        let all = try await users.list()
        let matching =
            search.isEmpty
            ? all
            : all.filter {
                $0.name.localizedCaseInsensitiveContains(search)
                    || $0.displayName.localizedCaseInsensitiveContains(search)
            }
        let start = min(page * Self.pageSize, matching.count)
        let shown = matching[start..<min(start + Self.pageSize, matching.count)]
        let rows: [[String: Any]] = shown.map { user in
            [
                "name": user.name, "displayName": user.displayName, "role": user.role.rawValue,
                "disabled": user.disabled,
                "roles": User.Role.allCases.map { ["value": $0.rawValue, "selected": $0 == user.role] },
            ]
        }
        func link(_ page: Int) -> String { CockpitPages.link("/admin/users", [("q", search), ("page", String(page))]) }
        var values: [String: Any] = [
            "rows": rows, "query": search, "csrf": session.csrf,
            "newRoles": User.Role.allCases.map(\.rawValue),
            "range": matching.isEmpty
                ? "" : "\(start + 1)–\(start + shown.count) of \(matching.count)",
        ]
        if page > 0 { values["previous"] = link(page - 1) }
        if start + shown.count < matching.count { values["next"] = link(page + 1) }
        if let error { values["error"] = error }
        if let notice { values["notice"] = notice }
        return CockpitPages.page(
            "users", title: "Users", values: values, session: session, status: error == nil ? .ok : .badRequest)
    }
}
