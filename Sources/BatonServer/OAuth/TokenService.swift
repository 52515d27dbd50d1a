import BatonOData
import Foundation
import JWTKit
import Logging
import Synchronization

/// Issues, rotates, verifies and revokes tokens.
///
/// Access tokens are ES256 JWTs of at most 15 minutes. Refresh tokens are random, stored as SHA-256 hashes,
/// single use: each refresh rotates the token within its family, and presenting a used token revokes the
/// whole family (RFC 6819 §5.2.2.3). Authorization codes are single use too; replaying one revokes the tokens
/// issued from it.
struct TokenService: Sendable {
    let configuration: OAuthConfiguration
    let issuer: IssuerBox
    let database: ServerDatabase
    let clock: ServerClock
    let signingKeys: SigningKeys
    let users: UserDirectory
    let throttle: LoginThrottle
    let audit: AuditLog
    /// What each token's status read returned, until a status changes (``TokenStatusCache``).
    let statusCache: TokenStatusCache
    /// Tokens whose signature was already checked (their claims are still checked every time).
    let verified = VerifiedTokens()

    /// What the token endpoint returns.
    struct TokenResponse: Codable, Sendable {
        var accessToken: String
        var tokenType = "Bearer"
        var expiresIn: Int
        var refreshToken: String
        var scope: String

        enum CodingKeys: String, CodingKey {
            case accessToken = "access_token"
            case tokenType = "token_type"
            case expiresIn = "expires_in"
            case refreshToken = "refresh_token"
            case scope
        }
    }

    /// The caller of the token endpoint, for throttling and the audit log.
    struct Caller: Sendable {
        var address: String
    }

    // MARK: Grants

    func grant(_ form: [String: String], caller: Caller) async throws -> TokenResponse {
        guard let grantType = form["grant_type"], !grantType.isEmpty else {
            throw OAuthError.invalidRequest("The grant_type parameter is missing.")
        }
        guard let client = configuration.client(form["client_id"]) else {
            throw OAuthError.invalidClient("Unknown client_id; use the client id your app was registered with.")
        }
        guard ["password", "refresh_token", "authorization_code", DeviceAuthorizations.grantType].contains(grantType)
        else {
            throw OAuthError("unsupported_grant_type", "Grant type '\(grantType.prefix(40))' is not supported.")
        }
        guard client.grants.contains(grantType), client.id != OAuthClient.cockpit.id else {
            throw OAuthError(
                "unauthorized_client", "Client '\(client.id)' may not use the \(grantType) grant at the token endpoint."
            )
        }
        switch grantType {
        case "password": return try await passwordGrant(form, client: client, caller: caller)
        case "refresh_token": return try await refreshGrant(form, client: client, caller: caller)
        case DeviceAuthorizations.grantType: return try await deviceCodeGrant(form, client: client, caller: caller)
        default: return try await codeGrant(form, client: client, caller: caller)
        }
    }

    /// The device authorization grant (RFC 8628 §3.4): tokens once the person approved the user code.
    func deviceCodeGrant(_ form: [String: String], client: OAuthClient, caller: Caller) async throws -> TokenResponse {
        guard let code = form["device_code"], !code.isEmpty, code.count <= 128 else {
            throw OAuthError.invalidRequest("The device_code parameter is missing.")
        }
        let approved = try await deviceAuthorizations.poll(deviceCode: code, client: client.id)
        guard try await users.user(named: approved.user).map({ !$0.disabled }) == true else {
            throw OAuthError.invalidGrant("The user who approved is disabled or no longer exists.")
        }
        try await audit.record(
            AuditEntry(
                at: clock.now(), actor: approved.user, action: "sign-in", subject: approved.user,
                address: caller.address, detail: "client \(client.id), device authorization"))
        return try await issue(user: approved.user, client: client, scope: approved.scope, family: UUID().uuidString)
    }

    var deviceAuthorizations: DeviceAuthorizations { DeviceAuthorizations(database: database, clock: clock) }

