import BatonOData
import Crypto
import Foundation
import Hummingbird

extension CockpitRoutes {
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

    /// Opens backup `:id`, records `action` in the audit log and answers `page(id, bytes)`; a backup that is not
    /// there or does not open answers a "Not found" page instead, and nothing is audited.
    func withOpenedBackup(
        _ session: CockpitSessions.Session, _ context: BatonRequestContext, audited action: String,
        _ page: (Int64, Data) -> Response
    ) async throws -> Response {
        let back = (text: "Discarded changes", href: "/admin/backups")
        guard let id = context.parameters.get("id").flatMap({ Int64($0) }) else {
            return CockpitPages.message(
                "Not found", "There is no such backup.", status: .notFound, session: session, link: back)
        }
        let opened: Data
        do {
            opened = try await devices.openDiscardedChanges(id)
        } catch let error as ServerError {
            return CockpitPages.message("Not found", error.message, status: error.status, session: session, link: back)
        }
        try await record(session, context, (action, String(id), nil))
        return page(id, opened)
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

    /// `GET /admin/`.
    func showOverview(_ request: Request) async throws -> Response {
        try await viewing(request) { session in try await overview(session) }
    }

    /// `GET /admin/style.css`.
    static func stylesheet() -> Response {
        var fields = CockpitPages.headers
        fields[.contentType] = "text/css; charset=utf-8"
        return Response(
            status: .ok, headers: fields, body: .init(byteBuffer: ByteBuffer(string: CockpitPages.stylesheet)))
    }
}
