import Crypto
import CryptoExtras
import Foundation

/// How a passcode becomes the key that wraps the store's data key. Stored with the file, so the cost can be
/// raised later without losing existing stores.
public struct KeyDerivation: Sendable, Hashable, Codable {
    /// `scrypt`.
    public var algorithm = "scrypt"
    /// scrypt's cost parameter N (a power of 2). Default: 2¹⁷ (OWASP's recommendation).
    public var cost = 1 << 17
    /// scrypt's block size r. Default: 8.
    public var blockSize = 8
    /// scrypt's parallelism p. Default: 1.
    public var parallelism = 1
    /// The random salt, base64.
    public var salt: String

    /// scrypt with the given parameters and a fresh 16-byte salt. Lower costs are for tests only.
    public init(cost: Int = 1 << 17, blockSize: Int = 8, parallelism: Int = 1) {
        self.cost = cost
        self.blockSize = blockSize
        self.parallelism = parallelism
        self.salt = randomBytes(16).base64EncodedString()
    }

    init(salt: String) { self.salt = salt }

    /// OWASP's recommended scrypt parameters (N=2¹⁷, r=8, p=1) with a fresh 16-byte salt.
    public static func recommended() -> KeyDerivation {
        KeyDerivation(salt: randomBytes(16).base64EncodedString())
    }

    /// Derives the 256-bit wrapping key.
    ///
    /// - Throws: ``SecureStoreError`` (`Corrupted`) for parameters that are not valid scrypt parameters.
    public func deriveKey(from passcode: String) throws(SecureStoreError) -> SymmetricKey {
        guard algorithm == "scrypt", cost > 1, cost & (cost - 1) == 0, cost <= 1 << 22, (1...32).contains(blockSize),
            (1...16).contains(parallelism), let saltBytes = Data(base64Encoded: salt), saltBytes.count >= 16
        else { throw SecureStoreError(.corrupted, "The store's key-derivation parameters are not valid.") }
        do {
            return try KDF.Scrypt.deriveKey(
                from: Data(passcode.utf8), salt: saltBytes, outputByteCount: 32, rounds: cost, blockSize: blockSize,
                parallelism: parallelism, maxMemory: 256 * 1024 * 1024 * 2)
        } catch {
            throw SecureStoreError(.io, "Key derivation failed.")
        }
    }
}

/// Cryptographically random bytes.
func randomBytes(_ count: Int) -> Data {
    SymmetricKey(size: SymmetricKeySize(bitCount: count * 8)).withUnsafeBytes { Data($0) }
}
