import BatonFiles
import BatonSecureStore
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Where a device keeps Baton's files: its id, the encrypted user registry, and one secure store per user — and,
/// through its ``DeviceKeyStore``, the device key.
///
/// The registry (display names, server user ids, statuses) must be readable before anyone unlocks, to show
/// the user picker; it is encrypted with a device key that the key store keeps. The default,
/// ``FileDeviceKeyStore``, keeps it in a separate file readable only by the app's account (mode 0600): that
/// protects it from casual reading of the data directory, not from someone who can read every file as that
/// account. An app on a platform with a keystore passes its own ``DeviceKeyStore`` instead (on Apple platforms, one
/// that keeps the key in the Keychain; Baton does not ship one).
public struct DeviceStorage: Sendable {
    public let directory: URL
    /// Where the device key lives.
    public let keyStore: any DeviceKeyStore

    /// Uses (and creates when missing) `directory`; the device key lives in `keyStore`, by default a file in
    /// `directory` (``FileDeviceKeyStore``).
    public init(directory: URL, keyStore: (any DeviceKeyStore)? = nil) throws(FlowsError) {
        self.directory = directory
        self.keyStore = keyStore ?? FileDeviceKeyStore(directory: directory)
        do {
            try FileManager.default.createDirectory(
                at: usersDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory.path)
        } catch {
            throw FlowsError(.storage, "Cannot use the data directory \(directory.path).")
        }
    }

    var usersDirectory: URL { directory.appendingPathComponent("users") }
    /// Encrypted backups of discarded changes (`*.sealed`; `*.sealed.sent` once the server has them).
    public var backupsURL: URL { directory.appendingPathComponent("backups") }
    var registryURL: URL { directory.appendingPathComponent("users.registry") }
    var deviceIDURL: URL { directory.appendingPathComponent("device.id") }

    /// The secure store file of a user.
    public func secureStoreURL(for onboardingID: UUID) -> URL {
        usersDirectory.appendingPathComponent("\(onboardingID.uuidString.lowercased()).securestore")
    }

    /// This device's id, made on first use.
    public func deviceID() throws(FlowsError) -> String {
        if let data = try? Data(contentsOf: deviceIDURL),
            let text = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
            !text.isEmpty
        {
            return text
        }
        let id = "device-" + UUID().uuidString.lowercased()
        try write(Data(id.utf8), to: deviceIDURL)
        return id
    }

    /// The key that encrypts the registry, made on first use.
    func deviceKey() throws(FlowsError) -> SymmetricKey {
        let stored: Data?
        do { stored = try keyStore.key(named: DeviceStorage.deviceKeyName) } catch {
            throw FlowsError(.storage, "The device key cannot be read: \(error.message)")
        }
        if let stored {
            guard stored.count == 32 else { throw FlowsError(.storage, "The device key is damaged.") }
            return SymmetricKey(data: stored)
        }
        let made = SymmetricKey(size: .bits256).withUnsafeBytes { Data($0) }
        let kept: Data
        do { kept = try keyStore.store(made, named: DeviceStorage.deviceKeyName) } catch {
            throw FlowsError(.storage, "The device key cannot be kept: \(error.message)")
        }
        guard kept.count == 32 else { throw FlowsError(.storage, "The device key is damaged.") }
        return SymmetricKey(data: kept)
    }

    /// The name the device key is kept under in the ``keyStore``.
    public static let deviceKeyName = "device.key"

    /// A key for one of the device's own sealed files (its log, its usage events), derived from the device key
    /// for `purpose`: readable before anyone signs in, as protected as the user registry.
    public func sealingKey(for purpose: String) throws(FlowsError) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: try deviceKey(), info: Data(purpose.utf8), outputByteCount: 32)
    }

    /// The device's encrypted, rotating log (``DeviceLog``).
    public var logURL: URL { directory.appendingPathComponent("logs").appendingPathComponent("device.log") }
    /// The device's usage events waiting for upload (``UsageRecorder``).
    public var usageURL: URL { directory.appendingPathComponent("logs").appendingPathComponent("usage.events") }

    func write(_ data: Data, to url: URL) throws(FlowsError) {
        do {
            try AtomicFile.write(data, to: url)
        } catch {
            throw FlowsError(.storage, "Cannot write \(url.lastPathComponent) in \(directory.path).")
        }
    }
}

/// Where a device keeps its secret keys — today one, the device key that encrypts the user registry and the
/// device's own sealed files (``DeviceStorage/deviceKeyName``). Keys are 32 random bytes, made by Baton on first
/// use and never changed.
///
/// ``FileDeviceKeyStore`` (a file per key, mode 0600, written atomically) is what Baton uses on Linux and by
/// default. An app on a platform with a keystore implements this protocol over it — on Apple platforms the
/// Keychain, with an accessibility class of its choice — and passes it to
/// ``OnboardingSessionManager/init(serverURL:directory:configuration:presenter:flowProvider:idManager:transport:keyStore:)``.
public protocol DeviceKeyStore: Sendable {
    /// The key kept under `name`, or `nil` when none is kept yet.
    ///
    /// - Throws: ``FlowsError`` `Storage` when the store cannot be read (Baton then stops rather than make a new
    ///   key, which would lose the registry).
    func key(named name: String) throws(FlowsError) -> Data?
    /// Keeps `key` under `name` unless a key is kept there already (another process of the app may have made one
    /// first), and returns the key kept there now. A key is never replaced.
    func store(_ key: Data, named name: String) throws(FlowsError) -> Data
}

/// Keys in files of a directory, readable and writable by the app's account only (mode 0600), each written
/// atomically: the ``DeviceKeyStore`` Baton uses unless the app passes another.
public struct FileDeviceKeyStore: DeviceKeyStore {
    public let directory: URL

    public init(directory: URL) { self.directory = directory }

    /// The key in the file `name`: a regular file of this account's, not a link, at most 64 bytes — anything else
    /// is refused (a link to another file, a device or a pipe is not a key).
    public func key(named name: String) throws(FlowsError) -> Data? {
        let url = try file(name)
        let descriptor = open(url.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno == ENOENT { return nil }
            throw FlowsError(.storage, "Cannot read the key file \(name) in \(directory.path): it is not a plain file.")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_uid == geteuid(),
            status.st_size <= 64
        else {
            throw FlowsError(
                .storage, "The key file \(name) in \(directory.path) is not a plain file of this account's.")
        }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count == bytes.count else {
            throw FlowsError(.storage, "Cannot read the key file \(name) in \(directory.path).")
        }
        return Data(bytes)
    }

    public func store(_ key: Data, named name: String) throws(FlowsError) -> Data {
        let url = try file(name)
        let created: Bool
        do { created = try AtomicFile.create(key, at: url) } catch {
            throw FlowsError(.storage, "Cannot write the key file \(name) in \(directory.path).")
        }
        if created { return key }
        guard let kept = try self.key(named: name) else {
            throw FlowsError(.storage, "The key file \(name) in \(directory.path) vanished while it was made.")
        }
        return kept
    }

    func file(_ name: String) throws(FlowsError) -> URL {
        guard !name.isEmpty, !name.hasPrefix("."),
            name.unicodeScalars.allSatisfy({
                $0.isASCII && ($0.properties.isAlphabetic || "0123456789.-_".unicodeScalars.contains($0))
            })
        else { throw FlowsError(.storage, "A key name must be a plain file name.") }
        return directory.appendingPathComponent(name)
    }
}
