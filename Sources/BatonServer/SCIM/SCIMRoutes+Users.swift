import BatonOData
import BatonSQL
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

extension SCIMRoutes {
    // MARK: Users

    func listUsers(_ request: Request, provider: IdentityProvider) async throws -> Response {
        let query = try Self.query(request)
        return try await listUsers(
            provider: provider, filter: query["filter"], start: query["startIndex"], count: query["count"],
            projection: Projection(attributes: query["attributes"], excluded: query["excludedAttributes"]))
    }

    /// The query as a form (`+` is a space, as clients encode it), each parameter at most once.
    static func query(_ request: Request) throws -> [String: String] {
        do { return try FormBody.parse(request.uri.query ?? "").values } catch {
            throw SCIMError(.badRequest, "invalidSyntax", error.description)
        }
    }

    func listUsers(
        provider: IdentityProvider, filter: String?, start: String?, count: String?, projection: Projection
    ) async throws -> Response {
        let start = max(1, start.flatMap { Int($0) } ?? 1)
        let count = min(Self.maxCount, max(0, count.flatMap { Int($0) } ?? 100))
        var filterCondition = "idp = ? AND idpIssuer = ?"
        var filterArguments: [SQLValue] = [.text(provider.name), .text(provider.issuer)]
        if let filter {
            let (attribute, value) = try Self.equalityFilter(filter)
            filterCondition += attribute == "userName" ? " AND lower(name) = lower(?)" : " AND externalId = ?"
            filterArguments.append(.text(value))
        }
        let (condition, arguments) = (filterCondition, filterArguments)
        let (total, page) = try await database.storage.read { db in
            let total =
                try await db.fetchAll("SELECT count(*) FROM users WHERE \(condition)", arguments).first?[0].integer ?? 0
            let rows = try await db.fetchAll(
                "SELECT \(SCIMUser.columns) FROM users WHERE \(condition) ORDER BY name LIMIT ? OFFSET ?",
                arguments + [.integer(Int64(count)), .integer(Int64(start - 1))])
            return (total, try rows.map(SCIMUser.init(row:)))
        }
        return Self.scim(
            list(page.map { projection.apply(to: $0.document(base: base)) }, total: Int(total), start: start))
    }

