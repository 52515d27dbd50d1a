import BatonOData
import BatonSQL
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// A SCIM error (RFC 7644 §3.12): the status, a `scimType` where the RFC has one, and a detail that names what
/// was wrong (never a token).
struct SCIMError: Error {
    var status: HTTPResponse.Status
    var scimType: String?
    var detail: String

    init(_ status: HTTPResponse.Status, _ scimType: String?, _ detail: String) {
        self.status = status
        self.scimType = scimType
        self.detail = detail
    }

    var response: Response {
        var fields: [(String, JSONValue)] = [
            ("schemas", .array([.string("urn:ietf:params:scim:api:messages:2.0:Error")])),
            ("status", .string(String(status.code))), ("detail", .string(detail)),
        ]
        if let scimType { fields.append(("scimType", .string(scimType))) }
        var response = SCIMRoutes.scim(.object(fields), status: status)
        if status == .unauthorized { response.headers[.wwwAuthenticate] = #"Bearer realm="scim""# }
        return response
    }
}

/// Baton as a SCIM 2.0 service provider (RFC 7643, RFC 7644) at `/scim/v2/`, so that an identity provider
/// provisions and withdraws its people: `Users` (create, read, replace, PATCH, delete, list with
/// `filter=userName eq "…"` or `externalId eq "…"`, paging, `ETag`/`If-Match`) and the discovery resources.
///
/// Each request carries a provider's SCIM token (`baton-server idp scim-token NAME`) and sees only that provider's
/// people: a local user or another provider's is "not found". A role is never set over SCIM (`roles` is read-only):
/// it comes from the provider's groups through Baton's role map at sign-in. `active: false` disables the person
/// (tokens stop at once; tablets hand over their changes and remove them at next contact); `DELETE` deletes them.
/// Every change is audited with `scim:PROVIDER` as its actor, and applies whole or not at all.
struct SCIMRoutes {
    let providers: IdentityProviders
    let users: UserDirectory
    let audit: AuditLog
    let clock: ServerClock
    let issuer: IssuerBox
    let database: ServerDatabase

    static let userSchema = "urn:ietf:params:scim:schemas:core:2.0:User"
    static let listSchema = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
    static let patchSchema = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
    /// The most resources one page lists.
    static let maxCount = 200

