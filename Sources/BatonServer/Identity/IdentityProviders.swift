import BatonOData
import BatonSQL
import Crypto
import Foundation

/// An OpenID Provider people sign in through (the airline's Entra ID, Okta, Keycloak …), as an admin registered
/// it with `baton-server idp add`.
public struct IdentityProvider: Sendable, Hashable {
    /// Which claim of the ID token becomes the Baton user name.
    public enum NameClaim: String, Sendable, CaseIterable {
        case preferredUsername = "preferred_username"
        case email
        case sub
    }

    /// Baton's name for it: 1–32 of `a`–`z`, `0`–`9` and `-`; it is part of the callback URL.
    public var name: String
    /// What the sign-in button says: "Sign in with <displayName>".
    public var displayName: String
    /// The provider's issuer identifier (OpenID Connect Discovery 1.0): `https://…`, or `http://` on loopback.
    public var issuer: String
    /// Baton's client id at the provider.
    public var clientID: String
    /// The claim the Baton user name comes from. Default: `preferred_username`.
    public var nameClaim = NameClaim.preferredUsername
    /// The claim that holds the person's groups. Default: `groups`.
    public var roleClaim = "groups"
    /// Which group gives which role; a person in none of them is refused. The highest role wins.
    public var roleMap: [String: User.Role] = [:]
    /// When it was added.
    public var createdAt = Date(timeIntervalSince1970: 0)

    public init(name: String, displayName: String? = nil, issuer: String, clientID: String) {
        self.name = name
        self.displayName = displayName ?? name
        self.issuer = issuer
        self.clientID = clientID
    }

    /// The redirect URI Baton uses at this provider (register it there): one per provider, so that an answer
    /// meant for one provider is never taken as another's (the mix-up attack).
    public func callbackURL(issuer baton: String) -> String { "\(baton)/oauth/idp/\(name)/callback" }

    /// `gs-staff=ground-staff,gs-admins=admin` as a map.
    ///
    /// - Throws: ``ServerError`` (400) naming the first bad pair.
    public static func roleMap(parsing text: String) throws -> [String: User.Role] {
        var map: [String: User.Role] = [:]
        for pair in text.split(separator: ",", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1).map {
                String($0).trimmingCharacters(in: .whitespaces)
            }
            guard parts.count == 2, !parts[0].isEmpty, parts[0].utf8.count <= 256,
                parts[0].unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F }),
                let role = User.Role(rawValue: parts[1])
            else {
                throw ServerError.badRequest(
                    "The role map takes GROUP=ROLE pairs separated by commas, ROLE one of \(User.Role.allCases.map(\.rawValue).joined(separator: ", ")); '\(pair.prefix(scalars: 80))' is not one.",
                    target: "role-map")
            }
            map[parts[0]] = role
        }
        return map
    }

    /// The role map as `group=role` pairs, by group.
    public var roleMapText: String {
        roleMap.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value.rawValue)" }.joined(separator: ",")
    }

    /// The highest role the groups give, or `nil` when none is mapped.
    func role(forGroups groups: [String]) -> User.Role? {
        let order: [User.Role] = [.admin, .supervisor, .groundStaff]
        // By Unicode scalar: a group spelled with other code points that Swift's `==` calls equal is another group.
        let given = Set(
            groups.flatMap { group in
                roleMap.filter { $0.key.unicodeScalars.elementsEqual(group.unicodeScalars) }.map(\.value)
            })
        return order.first(where: given.contains)
    }

    /// Whether `name` can name a provider.
    static func isValidName(_ name: String) -> Bool {
        (1...32).contains(name.utf8.count)
            && name.utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
    }

    /// Whether `issuer` is an acceptable issuer identifier: `https` (or `http` on a loopback host, for tests and
    /// a provider on the same machine), no query or fragment, and no user information.
    static func isAcceptable(issuer: String) -> Bool {
        guard issuer.utf8.count <= 512, let url = URLComponents(string: issuer), let host = url.host, !host.isEmpty,
            url.query == nil, url.fragment == nil, url.user == nil, url.password == nil
        else { return false }
        return url.scheme == "https" || BatonServer.isLoopbackHTTP(issuer)
    }
}

/// The registered identity providers, their sealed client secrets and their SCIM tokens.
///
/// The client secret is sealed with AES-GCM under a key derived from the master key, bound to the provider's
/// name: the database (or a backup of it) alone does not hold it. SCIM tokens are 32 random bytes, shown once and
/// kept as their SHA-256.
public struct IdentityProviders: Sendable {
    let database: ServerDatabase
    let clock: ServerClock
    let secretKey: SymmetricKey

