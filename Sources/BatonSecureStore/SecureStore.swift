import Crypto
import Foundation

/// One user's encrypted store on a device, behind their passcode.
///
/// A random 256-bit data key encrypts the values (AES-GCM); the data key is wrapped by a key derived from the
/// passcode with scrypt (parameters stored with the file). Every change is written atomically. A wrong
/// passcode counts against the retry limit, and the count survives restarts; reaching the limit wipes the
/// store. A wrong passcode and a damaged file are different errors.
///
/// ```swift
/// let store = try await SecureStore.create(at: url, passcode: passcode, policy: policy)
/// try await store.set("refresh-token-value", forKey: "refreshToken")
/// let token: String? = try await store.value(forKey: "refreshToken")
/// ```
public actor SecureStore {
    /// The file the store lives in.
    public nonisolated let url: URL
    var file: SecureStoreFile
    var dataKey: SymmetricKey
    var values: [String: Data]
    /// Set by ``close()``.
    public private(set) var isClosed = false

    init(url: URL, file: SecureStoreFile, dataKey: SymmetricKey, values: [String: Data]) {
        self.url = url
        self.file = file
        self.dataKey = dataKey
        self.values = values
    }

    /// Creates a new, empty store protected by `passcode`.
    ///
    /// - Parameters:
    ///   - url: the file to create; it must not exist yet.
    ///   - passcode: the user's passcode, checked against `policy`.
    ///   - policy: the passcode policy; its retry limit is stored with the file.
    ///   - kdf: the key derivation; defaults to OWASP's scrypt parameters with a fresh salt.
    /// - Returns: the open, empty store.
    /// - Throws: ``SecureStoreError``: `PasscodePolicy` naming the broken rule, `AlreadyExists`, `IO`.
    public static func create(
        at url: URL, passcode: String, policy: PasscodePolicy, kdf: KeyDerivation = .recommended()
    ) throws(SecureStoreError) -> SecureStore {
        try policy.check(passcode)
        guard !FileManager.default.fileExists(atPath: url.path) else {
            throw SecureStoreError(.alreadyExists, "A secure store already exists for this user on this device.")
        }
        let dataKey = SymmetricKey(size: .bits256)
        let wrapped = try SecureStoreFile.seal(
            dataKey.withUnsafeBytes { Data($0) }, with: try kdf.deriveKey(from: passcode),
            context: SecureStoreFile.keyContext)
        let payload = try SecureStoreFile.seal(Data("{}".utf8), with: dataKey, context: SecureStoreFile.payloadContext)
        let file = SecureStoreFile(
            kdf: kdf, wrappedKey: wrapped, failedAttempts: 0, retryLimit: policy.retryLimit, payload: payload)
        try file.write(to: url)
        return SecureStore(url: url, file: file, dataKey: dataKey, values: [:])
    }

    /// Opens the store with `passcode`.
    ///
    /// - Throws: ``SecureStoreError``: `WrongPasscode` with the attempts left, `Wiped` when this attempt
    ///   reached the retry limit (the file is deleted), `Corrupted` for a damaged file, `NotFound`.
    public static func open(at url: URL, passcode: String) throws(SecureStoreError) -> SecureStore {
        var file = try SecureStoreFile.read(url)
        let key = try file.kdf.deriveKey(from: passcode)
        guard let keyBytes = try SecureStoreFile.open(file.wrappedKey, with: key, context: SecureStoreFile.keyContext)
        else {
            file.failedAttempts += 1
            if file.failedAttempts >= file.retryLimit {
                try? FileManager.default.removeItem(at: url)
                throw SecureStoreError(
                    .wiped,
                    "The passcode was wrong \(file.retryLimit) times; this user's secure store was wiped. Onboard again."
                )
            }
            try file.write(to: url)
            let remaining = file.retryLimit - file.failedAttempts
            throw SecureStoreError(
                .wrongPasscode, "The passcode is wrong; \(remaining) attempt(s) left.", remainingAttempts: remaining)
        }
        let dataKey = SymmetricKey(data: keyBytes)
        guard
            let payload = try SecureStoreFile.open(
                file.payload, with: dataKey, context: SecureStoreFile.payloadContext),
            let object = try? JSONDecoder().decode([String: Data].self, from: payload)
        else {
            throw SecureStoreError(.corrupted, "The secure store file is damaged and cannot be read.")
        }
        if file.failedAttempts != 0 {
            file.failedAttempts = 0
            try file.write(to: url)
        }
        return SecureStore(url: url, file: file, dataKey: dataKey, values: object)
    }

    /// Whether a store exists at `url`.
    public static func exists(at url: URL) -> Bool { FileManager.default.fileExists(atPath: url.path) }

    /// Deletes the store at `url` (no passcode needed: removing a user, or a wipe).
    ///
    /// - Throws: ``SecureStoreError`` (`IO`) when the file exists but cannot be removed.
    public static func delete(at url: URL) throws(SecureStoreError) {
        guard exists(at: url) else { return }
        do { try FileManager.default.removeItem(at: url) } catch {
            throw SecureStoreError(.io, "Cannot delete the secure store.")
        }
    }

    /// Closes this handle for good: the data key and the values leave memory, and every later call throws
    /// `SessionInvalidated` (the file stays; open it again with the passcode). Locking a session closes its store.
    public func close() {
        isClosed = true
        values = [:]
        dataKey = SymmetricKey(size: .bits256)
    }

    func requireOpen() throws(SecureStoreError) {
        guard !isClosed else {
            throw SecureStoreError(
                .sessionInvalidated, "This secure store was closed (its session was locked or closed); unlock it again."
            )
        }
    }

    /// The value stored under `key`, decoded as `type`, or `nil`.
    ///
    /// - Throws: ``SecureStoreError`` (`Corrupted`) when the stored value is not a `T`; `SessionInvalidated`
    ///   after ``close()``.
    public func value<T: Decodable>(_ type: T.Type = T.self, forKey key: String) throws(SecureStoreError) -> T? {
        try requireOpen()
        guard let data = values[key] else { return nil }
        do { return try JSONDecoder().decode(T.self, from: data) } catch {
            throw SecureStoreError(.corrupted, "The value stored under '\(key)' is not a \(T.self).")
        }
    }

    /// Stores `value` under `key` (written to disk before returning).
    ///
    /// - Throws: ``SecureStoreError`` (`IO`) when encoding or writing fails; the stored content is then
    ///   unchanged.
    public func set<T: Encodable>(_ value: T, forKey key: String) throws(SecureStoreError) {
        guard let data = try? JSONEncoder().encode(value) else {
            throw SecureStoreError(.io, "The value for '\(key)' cannot be encoded.")
        }
        var changed = values
        changed[key] = data
        try persist(changed)
    }

    /// Removes the value under `key`.
    ///
    /// - Throws: ``SecureStoreError`` (`IO`) when writing fails.
    public func removeValue(forKey key: String) throws(SecureStoreError) {
        var changed = values
        changed[key] = nil
        try persist(changed)
    }

    /// The stored keys.
    public var keys: [String] { values.keys.sorted() }

    /// Protects the store with a new passcode (the data key is re-wrapped; values stay as they are).
    ///
    /// - Throws: ``SecureStoreError``: `PasscodePolicy` for a passcode that breaks `policy`, `IO`.
    public func changePasscode(to passcode: String, policy: PasscodePolicy, kdf: KeyDerivation = .recommended())
        throws(SecureStoreError)
    {
        try requireOpen()
        try policy.check(passcode)
        var updated = file
        updated.kdf = kdf
        updated.retryLimit = policy.retryLimit
        updated.failedAttempts = 0
        updated.wrappedKey = try SecureStoreFile.seal(
            dataKey.withUnsafeBytes { Data($0) }, with: try kdf.deriveKey(from: passcode),
            context: SecureStoreFile.keyContext)
        try updated.write(to: url)
        file = updated
    }

    func persist(_ changed: [String: Data]) throws(SecureStoreError) {
        try requireOpen()
        guard let plain = try? JSONEncoder().encode(changed) else {
            throw SecureStoreError(.io, "Cannot encode the values.")
        }
        var updated = file
        updated.payload = try SecureStoreFile.seal(plain, with: dataKey, context: SecureStoreFile.payloadContext)
        try updated.write(to: url)
        file = updated
        values = changed
    }
}
