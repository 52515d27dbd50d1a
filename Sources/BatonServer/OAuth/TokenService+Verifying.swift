import BatonOData
import Foundation
import JWTKit
import Logging
import Synchronization

extension TokenService {
    // MARK: Verifying and revoking

    /// A valid access token and its claims: signature, issuer, audience and expiry checked with the injected
    /// clock, not revoked, and its user still active.
    func verifyAccessToken(_ token: String) async throws(ServerError) -> (token: VerifiedToken, role: User.Role) {
        let verifiedToken: VerifiedToken
        let keys: SigningKeys.Loaded
        do {
            keys = try await signingKeys.current()
        } catch {
            throw .databaseUnavailable("The server cannot check the token right now; try again.")
        }
        // A remembered token counts only while its key is listed: a key rotated out stops its tokens.
        if let cached = verified.token(token), keys.ids.contains(cached.keyID) {
            verifiedToken = cached
        } else {
            guard let keyID = Self.strictES256KeyID(token) else {
                throw .unauthorized("The access token is malformed or its signature is invalid.")
            }
            do {
                let usable = keys.ids.contains(keyID) ? keys : try await signingKeys.verifying(keyID: keyID)
                guard usable.ids.contains(keyID) else { throw ServerError.unauthorized("Unknown key.") }
                verifiedToken = VerifiedToken(
                    claims: try await usable.collection.verify(token, as: AccessTokenClaims.self), keyID: keyID)
            } catch {
                throw .unauthorized("The access token is malformed or its signature is invalid.")
            }
            verified.remember(token, verifiedToken)
        }
        let claims = verifiedToken.claims
        let now = clock.now()
        guard claims.exp.value > now else { throw .unauthorized("The access token has expired; refresh it.") }
        guard claims.iat.value <= now.addingTimeInterval(60) else {
            throw .unauthorized("The access token is not valid yet.")
        }
        guard claims.iss.value == issuer.value, claims.aud.value.contains(configuration.audience) else {
            throw .unauthorized("The access token was issued for another server.")
        }
        let jti = claims.jti.value
        let user = claims.sub.value
        // Revocation and the user's current status: from the token-status cache while nothing changed since they were
        // read, otherwise from the database (one query). Every change of a status empties the cache first — at once
        // in this process, through the epoch file from an admin command on SQLite, through NOTIFY from another
        // instance on PostgreSQL (while that is not heard, the cache is not used).
        let family = claims.family ?? ""
        let key = verifiedToken.statusKey
        let generation = statusCache.generation()
        let status: TokenStatusCache.Status?
        if let generation, let cached = statusCache.status(key, at: generation) {
            status = cached
        } else {
            do {
                status = try await database.storage.readStatement { db in
                    try await db.fetchOne(
                        """
                        SELECT disabled, role,
                            EXISTS (SELECT 1 FROM revokedAccessTokens WHERE jti = ?)
                            OR EXISTS (SELECT 1 FROM refreshTokens WHERE family = ? AND revokedAt IS NOT NULL) AS revoked,
                            EXISTS (
                                SELECT 1 FROM deviceTokenFamilies f JOIN devices d ON d.id = f.device
                                WHERE f.family = ? AND d.revokedAt IS NOT NULL) AS deviceRevoked
                        FROM users WHERE name = ?
                        """, jti, family, family, user
                    ).map { row in
                        TokenStatusCache.Status(
                            disabled: row[0].bool ?? true, role: row[1].text, revoked: row[2].bool ?? true,
                            deviceRevoked: row[3].bool ?? false)
                    }
                }
            } catch {
                throw .databaseUnavailable("The server cannot check the token right now; try again.")
            }
            if let generation { statusCache.remember(key, status, readAt: generation) }
        }
        if let status, !status.disabled, status.role.flatMap(User.Role.init(rawValue:)) == nil {
            throw .unauthorized("The user's role cannot be read; try again or ask an administrator.")
        }
        guard let status, !status.disabled, let role = status.role.flatMap(User.Role.init(rawValue:)) else {
            // Told apart from an expired or revoked token, so the device removes the user instead of asking them
            // to sign in again.
            var error = ServerError.unauthorized("This user was disabled or deleted by an administrator.")
            error.code = "UserWithdrawn"
            throw error
        }
        // A tablet an admin took out of service is told so, not just refused: it can then delete what it holds.
        guard !status.deviceRevoked else {
            var error = ServerError.unauthorized(
                "This device was taken out of service by an administrator; its sign-ins were revoked.")
            error.code = "DeviceRevoked"
            throw error
        }
        guard !status.revoked else { throw .unauthorized("The access token was revoked.") }
        return (verifiedToken, role)
    }