    func add(to router: Router<BatonRequestContext>) {
        let scim = router.group("/scim/v2")
        scim.get("ServiceProviderConfig") { request, context in
            try await serving(request, context) { _, _ in Self.scim(serviceProviderConfig) }
        }
        scim.get("ResourceTypes") { request, context in
            try await serving(request, context) { _, _ in Self.scim(list([resourceType], total: 1, start: 1)) }
        }
        scim.get("ResourceTypes/:id") { request, context in
            try await serving(request, context) { _, _ in
                guard context.parameters.get("id") == "User" else {
                    throw SCIMError(.notFound, nil, "There is no such resource type; Baton serves User.")
                }
                return Self.scim(resourceType)
            }
        }
        scim.get("Schemas") { request, context in
            try await serving(request, context) { _, _ in
                Self.scim(list([Self.userSchemaDocument(meta: meta)], total: 1, start: 1))
            }
        }
        scim.get("Schemas/:id") { request, context in
            try await serving(request, context) { _, _ in
                guard context.parameters.get("id") == Self.userSchema else {
                    throw SCIMError(.notFound, nil, "There is no such schema; Baton serves \(Self.userSchema).")
                }
                return Self.scim(Self.userSchemaDocument(meta: meta))
            }
        }
        // The discovery resources are read-only (RFC 7644 §4): other methods answer 405; any other path under
        // /scim/v2 answers a SCIM 404.
        for path in ["ServiceProviderConfig", "ResourceTypes", "ResourceTypes/:id", "Schemas", "Schemas/:id"] {
            for method in [HTTPRequest.Method.post, .put, .patch, .delete] {
                scim.on(RouterPath(path), method: method) { request, context in
                    try await serving(request, context) { _, _ in
                        throw SCIMError(.methodNotAllowed, nil, "\(path.split(separator: "/")[0]) is read-only.")
                    }
                }
            }
        }
        for method in [HTTPRequest.Method.get, .post, .put, .patch, .delete] {
            scim.on("**", method: method) { request, context in
                try await serving(request, context) { _, _ in
                    throw SCIMError(.notFound, nil, "There is no such SCIM resource; Baton serves /Users.")
                }
            }
        }
        scim.get("Users") { request, context in
            try await serving(request, context) { provider, _ in try await listUsers(request, provider: provider) }
        }
        scim.post("Users") { request, context in
            try await serving(request, context) { provider, context in
                try await createUser(try await body(request, context), provider: provider, context: context)
            }
        }
        // Baton serves one resource type, so a search at the root (RFC 7644 §3.4.3) is a search of Users.
        for path in ["Users/.search", ".search"] {
            scim.post(RouterPath(path)) { request, context in
                try await serving(request, context) { provider, context in
                    let body = try await body(request, context)
                    try Self.requireSchema(body, "urn:ietf:params:scim:api:messages:2.0:SearchRequest")
                    func text(_ key: String) -> String? {
                        switch body[key] {
                        case .string(let text): return text
                        case .number(let number): return number
                        case .array(let list): return list.compactMap(\.stringValue).joined(separator: ",")
                        default: return nil
                        }
                    }
                    return try await listUsers(
                        provider: provider, filter: text("filter"), start: text("startIndex"), count: text("count"),
                        projection: Projection(attributes: text("attributes"), excluded: text("excludedAttributes")))
                }
            }
        }
        scim.get("Users/:id") { request, context in
            try await serving(request, context) { provider, context in
                let user = try await owned(context.parameters.get("id") ?? "", by: provider)
                let query = try Self.query(request)
                var response = Self.scim(
                    Projection(attributes: query["attributes"], excluded: query["excludedAttributes"]).apply(
                        to: user.document(base: base)))
                response.headers[.eTag] = user.version
                return response
            }
        }
        // PUT replaces, PATCH changes: both read the user their provider owns, check If-Match, and store.
        let changes: [(HTTPRequest.Method, @Sendable (SCIMUser, JSONValue) throws -> SCIMUser)] = [
            (.put, { try replaced($0, with: $1) }), (.patch, { try patched($0, with: $1) }),
        ]
        for (method, change) in changes {
            scim.on("Users/:id", method: method) { request, context in
                try await serving(request, context) { provider, context in
                    let user = try await owned(context.parameters.get("id") ?? "", by: provider)
                    try checkPrecondition(request, user)
                    let changed = try change(user, try await body(request, context))
                    return try await store(
                        changed, was: user, checked: request.headers[.ifMatch] != nil, provider: provider,
                        context: context)
                }
            }
        }
        scim.delete("Users/:id") { request, context in
            try await serving(request, context) { provider, context in
                let user = try await owned(context.parameters.get("id") ?? "", by: provider)
                try checkPrecondition(request, user)
                let checked = request.headers[.ifMatch] != nil
                do {
                    try await users.delete(user.name) { db in
                        // Deleting would let the person come back (a new user at their next sign-in): a provider
                        // never undoes an admin's withdrawal this way either.
                        let disabledBy = try await Self.requireOwned(user, unchanged: checked, by: provider, in: db)
                        if let disabledBy, disabledBy != "scim:\(provider.name)" {
                            throw Self.adminWithdrawal(user.name)
                        }
                    }
                } catch let error as ServerError {
                    throw SCIMError(error.status, nil, error.message)
                }
                try await audit.record(
                    AuditEntry(
                        at: clock.now(), actor: "scim:\(provider.name)", action: "user-deleted", subject: user.name,
                        address: context.clientAddress, detail: "by SCIM"))
                return Response(status: .noContent)
            }
        }
    }

    // MARK: Requests

    /// Authenticates the provider's SCIM token and turns every failure into a SCIM error document.
    func serving(
        _ request: Request, _ context: BatonRequestContext,
        _ body: (IdentityProvider, BatonRequestContext) async throws -> Response
    ) async throws -> Response {
        do {
            guard let header = request.headers[.authorization], header.utf8.count <= 256,
                header.lowercased().hasPrefix("bearer "),
                let provider = try await providers.provider(scimToken: String(header.dropFirst(7)))
            else { throw SCIMError(.unauthorized, nil, "Send a provider's SCIM token: Authorization: Bearer scim_….") }
            return try await body(provider, context)
        } catch let error as SCIMError {
            return error.response
        } catch let error as ServerError where error.status.code < 500 {
            return SCIMError(error.status, nil, error.message).response
        }
    }

    /// The body as a JSON object, read by the project's own strict parser (duplicate members, NUL, invalid UTF-8
    /// and deep nesting refused).
    func body(_ request: Request, _ context: BatonRequestContext) async throws -> JSONValue {
        var request = request
        let buffer: ByteBuffer
        do { buffer = try await request.collectBody(upTo: 64 * 1024) } catch {
            throw SCIMError(.contentTooLarge, "invalidSyntax", "The body is larger than 64 KiB.")
        }
        let value: JSONValue
        do { value = try JSONValue(parsing: Array(buffer: buffer)) } catch {
            throw SCIMError(.badRequest, "invalidSyntax", "The body is not JSON: \(error.message)")
        }
        guard value.objectMembers != nil else {
            throw SCIMError(.badRequest, "invalidSyntax", "The body is not a JSON object.")
        }
        return value
    }

