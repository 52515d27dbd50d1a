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
                let token = BearerAuthenticationMiddleware.bearerToken(header),
                let provider = try await providers.provider(scimToken: token)
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