    init(database: ServerDatabase, clock: ServerClock, masterKey: SymmetricKey) {
        self.database = database
        self.clock = clock
        secretKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: masterKey, info: Data("baton-identity-provider-secret".utf8), outputByteCount: 32)
    }

    static let columns = "name, displayName, issuer, clientID, nameClaim, roleClaim, roleMap, createdAt"

    /// Registers a provider.
    ///
    /// - Throws: ``ServerError``: 400 for a bad name, issuer, client id or secret; 409 when the name or the
    ///   issuer is registered already.
    public func add(_ provider: IdentityProvider, clientSecret: String) async throws {
        try Self.validate(provider, clientSecret: clientSecret)
        let sealed = try seal(clientSecret, provider: provider.name)
        let map = String(decoding: try JSONEncoder().encode(provider.roleMap.mapValues(\.rawValue)), as: UTF8.self)
        do {
            try await database.storage.write { db in
                try await db.execute(
                    "INSERT INTO identityProviders (\(Self.columns), sealedSecret) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    provider.name, provider.displayName, provider.issuer, provider.clientID,
                    provider.nameClaim.rawValue, provider.roleClaim, map, clock.now(), sealed)
            }
        } catch let error as StorageError where error.kind == .uniqueViolation {
            throw ServerError.conflict(
                "A provider named '\(provider.name)' or with the issuer \(provider.issuer) is registered already.",
                target: "name")
        }
    }

    /// Checks what ``add(_:clientSecret:)`` stores, before anything is fetched or written.
    ///
    /// - Throws: ``ServerError`` (400) naming the first bad field.
    public static func validate(_ provider: IdentityProvider, clientSecret: String) throws {
        guard IdentityProvider.isValidName(provider.name) else {
            throw ServerError.badRequest(
                "A provider's name is 1 to 32 of a-z, 0-9 and '-' (it is part of its callback URL).", target: "name")
        }
        guard IdentityProvider.isAcceptable(issuer: provider.issuer) else {
            throw ServerError.badRequest(
                "The issuer must be an https URL without query or fragment (http only on a loopback address).",
                target: "issuer")
        }
        guard (1...256).contains(provider.clientID.utf8.count),
            provider.clientID.utf8.allSatisfy({ (0x21...0x7E).contains($0) })
        else {
            throw ServerError.badRequest(
                "The client id must be 1 to 256 printable ASCII characters.", target: "client-id")
        }
        guard (1...1_024).contains(clientSecret.utf8.count), !clientSecret.utf8.contains(where: { $0 < 0x20 }) else {
            throw ServerError.badRequest(
                "The client secret must be 1 to 1024 bytes without control characters.", target: "client-secret")
        }
        guard User.isValidDisplayName(provider.displayName) else {
            throw ServerError.badRequest(
                "The display name must be 1 to 64 characters without controls.", target: "display-name")
        }
        guard (1...64).contains(provider.roleClaim.utf8.count),
            provider.roleClaim.utf8.allSatisfy({ (0x21...0x7E).contains($0) })
        else {
            throw ServerError.badRequest(
                "The role claim must be 1 to 64 printable ASCII characters.", target: "role-claim")
        }
        guard !provider.roleMap.isEmpty else {
            throw ServerError.badRequest(
                "Give a role map (--role-map \"group=ground-staff,…\"): without one nobody could sign in.",
                target: "role-map")
        }
    }

    /// Every provider, by name.
    public func list() async throws -> [IdentityProvider] {
        try await database.storage.read { db in
            try await db.fetchAll("SELECT \(Self.columns) FROM identityProviders ORDER BY name").map(
                Self.provider(row:))
        }
    }

    /// The provider named `name`, if any.
    public func provider(named name: String) async throws -> IdentityProvider? {
        guard IdentityProvider.isValidName(name) else { return nil }
        return try await database.storage.read { db in
            try await db.fetchOne("SELECT \(Self.columns) FROM identityProviders WHERE name = ?", name).map(
                Self.provider(row:))
        }
    }

    /// Removes a provider and revokes its SCIM tokens. Its people stay (their tokens and sessions too, until they
    /// expire or an admin disables them) but cannot sign in again until the provider is added again under the same
    /// name *and issuer*: the same name with another issuer vouches for none of them.
    ///
    /// - Returns: how many users are bound to it.
    /// - Throws: ``ServerError`` (404) for an unknown provider.
    @discardableResult
    public func remove(_ name: String) async throws -> Int {
        let now = clock.now()
        let bound = try await database.storage.write { db -> Int? in
            guard
                let issuer = try await db.fetchOne("SELECT issuer FROM identityProviders WHERE name = ?", name)?[
                    "issuer"
                ]
                .text
            else { return nil }
            try await db.execute("DELETE FROM identityProviders WHERE name = ?", name)
            try await db.execute("UPDATE scimTokens SET revokedAt = ? WHERE idp = ? AND revokedAt IS NULL", now, name)
            return Int(
                try await db.fetchOne("SELECT count(*) FROM users WHERE idp = ? AND idpIssuer = ?", name, issuer)?[0]
                    .integer
                    ?? 0)
        }
        guard let bound else { throw ServerError.notFound("There is no identity provider named '\(name)'.") }
        return bound
    }

    /// The provider's client secret, unsealed.
    func clientSecret(of name: String) async throws -> String {
        let sealed = try await database.storage.read { db in
            try await db.fetchOne("SELECT sealedSecret FROM identityProviders WHERE name = ?", name)?["sealedSecret"]
                .bytes
        }
        guard let sealed, let box = try? AES.GCM.SealedBox(combined: sealed),
            let opened = try? AES.GCM.open(box, using: secretKey, authenticating: Data(name.utf8))
        else {
            throw ServerError(
                .internalServerError, "InternalError",
                "The client secret of '\(name)' cannot be opened (another master key?). Add the provider again.")
        }
        return String(decoding: opened, as: UTF8.self)
    }

    func seal(_ secret: String, provider: String) throws -> Data {
        guard
            let combined = try AES.GCM.seal(Data(secret.utf8), using: secretKey, authenticating: Data(provider.utf8))
                .combined
        else { throw ServerError(.internalServerError, "InternalError", "Cannot seal the client secret.") }
        return combined
    }

    static func provider(row: SQLRow) throws -> IdentityProvider {
        guard let name = row["name"].text, let issuer = row["issuer"].text, let clientID = row["clientID"].text,
            let mapText = row["roleMap"].text,
            let map = try? JSONDecoder().decode([String: String].self, from: Data(mapText.utf8))
        else { throw StorageError(.other, "A row of the identityProviders table is damaged.") }
        var provider = IdentityProvider(
            name: name, displayName: row["displayName"].text, issuer: issuer, clientID: clientID)
        provider.nameClaim = row["nameClaim"].text.flatMap(IdentityProvider.NameClaim.init(rawValue:)) ?? .sub
        provider.roleClaim = row["roleClaim"].text ?? "groups"
        provider.roleMap = map.compactMapValues(User.Role.init(rawValue:))
        provider.createdAt = row["createdAt"].date ?? Date(timeIntervalSince1970: 0)
        return provider
    }

    // MARK: SCIM tokens

    /// Makes a SCIM bearer token for a provider and returns it: it is shown this once and kept only as its
    /// SHA-256. Earlier tokens stay valid until revoked (so the provider can be moved to the new one).
    ///
    /// - Throws: ``ServerError`` (404) for an unknown provider.
    public func createSCIMToken(for name: String) async throws -> String {
        let token = "scim_" + randomSecret()
        let now = clock.now()
        let created = try await database.storage.write { db -> Bool in
            guard try await db.fetchOne("SELECT 1 FROM identityProviders WHERE name = ?", name) != nil else {
                return false
            }
            try await db.execute(
                "INSERT INTO scimTokens (hash, idp, createdAt) VALUES (?, ?, ?)", secretHash(token), name, now)
            return true
        }
        guard created else { throw ServerError.notFound("There is no identity provider named '\(name)'.") }
        return token
    }

    /// Revokes every SCIM token of a provider; returns how many were live.
    public func revokeSCIMTokens(of name: String) async throws -> Int {
        let now = clock.now()
        return try await database.storage.write { db in
            try await db.execute("UPDATE scimTokens SET revokedAt = ? WHERE idp = ? AND revokedAt IS NULL", now, name)
        }
    }

    /// The provider a live SCIM token belongs to, or `nil`.
    func provider(scimToken token: String) async throws -> IdentityProvider? {
        guard token.hasPrefix("scim_"), (40...80).contains(token.utf8.count) else { return nil }
        let hash = secretHash(token)
        return try await database.storage.read { db in
            try await db.fetchOne(
                """
                SELECT \(Self.columns) FROM identityProviders
                WHERE name = (SELECT idp FROM scimTokens WHERE hash = ? AND revokedAt IS NULL)
                """, hash
            ).map(Self.provider(row:))
        }
    }
}