    /// The user `id` names, if it belongs to `provider`; "not found" for anyone else's.
    func owned(_ id: String, by provider: IdentityProvider) async throws -> SCIMUser {
        guard User.isValidName(id),
            let user = try await database.storage.read({ db in
                try await db.fetchOne(
                    "SELECT \(SCIMUser.columns) FROM users WHERE name = ? AND idp = ? AND idpIssuer = ?", id,
                    provider.name, provider.issuer
                ).map(SCIMUser.init(row:))
            })
        else { throw SCIMError(.notFound, nil, "There is no user '\(id.prefix(64))' provisioned by \(provider.name).") }
        return user
    }

    /// RFC 7644 §3.14: a stale `If-Match` is refused (412) and nothing changes.
    func checkPrecondition(_ request: Request, _ user: SCIMUser) throws {
        guard let match = request.headers[.ifMatch] else { return }
        let tags = match.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard tags.contains("*") || tags.contains(user.version) else {
            throw SCIMError(
                .preconditionFailed, nil, "The user changed since that version (If-Match \(user.version) now).")
        }
    }

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
        var condition = "idp = ? AND idpIssuer = ?"
        var arguments: [SQLValue] = [.text(provider.name), .text(provider.issuer)]
        if let filter {
            let (attribute, value) = try Self.equalityFilter(filter)
            condition += attribute == "userName" ? " AND lower(name) = lower(?)" : " AND externalId = ?"
            arguments.append(.text(value))
        }
        let (total, page) = try await database.storage.read { [condition, arguments] db in
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
                    "Baton keeps userName, displayName, active and externalId of a user; not \(OpenIDRelyingParty.printable(key))."
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

    // MARK: Documents

    var base: String { issuer.value + "/scim/v2" }

    func meta(_ type: String, _ location: String) -> JSONValue {
        .object([("resourceType", .string(type)), ("location", .string(base + location))])
    }

    func list(_ resources: [JSONValue], total: Int, start: Int) -> JSONValue {
        .object([
            ("schemas", .array([.string(Self.listSchema)])), ("totalResults", .number(String(total))),
            ("startIndex", .number(String(start))), ("itemsPerPage", .number(String(resources.count))),
            ("Resources", .array(resources)),
        ])
    }

    var serviceProviderConfig: JSONValue {
        func supported(_ flag: Bool) -> JSONValue { .object([("supported", .bool(flag))]) }
        return .object([
            ("schemas", .array([.string("urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig")])),
            ("documentationUri", .string("https://github.com/baton/baton/blob/main/docs/SECURITY.md")),
            ("patch", supported(true)),
            (
                "bulk",
                .object([
                    ("supported", .bool(false)), ("maxOperations", .number("0")), ("maxPayloadSize", .number("0")),
                ])
            ),
            ("filter", .object([("supported", .bool(true)), ("maxResults", .number(String(Self.maxCount)))])),
            ("changePassword", supported(false)), ("sort", supported(false)), ("etag", supported(true)),
            (
                "authenticationSchemes",
                .array([
                    .object([
                        ("type", .string("oauthbearertoken")), ("name", .string("SCIM token")),
                        ("description", .string("A provider's token from baton-server idp scim-token NAME.")),
                        ("primary", .bool(true)),
                    ])
                ])
            ),
            ("meta", meta("ServiceProviderConfig", "/ServiceProviderConfig")),
        ])
    }

    var resourceType: JSONValue {
        .object([
            ("schemas", .array([.string("urn:ietf:params:scim:schemas:core:2.0:ResourceType")])),
            ("id", .string("User")), ("name", .string("User")), ("endpoint", .string("/Users")),
            ("description", .string("A person who signs in to Baton")), ("schema", .string(Self.userSchema)),
            ("schemaExtensions", .array([])),
            ("meta", meta("ResourceType", "/ResourceTypes/User")),
        ])
    }

    /// The core User schema as far as Baton keeps it (RFC 7643 §7).
    static func userSchemaDocument(meta: (String, String) -> JSONValue) -> JSONValue {
        func attribute(
            _ name: String, _ type: String = "string", mutability: String = "readWrite", required: Bool = false,
            uniqueness: String = "none", multi: Bool = false, sub: [JSONValue]? = nil, description: String
        ) -> JSONValue {
            var fields: [(String, JSONValue)] = [
                ("name", .string(name)), ("type", .string(type)), ("multiValued", .bool(multi)),
                ("description", .string(description)), ("required", .bool(required)),
                ("mutability", .string(mutability)), ("returned", .string("default")),
                ("uniqueness", .string(uniqueness)),
            ]
            if type == "string" { fields.append(("caseExact", .bool(false))) }
            if let sub { fields.append(("subAttributes", .array(sub))) }
            return .object(fields)
        }
        return .object([
            ("schemas", .array([.string("urn:ietf:params:scim:schemas:core:2.0:Schema")])),
            ("id", .string(userSchema)), ("name", .string("User")), ("description", .string("User Account")),
            (
                "attributes",
                .array([
                    attribute(
                        "userName", mutability: "immutable", required: true, uniqueness: "server",
                        description: "The Baton user name."),
                    attribute("displayName", description: "The name apps show."),
                    // Baton always knows whether a person is active: it can be set, not removed.
                    attribute("active", "boolean", required: true, description: "false withdraws the person."),
                    attribute(
                        "roles", "complex", mutability: "readOnly", multi: true,
                        sub: [attribute("value", mutability: "readOnly", description: "The Baton role.")],
                        description: "The Baton role, from the provider's groups at sign-in."),
                ])
            ),
            ("meta", meta("Schema", "/Schemas/\(userSchema)")),
        ])
    }

    static func scim(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/scim+json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(string: value.serialized)))
    }
}

