import BatonFlows
import Foundation
import Synchronization
import Testing

/// The device key lives where the app's key store keeps it: a file by default, anywhere an app's `DeviceKeyStore`
/// puts it (on Apple platforms, the Keychain). Here an in-memory store stands in for the Keychain, which does not
/// run on Linux.
@Suite struct DeviceKeyStoreTests {
    final class MemoryKeyStore: DeviceKeyStore {
        let keys = Mutex<[String: Data]>([:])
        func key(named name: String) throws(FlowsError) -> Data? { keys.withLock { $0[name] } }
        func store(_ key: Data, named name: String) throws(FlowsError) -> Data {
            keys.withLock { keys in
                if let kept = keys[name] { return kept }
                keys[name] = key
                return key
            }
        }
    }

    static func directory() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("baton-keystore-\(UUID())")
    }

    @Test func anAppsKeyStoreKeepsTheDeviceKeyAndNoFileDoes() async throws {
        let directory = Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let keychain = MemoryKeyStore()
        let users = try UserManager(storage: try DeviceStorage(directory: directory, keyStore: keychain))
        try await users.upsert(UserManager.User(onboardingID: UUID(), displayName: "Alice Example", status: .success))
        #expect(keychain.keys.withLock { $0[DeviceStorage.deviceKeyName]?.count } == 32)
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("device.key").path))

        // The registry opens again with the same store…
        let again = try UserManager(storage: try DeviceStorage(directory: directory, keyStore: keychain))
        #expect(await again.allUsers.map(\.displayName) == ["Alice Example"])
        // …and not with another key: a store that lost the key cannot read the registry, and says so.
        let other = MemoryKeyStore()
        #expect(throws: FlowsError.self) {
            _ = try UserManager(storage: try DeviceStorage(directory: directory, keyStore: other))
        }
    }

    @Test func theFileKeyStoreWritesOwnerOnlyFilesAndNeverReplacesAKey() throws {
        let directory = Self.directory()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = FileDeviceKeyStore(directory: directory)
        #expect(try store.key(named: "device.key") == nil)
        let first = Data(repeating: 1, count: 32)
        #expect(try store.store(first, named: "device.key") == first)
        // A second writer (another process of the app) gets the key the first one kept.
        #expect(try store.store(Data(repeating: 2, count: 32), named: "device.key") == first)
        #expect(try store.key(named: "device.key") == first)
        let mode =
            try FileManager.default.attributesOfItem(
                atPath: directory.appendingPathComponent("device.key").path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // A link is not a key file, wherever it points.
        try FileManager.default.createSymbolicLink(
            atPath: directory.appendingPathComponent("linked.key").path, withDestinationPath: "/dev/zero")
        #expect(throws: FlowsError.self) { try store.key(named: "linked.key") }
        // A key name is a plain file name: no path leaves the directory.
        #expect(throws: FlowsError.self) { try store.key(named: "../escape") }
        #expect(throws: FlowsError.self) { try store.store(first, named: "a/b") }
    }
}
