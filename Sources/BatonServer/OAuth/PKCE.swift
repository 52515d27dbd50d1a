import BatonOData
import Crypto
import Foundation

/// Proof Key for Code Exchange (RFC 7636), S256 only.
enum PKCE {
    /// Whether `text` is a valid code verifier or challenge: 43–128 unreserved characters.
    static func isWellFormed(_ text: String) -> Bool {
        (43...128).contains(text.count)
            && text.unicodeScalars.allSatisfy {
                $0.isASCII
                    && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "-._~".unicodeScalars.contains($0))
            }
    }

    /// BASE64URL(SHA256(verifier)), without padding.
    static func challenge(for verifier: String) -> String {
        base64URL(Data(SHA256.hash(data: Data(verifier.utf8))))
    }
}

/// Base64url without padding (RFC 4648 §5).
func base64URL(_ data: Data) -> String {
    data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        .replacingOccurrences(of: "=", with: "")
}

/// A random opaque secret (refresh token, authorization code): 32 bytes, base64url.
func randomSecret() -> String {
    base64URL(SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) })
}

/// Whether two secrets (a state, a nonce, a CSRF token) are equal, compared in time that does not depend on where
/// they differ: their SHA-256 digests are compared, in constant time.
func sameSecret(_ sent: String, _ expected: String) -> Bool {
    SHA256.hash(data: Data(sent.utf8)) == SHA256.hash(data: Data(expected.utf8))
}

/// How secrets are stored: the hex SHA-256.
func secretHash(_ secret: String) -> String {
    SHA256.hash(data: Data(secret.utf8)).lowercaseHex
}