    func requestedScope(_ text: String?) throws(OAuthError) -> String {
        guard let text, !text.isEmpty else { return configuration.scopes.joined(separator: " ") }
        let asked = text.split(separator: " ").map(String.init)
        for scope in asked where !configuration.scopes.contains(scope) {
            throw OAuthError(
                "invalid_scope",
                "Scope '\(scope.prefix(40))' is unknown. Known scopes: \(configuration.scopes.joined(separator: " ")).")
        }
        return asked.joined(separator: " ")
    }

    func passwordGrant(_ form: [String: String], client: OAuthClient, caller: Caller) async throws -> TokenResponse {
        guard let name = form["username"], !name.isEmpty, let password = form["password"], !password.isEmpty else {
            throw OAuthError.invalidRequest("The password grant needs username and password.")
        }
        let scope = try requestedScope(form["scope"])
        let user = try await signIn(name: name, password: password, clientID: client.id, caller: caller)
        return try await issue(user: user.name, client: client, scope: scope, family: UUID().uuidString)
    }

    /// Checks credentials under brute-force protection, and records the outcome in the audit log.
    func signIn(name: String, password: String, clientID: String, caller: Caller) async throws -> User {
        if let wait = try await throttle.retryAfter(user: name, address: caller.address) {
            throw OAuthError(
                "too_many_attempts", "Too many failed sign-ins. Try again in \(wait) seconds.",
                status: .tooManyRequests, retryAfter: wait)
        }
        let authenticated: User?
        do {
            authenticated = try await users.authenticate(name: name, password: password)
        } catch let error as OAuthError {
            // A password for someone who signs in through a provider: counted like a wrong one (guessing which
            // names a provider's are is slowed as guessing passwords is), and audited.
            try await throttle.recordFailure(user: name, address: caller.address)
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: nil, action: "sign-in-failed", subject: name, address: caller.address,
                    detail: "a password for a provider's user, client \(clientID)"))
            throw error
        }
        guard let user = authenticated else {
            try await throttle.recordFailure(user: name, address: caller.address)
            // A name that is no user is often a password typed into the wrong field: it never reaches the log.
            let known = try await users.user(named: name) != nil
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: nil, action: "sign-in-failed", subject: known ? name : nil,
                    address: caller.address,
                    detail: known ? "client \(clientID)" : "unknown user name, client \(clientID)"))
            throw OAuthError.invalidGrant("The user name or password is wrong, or the user is disabled.")
        }
        try await throttle.recordSuccess(user: name, address: caller.address)
        try await audit.record(
            AuditEntry(
                at: clock.now(), actor: user.name, action: "sign-in", subject: user.name, address: caller.address,
                detail: "client \(clientID)"))
        return user
    }

    func refreshGrant(_ form: [String: String], client: OAuthClient, caller: Caller) async throws -> TokenResponse {
        guard let token = form["refresh_token"], !token.isEmpty else {
            throw OAuthError.invalidRequest("The refresh_token grant needs refresh_token.")
        }
        let now = clock.now().timeIntervalSince1970
        let hash = secretHash(token)
        enum Outcome {
            case ok(user: String, scope: String, family: String), reused(family: String, user: String), invalid(String)
        }
        let outcome = try await database.storage.write { db -> Outcome in
            guard
                let row = try await db.fetchOne(
                    #"SELECT family, "user", revokedAt, usedAt, expiresAt, clientID, scope FROM refreshTokens WHERE hash = ?"#,
                    hash),
                let family = row["family"].text, let user = row["user"].text
            else {
                return .invalid("The refresh token is unknown.")
            }
            if row["revokedAt"] != .null { return .invalid("The refresh token was revoked.") }
            if row["usedAt"] != .null {
                try await db.execute(
                    "UPDATE refreshTokens SET revokedAt = ? WHERE family = ? AND revokedAt IS NULL", now, family)
                return .reused(family: family, user: user)
            }
            if (row["expiresAt"].real ?? 0) <= now { return .invalid("The refresh token has expired; sign in again.") }
            if row["clientID"].text != client.id {
                return .invalid("The refresh token was issued to another client.")
            }
            guard try await Self.isActive(user, in: db) else {
                return .invalid("The user is disabled or no longer exists.")
            }
            try await db.execute("UPDATE refreshTokens SET usedAt = ? WHERE hash = ?", now, hash)
            return .ok(user: user, scope: row["scope"].text ?? "", family: family)
        }
        switch outcome {
        case .invalid(let reason): throw OAuthError.invalidGrant(reason)
        case .reused(_, let user):
            // The family's revocation applies to its access tokens at once, in this instance too.
            database.statusChanged()
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: nil, action: "refresh-token-reuse", subject: user, address: caller.address,
                    detail: "token family revoked"))
            throw OAuthError.invalidGrant(
                "The refresh token was already used; every token of this sign-in is now revoked. Sign in again.")
        case .ok(let user, let grantedScope, let family):
            var scope = grantedScope
            if let asked = form["scope"], !asked.isEmpty {
                let narrowed = try requestedScope(asked)
                let granted = Set(grantedScope.split(separator: " "))
                guard narrowed.split(separator: " ").allSatisfy(granted.contains) else {
                    throw OAuthError("invalid_scope", "A refresh may not widen the granted scope.")
                }
                scope = narrowed
            }
            return try await issue(user: user, client: client, scope: scope, family: family)
        }
    }

    func codeGrant(_ form: [String: String], client: OAuthClient, caller: Caller) async throws -> TokenResponse {
        guard let code = form["code"], !code.isEmpty, let redirectURI = form["redirect_uri"] else {
            throw OAuthError.invalidRequest("The authorization_code grant needs code and redirect_uri.")
        }
        guard let verifier = form["code_verifier"] else {
            throw OAuthError.invalidRequest("The code_verifier parameter is missing; this server requires PKCE (S256).")
        }
        guard PKCE.isWellFormed(verifier) else {
            throw OAuthError.invalidRequest("code_verifier must be 43 to 128 unreserved characters.")
        }
        let redeemed = try await redeem(code: code, verifier: verifier, redirectURI: redirectURI, client: client)
        return try await issue(user: redeemed.user, client: client, scope: redeemed.scope, family: redeemed.family)
    }

    /// Redeems an authorization code (once: a second use revokes what the first issued) and returns whom it was
    /// issued for; the admin cockpit signs its sessions in with this, without tokens.
    ///
    /// - Throws: ``OAuthError`` (`invalid_grant`) for an unknown, used, expired or foreign code, a redirect URI
    ///   or verifier that does not match, or a user disabled meanwhile.
    func redeem(code: String, verifier: String, redirectURI: String, client: OAuthClient) async throws -> (
        user: String, scope: String, family: String
    ) {
        let now = clock.now().timeIntervalSince1970
        let hash = secretHash(code)
        enum Outcome { case ok(user: String, scope: String, family: String), invalid(String), reused(String) }
        let outcome = try await database.storage.write { db -> Outcome in
            guard
                let row = try await db.fetchOne(
                    """
                    SELECT "user", usedAt, family, expiresAt, clientID, redirectURI, codeChallenge, scope
                    FROM authorizationCodes WHERE hash = ?
                    """, hash),
                let user = row["user"].text
            else {
                return .invalid("The authorization code is unknown.")
            }
            if row["usedAt"] != .null {
                let reason = "The authorization code was already used; tokens issued from it are revoked."
                if let family = row["family"].text,
                    try await db.execute(
                        "UPDATE refreshTokens SET revokedAt = ? WHERE family = ? AND revokedAt IS NULL", now, family)
                        > 0
                {
                    return .reused(reason)
                }
                // Replayed again: nothing more is revoked, so no cache has anything to forget.
                return .invalid(reason)
            }
            try await db.execute("UPDATE authorizationCodes SET usedAt = ? WHERE hash = ?", now, hash)
            if (row["expiresAt"].real ?? 0) <= now { return .invalid("The authorization code has expired.") }
            if row["clientID"].text != client.id {
                return .invalid("The authorization code was issued to another client.")
            }
            if row["redirectURI"].text != redirectURI {
                return .invalid("redirect_uri does not match the authorization request.")
            }
            if PKCE.challenge(for: verifier) != row["codeChallenge"].text {
                return .invalid("code_verifier does not match the code challenge.")
            }
            guard try await Self.isActive(user, in: db) else {
                return .invalid("The user is disabled or no longer exists.")
            }
            let family = UUID().uuidString
            try await db.execute("UPDATE authorizationCodes SET family = ? WHERE hash = ?", family, hash)
            return .ok(user: user, scope: row["scope"].text ?? "", family: family)
        }
        switch outcome {
        case .invalid(let reason): throw OAuthError.invalidGrant(reason)
        case .reused(let reason):
            // The revocation applies to the tokens issued from the code at once, in this instance too.
            database.statusChanged()
            throw OAuthError.invalidGrant(reason)
        case .ok(let user, let scope, let family): return (user, scope, family)
        }
    }

    /// Whether `user` exists and is not disabled, inside a grant's transaction.
    static func isActive(_ user: String, in db: any SQLConnection) async throws -> Bool {
        try await db.fetchOne("SELECT disabled FROM users WHERE name = ?", user).map { $0[0].bool == false } ?? false
    }

    /// Stores a new authorization code for a signed-in user and returns it.
    func createAuthorizationCode(
        user: String, client: OAuthClient, redirectURI: String, challenge: String, scope: String
    )
        async throws -> String
    {
        let code = randomSecret()
        let expires = clock.now().addingTimeInterval(configuration.authorizationCodeLifetime).timeIntervalSince1970
        let hash = secretHash(code)
        try await database.storage.write { db in
            try await db.execute(
                #"INSERT INTO authorizationCodes (hash, "user", clientID, redirectURI, codeChallenge, scope, expiresAt) VALUES (?, ?, ?, ?, ?, ?, ?)"#,
                hash, user, client.id, redirectURI, challenge, scope, expires)
        }
        return code
    }

    // MARK: Issuing

    func issue(user: String, client: OAuthClient, scope: String, family: String) async throws -> TokenResponse {
        // Whole seconds: many JWT libraries reject a fractional NumericDate.
        let now = Date(timeIntervalSince1970: clock.now().timeIntervalSince1970.rounded(.down))
        let lifetime = min(configuration.accessTokenLifetime, 900)
        let claims = AccessTokenClaims(
            iss: IssuerClaim(value: issuer.value), sub: SubjectClaim(value: user),
            aud: AudienceClaim(value: configuration.audience), scope: scope,
            exp: ExpirationClaim(value: now.addingTimeInterval(lifetime)), iat: IssuedAtClaim(value: now),
            jti: IDClaim(value: UUID().uuidString), clientID: client.id, family: family)
        let keys = try await signingKeys.current()
        let accessToken = Self.withLowS(
            try await keys.collection.sign(claims, kid: JWKIdentifier(string: keys.currentID)))
        let refreshToken = randomSecret()
        let hash = secretHash(refreshToken)
        let expires = now.addingTimeInterval(configuration.refreshTokenLifetime)
        try await database.storage.write { db in
            try await db.execute(
                #"INSERT INTO refreshTokens (hash, family, "user", clientID, scope, createdAt, expiresAt) VALUES (?, ?, ?, ?, ?, ?, ?)"#,
                hash, family, user, client.id, scope, now, expires)
        }
        return TokenResponse(
            accessToken: accessToken, expiresIn: Int(lifetime), refreshToken: refreshToken, scope: scope)
    }
}