    /// The `kid` of `token` if it is a compact JWS of this server's form: header `alg` ES256 with a `kid`, and a
    /// 64-byte signature whose `s` is in the lower half of the group order; otherwise `nil`. ECDSA accepts both
    /// `s` and `n - s`; taking only the low one makes every token have exactly one valid encoding.
    static func strictES256KeyID(_ token: String) -> String? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let header = Data(base64URLEncoded: String(parts[0])),
            let json = try? JSONValue(parsing: Array(header)), json["alg"]?.stringValue == "ES256",
            let keyID = json["kid"]?.stringValue, (1...64).contains(keyID.utf8.count),
            let signature = Data(base64URLEncoded: String(parts[2])), signature.count == 64
        else { return nil }
        // s <= n / 2, compared big-endian byte by byte.
        let s = Array(signature.suffix(32))
        for (byte, limit) in zip(s, halfOrder) {
            if byte != limit { return byte < limit ? keyID : nil }
        }
        return keyID
    }

    /// The token with its ECDSA `s` replaced by `n - s` when it is in the upper half (BoringSSL signs with either),
    /// so the server's own tokens pass ``isStrictES256(_:keyID:)``.
    static func withLowS(_ token: String) -> String {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let signature = Data(base64URLEncoded: String(parts[2])), signature.count == 64 else {
            return token
        }
        let s = Array(signature.suffix(32))
        guard s.lexicographicallyPrecedes(halfOrder) == false, s != halfOrder else { return token }
        var difference = [UInt8](repeating: 0, count: 32)
        var borrow = 0
        for index in stride(from: 31, through: 0, by: -1) {
            var value = Int(order[index]) - Int(s[index]) - borrow
            borrow = value < 0 ? 1 : 0
            if value < 0 { value += 256 }
            difference[index] = UInt8(value)
        }
        let lowered = Data(signature.prefix(32)) + Data(difference)
        return "\(parts[0]).\(parts[1]).\(lowered.base64URLEncoded)"
    }

    /// The order n of P-256, big-endian.
    static let order: [UInt8] = [
        0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
    ]

    /// (n - 1) / 2 for P-256, big-endian.
    static let halfOrder: [UInt8] = [
        0x7F, 0xFF, 0xFF, 0xFF, 0x80, 0x00, 0x00, 0x00, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xDE, 0x73, 0x7D, 0x56, 0xD3, 0x8B, 0xCF, 0x42, 0x79, 0xDC, 0xE5, 0x61, 0x7E, 0x31, 0x92, 0xA8,
    ]

    /// Revokes a refresh token (its whole family) or an access token (RFC 7009). Unknown tokens are ignored,
    /// as the RFC requires.
    func revoke(_ token: String, clientID: String, caller: Caller) async throws {
        let now = clock.now()
        let hash = secretHash(token)
        let refresh = try await database.storage.write { db -> (owner: String?, revoked: Bool)? in
            guard
                let row = try await db.fetchOne(
                    #"SELECT family, "user", clientID FROM refreshTokens WHERE hash = ?"#, hash),
                row["clientID"].text == clientID, let family = row["family"].text
            else { return nil }
            let revoked = try await db.execute(
                "UPDATE refreshTokens SET revokedAt = ? WHERE family = ? AND revokedAt IS NULL", now, family)
            return (row["user"].text, revoked > 0)
        }
        if let refresh, let refreshOwner = refresh.owner {
            // The family's access tokens stop at once, in this instance too; a token revoked before (or unknown)
            // changes nothing, so it empties no cache.
            if refresh.revoked { database.statusChanged() }
            try await audit.recordCounted(
                AuditEntry(
                    at: clock.now(), actor: refreshOwner, action: "token-revoked", subject: refreshOwner,
                    address: caller.address, detail: "refresh token family"))
            return
        }
        guard let keyID = Self.strictES256KeyID(token), let keys = try? await signingKeys.verifying(keyID: keyID),
            let claims = try? await keys.collection.verify(token, as: AccessTokenClaims.self),
            claims.clientID == clientID
        else { return }
        let inserted = try await database.storage.write { db -> Bool in
            let inserted = try await db.execute(
                "INSERT INTO revokedAccessTokens (jti, expiresAt) VALUES (?, ?) ON CONFLICT(jti) DO NOTHING",
                claims.jti.value, claims.exp.value)
            try await db.execute("DELETE FROM revokedAccessTokens WHERE expiresAt < ?", now)
            return inserted > 0
        }
        if inserted { database.statusChanged() }
        try await audit.recordCounted(
            AuditEntry(
                at: clock.now(), actor: claims.sub.value, action: "token-revoked", subject: claims.sub.value,
                address: caller.address, detail: "access token"))
    }

    /// The JSON Web Key Set: the current signing key and, after a rotation, the previous one.
    func jwks() async throws -> JWKS { try await signingKeys.current().jwks }
}