    /// `userName eq "…"` or `externalId eq "…"` (attribute names and operator case-insensitive, RFC 7644 §3.4.2.2);
    /// anything else is `invalidFilter`.
    static func equalityFilter(_ filter: String) throws -> (attribute: String, value: String) {
        let parts = filter.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
        let attribute = parts.first?.lowercased()
        guard parts.count == 3, attribute == "username" || attribute == "externalid", parts[1].lowercased() == "eq",
            let value = (try? JSONValue(parsing: parts[2]))?.stringValue
        else {
            throw SCIMError(
                .badRequest, "invalidFilter",
                #"Baton filters users by userName eq "…" or externalId eq "…" only."#)
        }
        return (attribute == "username" ? "userName" : "externalId", value)
    }

    func createUser(_ body: JSONValue, provider: IdentityProvider, context: BatonRequestContext) async throws
        -> Response
    {
        try Self.requireSchema(body, Self.userSchema)
        guard let name = body["userName"]?.stringValue, User.isValidName(name) else {
            throw SCIMError(
                .badRequest, "invalidValue",
                "userName is required: 1 to 64 of letters, digits, '.', '_', '-' and '@'.")
        }
        var user = SCIMUser(
            name: name, displayName: name, active: true, externalId: nil, role: .groundStaff, createdAt: clock.now())
        try Self.apply(body.objectMembers ?? [], to: &user)
        let created = user
        do {
            try await database.storage.write { db in
                // Another user of that name (local, or any provider's) makes it a conflict: never a takeover.
                try await db.execute(
                    """
                    INSERT INTO users (name, displayName, role, passwordHash, disabled, disabledBy, createdAt, idp,
                        idpIssuer, subject, externalId)
                    VALUES (?, ?, ?, '!', ?, ?, ?, ?, ?, NULL, ?)
                    """, created.name, created.displayName, created.role.rawValue, !created.active,
                    created.active ? nil : "scim:\(provider.name)", created.createdAt, provider.name, provider.issuer,
                    created.externalId)
            }
        } catch let error as StorageError where error.kind == .uniqueViolation {
            throw SCIMError(.conflict, "uniqueness", "A user named '\(name)' exists already.")
        }
        try await audit.record(
            AuditEntry(
                at: clock.now(), actor: "scim:\(provider.name)", action: "user-added", subject: name,
                address: context.clientAddress, detail: "by SCIM, \(created.active ? "active" : "inactive")"))
        var response = response(for: created)
        response.status = .created
        response.headers[.location] = "\(base)/Users/\(name)"
        return response
    }

    /// PUT: the whole resource again; what it leaves out takes its default (RFC 7644 §3.5.1). `userName` cannot
    /// change (it is the Baton user name everything of theirs is keyed by).
    func replaced(_ user: SCIMUser, with body: JSONValue) throws -> SCIMUser {
        try Self.requireSchema(body, Self.userSchema)
        guard let name = body["userName"]?.stringValue, name == user.name else {
            throw SCIMError(.badRequest, "mutability", "userName cannot change (it is \(user.name)).")
        }
        // `active` is kept when left out: Baton always knows it, and a replacement that forgets it must not
        // re-enable (or withdraw) anyone.
        var replaced = user
        replaced.displayName = user.name
        replaced.externalId = nil
        try Self.apply(body.objectMembers ?? [], to: &replaced)
        return replaced
    }

    /// PATCH (RFC 7644 §3.5.2): `add`, `replace` and `remove` of `active`, `displayName` and `externalId`, with
    /// or without a path; every operation is checked before any applies.
    func patched(_ user: SCIMUser, with body: JSONValue) throws -> SCIMUser {
        try Self.requireSchema(body, Self.patchSchema)
        guard let operations = body["Operations"]?.arrayValue, !operations.isEmpty, operations.count <= 100
        else {
            throw SCIMError(.badRequest, "invalidSyntax", "A PATCH needs 1 to 100 Operations.")
        }
        var patched = user
        for operation in operations {
            let op = operation["op"]?.stringValue?.lowercased() ?? ""
            let path = operation["path"]?.stringValue
            switch (op, path) {
            case ("add", nil), ("replace", nil):
                guard let value = operation["value"]?.objectMembers else {
                    throw SCIMError(
                        .badRequest, "invalidValue", "An \(op) without a path needs an object as its value.")
                }
                try Self.apply(value, to: &patched)
            case ("add", .some(let path)), ("replace", .some(let path)):
                try Self.apply([(path, operation["value"] ?? .null)], to: &patched)
            case ("remove", .some(let path)):
                switch path.lowercased() {
                case "displayname": patched.displayName = patched.name
                case "externalid": patched.externalId = nil
                case "active", "username":
                    throw SCIMError(.badRequest, "mutability", "\(path) cannot be removed.")
                default: try Self.apply([(path, .null)], to: &patched)
                }
            case ("remove", nil):
                throw SCIMError(.badRequest, "noTarget", "A remove needs a path.")
            default:
                throw SCIMError(.badRequest, "invalidSyntax", "op must be add, replace or remove.")
            }
        }
        return patched
    }

    /// Core User attributes, and the enterprise extension, that Baton does not keep (RFC 7643 §4.1, §4.3).
    static let ignoredAttributes: Set<String> = [
        "name", "nickname", "profileurl", "title", "usertype", "preferredlanguage", "locale", "timezone", "password",
        "emails", "phonenumbers", "ims", "photos", "addresses", "groups", "entitlements", "x509certificates",
    ]

    /// Whether a (lower-cased) attribute or path is one Baton accepts and does not keep.
    static func ignored(_ path: String) -> Bool {
        if path.hasPrefix("urn:ietf:params:scim:schemas:extension:enterprise:2.0:user") { return true }
        let attribute = path.prefix { $0 != "." && $0 != "[" }
        return ignoredAttributes.contains(String(attribute))
    }

    static func requireSchema(_ body: JSONValue, _ schema: String) throws {
        guard let schemas = body["schemas"]?.arrayValue, schemas.contains(.string(schema)) else {
            throw SCIMError(.badRequest, "invalidSyntax", "schemas must include \(schema).")
        }
    }

    /// Applies the attributes of `values` a provider may write. `roles` is read-only: a role comes from the
    /// provider's groups through Baton's role map at sign-in, never from a SCIM write.
    static func apply(_ values: [(String, JSONValue)], to user: inout SCIMUser) throws {
        for (key, value) in values {
            // A path may name its schema (`urn:…:core:2.0:User:displayName`).
            let core = "urn:ietf:params:scim:schemas:core:2.0:user:"
            let name =
                key.lowercased().hasPrefix(core) ? String(key.lowercased().dropFirst(core.count)) : key.lowercased()
            switch name {
            case "schemas", "id", "meta": continue
            case "username":
                guard value.stringValue == user.name else {
                    throw SCIMError(.badRequest, "mutability", "userName cannot change (it is \(user.name)).")
                }
            case "displayname":
                guard let name = value.stringValue, User.isValidDisplayName(name) else {
                    throw SCIMError(
                        .badRequest, "invalidValue",
                        "displayName is 1 to 64 characters without control or format characters.")
                }
                user.displayName = name
            case "active":
                // Some providers send the boolean as a string ("False").
                if case .bool(let flag) = value {
                    user.active = flag
                } else if let text = value.stringValue?.lowercased(), ["true", "false"].contains(text) {
                    user.active = text == "true"
                } else {
                    throw SCIMError(.badRequest, "invalidValue", "active is true or false.")
                }
            case "externalid":
                if value == .null {
                    user.externalId = nil
                } else {
                    guard let id = value.stringValue, (1...255).contains(id.utf8.count),
                        !id.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
                    else {
                        throw SCIMError(.badRequest, "invalidValue", "externalId is 1 to 255 characters, no controls.")
                    }
                    user.externalId = id
                }
            case "roles":
                throw SCIMError(
                    .badRequest, "mutability",
                    "roles are read-only in Baton: a role comes from the provider's groups through Baton's role map at sign-in."
                )
            case let other where Self.ignored(other):
                // What providers send that Baton does not keep (Entra ID and Okta send names, e-mails and the
                // enterprise extension with every user): accepted and not stored, so their provisioning works.
                continue
            default:
                throw SCIMError(
                    .badRequest, "invalidPath",
                    "Baton keeps userName, displayName, active and externalId of a user; not \(key.printableASCII)."
                )
            }
        }
    }

    /// Inside a write: `user` is still the provider's, unchanged since it was read when the request carried
    /// `If-Match` (`unchanged`), and not withdrawn by a Baton admin unless the request leaves them withdrawn.
    ///
    /// - Returns: who disabled the user (`admin`, `scim:NAME`), if anyone; a user disabled before Baton kept it
    ///   counts as an admin's withdrawal.
    @discardableResult
    static func requireOwned(_ user: SCIMUser, unchanged: Bool, by provider: IdentityProvider, in db: any SQLConnection)
        async
        throws -> String?
    {
        guard
            let row = try await db.fetchOne(
                "SELECT \(SCIMUser.columns), disabledBy FROM users WHERE name = ? AND idp = ? AND idpIssuer = ?",
                user.name, provider.name, provider.issuer)
        else { throw SCIMError(.notFound, nil, "There is no user '\(user.name)' provisioned by \(provider.name).") }
        if unchanged, try SCIMUser(row: row) != user {
            throw SCIMError(.preconditionFailed, nil, "The user changed meanwhile; read it again.")
        }
        let disabledBy = row["disabledBy"].text ?? (user.active ? nil : "admin")
        return disabledBy
    }

    static func adminWithdrawal(_ name: String) -> SCIMError {
        SCIMError(
            .conflict, nil,
            "\(name) was disabled by a Baton administrator; only an administrator can enable or delete them.")
    }

    /// Writes a replaced or patched user in one transaction: a withdrawal (`active: false`) revokes their tokens
    /// and ends their cockpit sessions as `user disable` does; the last enabled admin cannot be withdrawn.
    func store(
        _ user: SCIMUser, was old: SCIMUser, checked: Bool, provider: IdentityProvider, context: BatonRequestContext
    ) async throws -> Response {
        let now = clock.now()
        do {
            try await database.storage.write { db in
                // If-Match was checked against `old`: a change since (another request of the provider) makes this
                // one stale, so it is refused rather than written over it.
                let disabledBy = try await Self.requireOwned(old, unchanged: checked, by: provider, in: db)
                if !old.active, user.active, disabledBy != "scim:\(provider.name)" {
                    throw Self.adminWithdrawal(user.name)
                }
                if old.active, !user.active {
                    try await UserDirectory.keepAnAdmin(besides: user.name, in: db, doing: "deactivate")
                    try await db.execute(#"DELETE FROM cockpitSessions WHERE "user" = ?"#, user.name)
                    try await db.execute(
                        #"UPDATE refreshTokens SET revokedAt = ? WHERE "user" = ? AND revokedAt IS NULL"#, now,
                        user.name)
                }
                try await db.execute(
                    "UPDATE users SET displayName = ?, disabled = ?, disabledBy = ?, externalId = ? WHERE name = ?",
                    user.displayName, !user.active,
                    user.active ? nil : old.active ? "scim:\(provider.name)" : disabledBy, user.externalId, user.name)
            }
        } catch let error as ServerError {
            throw SCIMError(error.status, error.status == .conflict ? nil : "invalidValue", error.message)
        }
        // A deactivation or reactivation applies to the person's tokens at once; a rename empties no cache.
        if old.active != user.active { database.statusChanged() }
        var entries: [AuditEntry] = []
        func entry(_ action: String, _ detail: String) {
            entries.append(
                AuditEntry(
                    at: now, actor: "scim:\(provider.name)", action: action, subject: user.name,
                    address: context.clientAddress, detail: detail))
        }
        if old.active != user.active { entry(user.active ? "user-enabled" : "user-disabled", "by SCIM") }
        if old.displayName != user.displayName || old.externalId != user.externalId { entry("user-changed", "by SCIM") }
        try await audit.record(contentsOf: entries)
        return response(for: user)
    }

    func response(for user: SCIMUser) -> Response {
        var response = Self.scim(user.document(base: base))
        response.headers[.eTag] = user.version
        return response
    }
}
