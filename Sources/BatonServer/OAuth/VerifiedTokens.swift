import BatonOData
import Foundation
import JWTKit
import Logging
import Synchronization

/// A bounded memory of access tokens whose ES256 signature verified, so a busy device does not pay for the
/// signature check on every request. Expiry, revocation and the user's status are still checked per request.
final class VerifiedTokens: Sendable {
    let storage = Mutex<[String: (claims: AccessTokenClaims, keyID: String)]>([:])
    static let capacity = 10_000

    func claims(for token: String) -> (claims: AccessTokenClaims, keyID: String)? { storage.withLock { $0[token] } }

    func remember(_ token: String, _ claims: AccessTokenClaims, keyID: String) {
        storage.withLock { cache in
            if cache.count >= Self.capacity { cache.removeAll(keepingCapacity: true) }
            cache[token] = (claims, keyID)
        }
    }
}
