import BatonSecureStore
import Crypto
import Foundation

/// Where a device keeps Baton's files: its id, the encrypted user registry and its key, and one secure store
/// per user.
///
/// The registry (display names, server user ids, statuses) must be readable before anyone unlocks, to show
/// the user picker; it is encrypted with a device key kept in a separate file readable only by the app's
/// account (mode 0600) — the place the platform's keystore takes on Apple platforms. That protects it from
/// casual reading of the data directory, not from someone who can read every file as that account.
public struct DeviceStorage: Sendable {
    public let directory: URL

    /// Uses (and creates when missing) `directory`.
    public init(directory: URL) throws(FlowsError) {
        self.directory = directory
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
    var deviceKeyURL: URL { directory.appendingPathComponent("device.key") }
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
        if let data = try? Data(contentsOf: deviceKeyURL) {
            guard data.count == 32 else {
                throw FlowsError(.storage, "The device key file in \(directory.path) is damaged.")
            }
            return SymmetricKey(data: data)
        }
        let key = SymmetricKey(size: .bits256)
        try write(key.withUnsafeBytes { Data($0) }, to: deviceKeyURL)
        return key
    }

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
