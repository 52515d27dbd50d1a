import JWTKit
import Synchronization

/// An access token whose ES256 signature verified, with what every request of it reads, made once per token: a
/// request's context holds this one reference, not a copy of the claims' strings.
final class VerifiedToken: Sendable {
    let claims: AccessTokenClaims
    /// The signing key it verified with: it counts only while that key is listed.
    let keyID: String
    /// Its key in the token-status cache: user, token id and sign-in family, NUL-separated (none of them holds a
    /// NUL: user names refuse it, and the other two are the server's own identifiers).
    let statusKey: String

    init(claims: AccessTokenClaims, keyID: String) {
        self.claims = claims
        self.keyID = keyID
        statusKey = claims.sub.value + "\u{0}" + claims.jti.value + "\u{0}" + (claims.family ?? "")
    }

}

/// A bounded memory of access tokens whose ES256 signature verified, so a busy device does not pay for the
/// signature check on every request. Expiry, revocation and the user's status are still checked per request.
final class VerifiedTokens: Sendable {
    let storage = Mutex<[String: VerifiedToken]>([:])
    static let capacity = 10_000

    func token(_ token: String) -> VerifiedToken? { storage.withLock { $0[token] } }

    func remember(_ token: String, _ verified: VerifiedToken) {
        storage.withLock { cache in
            if cache.count >= Self.capacity { cache.removeAll(keepingCapacity: true) }
            cache[token] = verified
        }
    }
}