/// `attributes` and `excludedAttributes` (RFC 7644 §3.4.2.5) over a resource's top-level attributes; `id` and
/// `schemas` are always returned.
struct Projection {
    var attributes: Set<String>?
    var excluded: Set<String> = []

    init(attributes: String?, excluded: String?) {
        func names(_ text: String?) -> Set<String>? {
            text.map { text in
                Set(
                    text.split(separator: ",").map {
                        // A full URN names the attribute after the schema's last ':'.
                        String($0.trimmingCharacters(in: .whitespaces).split(separator: ":").last ?? "")
                            .split(separator: ".").first.map { String($0).lowercased() } ?? ""
                    })
            }
        }
        self.attributes = names(attributes)
        self.excluded = names(excluded) ?? []
    }

    func apply(to document: JSONValue) -> JSONValue {
        guard case .object(let fields) = document else { return document }
        return .object(
            fields.filter { key, _ in
                let name = key.lowercased()
                if name == "id" || name == "schemas" { return true }
                if let attributes { return attributes.contains(name) }
                return !excluded.contains(name)
            })
    }
}

/// A user as SCIM sees them.
struct SCIMUser: Sendable, Equatable {
    var name: String
    var displayName: String
    var active: Bool
    var externalId: String?
    var role: User.Role
    var createdAt: Date

    static let columns = "name, displayName, disabled, externalId, role, createdAt"

    init(name: String, displayName: String, active: Bool, externalId: String?, role: User.Role, createdAt: Date) {
        self.name = name
        self.displayName = displayName
        self.active = active
        self.externalId = externalId
        self.role = role
        self.createdAt = createdAt
    }

    init(row: SQLRow) throws {
        guard let name = row["name"].text, let role = row["role"].text.flatMap(User.Role.init(rawValue:)) else {
            throw StorageError(.other, "A row of the users table is damaged.")
        }
        self.init(
            name: name, displayName: row["displayName"].text ?? name, active: row["disabled"].bool == false,
            externalId: row["externalId"].text, role: role,
            createdAt: row["createdAt"].date ?? Date(timeIntervalSince1970: 0))
    }

    /// A weak ETag of what SCIM shows of the user.
    var version: String {
        let text = [name, displayName, active ? "1" : "0", externalId ?? "", role.rawValue].joined(separator: "\u{0}")
        return #"W/""# + SHA256.hash(data: Data(text.utf8)).lowercaseHex.prefix(16) + #"""#
    }

    func document(base: String) -> JSONValue {
        let created = ISO8601DateFormatter().string(from: createdAt)
        var fields: [(String, JSONValue)] = [
            ("schemas", .array([.string(SCIMRoutes.userSchema)])), ("id", .string(name)), ("userName", .string(name)),
            ("active", .bool(active)), ("roles", .array([.object([("value", .string(role.rawValue))])])),
        ]
        // A display name that is the user name is no display name of its own (what a PATCH remove leaves).
        if displayName != name { fields.insert(("displayName", .string(displayName)), at: 3) }
        if let externalId { fields.append(("externalId", .string(externalId))) }
        fields.append(
            (
                "meta",
                .object([
                    ("resourceType", .string("User")), ("created", .string(created)),
                    ("lastModified", .string(created)), ("location", .string("\(base)/Users/\(name)")),
                    ("version", .string(version)),
                ])
            ))
        return .object(fields)
    }
}
