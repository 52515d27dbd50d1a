import BatonFiles
import Crypto
import Foundation

/// The on-disk form of a secure store. Everything sensitive is sealed with AES-GCM: the data key under the
/// passcode-derived key, the values under the data key. The failed-attempt counter is kept here so it
/// survives restarts.
struct SecureStoreFile: Codable {
    var format = "baton-secure-store-1"
    var kdf: KeyDerivation
    /// The data key, sealed under the passcode-derived key (base64 of AES-GCM nonce‖ciphertext‖tag).
    var wrappedKey: String
    var failedAttempts: Int
    var retryLimit: Int
    /// The values (a JSON object of base64 Codable encodings), sealed under the data key.
    var payload: String

    static let keyContext = Data("baton-secure-store-key".utf8)
    static let payloadContext = Data("baton-secure-store-payload".utf8)

    static func read(_ url: URL) throws(SecureStoreError) -> SecureStoreFile {
        guard let data = FileManager.default.contents(atPath: url.path) else {
            throw SecureStoreError(.notFound, "There is no secure store for this user on this device.")
        }
        do {
            let file = try JSONDecoder().decode(SecureStoreFile.self, from: data)
            guard file.format == "baton-secure-store-1", file.retryLimit > 0 else {
                throw CocoaError(.fileReadCorruptFile)
            }
            return file
        } catch {
            throw SecureStoreError(.corrupted, "The secure store file is damaged and cannot be read.")
        }
    }

    func write(to url: URL) throws(SecureStoreError) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        guard let data = try? encoder.encode(self) else {
            throw SecureStoreError(.io, "Cannot encode the secure store.")
        }
        do { try AtomicFile.write(data, to: url) } catch { throw SecureStoreError(.io, error.message) }
    }

    static func seal(_ data: Data, with key: SymmetricKey, context: Data) throws(SecureStoreError) -> String {
        guard let combined = try? AES.GCM.seal(data, using: key, authenticating: context).combined else {
            throw SecureStoreError(.io, "Encryption failed.")
        }
        return combined.base64EncodedString()
    }

    /// Opens a sealed box; `nil` when authentication fails (wrong key or tampered data).
    static func open(_ text: String, with key: SymmetricKey, context: Data) throws(SecureStoreError) -> Data? {
        guard let combined = Data(base64Encoded: text), let box = try? AES.GCM.SealedBox(combined: combined) else {
            throw SecureStoreError(.corrupted, "The secure store file is damaged and cannot be read.")
        }
        return try? AES.GCM.open(box, using: key, authenticating: context)
    }
}
