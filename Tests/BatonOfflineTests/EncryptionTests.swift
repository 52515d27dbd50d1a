import BatonOData
import BatonOffline
import BatonTestSupport
import Crypto
import Foundation
import Testing

/// The offline store's files hold no plaintext, and altered bytes or another key are errors.
@Suite(.serverSlot) struct EncryptionTests {
    func makeStore(_ directory: URL) throws -> OfflineStore {
        try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: "tablet-1", definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")])
    }

    func temporaryDirectory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-crypt-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    func record(_ store: OfflineStore, remarks: String, count: Int = 200) async throws -> [String] {
        var ids: [String] = []
        for index in 0..<count {
            ids.append(
                try await store.create(
                    in: "PreflightChecks",
                    values: [
                        "ID": .guid(UUID()), "TailNumber": .string("D-MARK"), "FuelKg": .decimal(Decimal(5000 + index)),
                        "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60),
                        "OilQuarts": .decimal(15), "Status": .string("final"), "Remarks": .string(remarks),
                    ]))
        }
        return ids
    }

    @Test func noFileHoldsAMarkerInPlainText() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = SymmetricKey(size: .bits256)
        let signer = P256.Signing.PrivateKey()
        let store = try makeStore(directory)
        try await store.open(as: OfflineUser(name: "alice", signingKey: signer), key: key)
        let marker = "MARKER-\(UUID().uuidString)"
        let ids = try await record(store, remarks: marker)
        try await store.update(ids[0], values: ["Remarks": .string(marker + "-changed")])
        // While open (WAL in use) and after closing, no byte of any file is the marker, the author or the key.
        func scan() throws {
            for name in try FileManager.default.subpathsOfDirectory(atPath: directory.path) {
                let data = try Data(contentsOf: directory.appendingPathComponent(name))
                for needle in [Data(marker.utf8), Data("D-MARK".utf8), key.withUnsafeBytes { Data($0) }] {
                    #expect(data.range(of: needle) == nil, "found in \(name)")
                }
            }
        }
        try scan()
        // Nobody else on the machine reads them either.
        for name in ["offline.sqlite", "offline.sqlite-wal"] {
            let mode =
                try FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)[
                    .posixPermissions] as? Int
            #expect(mode == 0o600, "\(name)")
        }
        await store.close()
        try scan()
        // Reopened with the key, everything is there.
        try await store.open(as: OfflineUser(name: "alice", signingKey: signer), key: key)
        #expect(try await store.count("PreflightChecks") == 200)
        #expect(try await store.read(ids[0]).first?.values["Remarks"] == .string(marker + "-changed"))
        #expect(try await store.pendingEntries().count == 201)
    }

    @Test func anotherKeyIsAClearError() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try makeStore(directory)
        let user = OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey())
        try await store.open(as: user, key: SymmetricKey(size: .bits256))
        _ = try await record(store, remarks: "x", count: 3)
        await store.close()
        let error = await #expect(throws: OfflineError.self) {
            try await store.open(as: user, key: SymmetricKey(size: .bits256))
        }
        #expect(error?.code == .storage)
        #expect(error?.message.contains("another store key") == true)
        await #expect(throws: OfflineError.self) { try await store.count("PreflightChecks") }
    }

    @Test func alteredBytesAreDetectedNotRead() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = SymmetricKey(size: .bits256)
        let user = OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey())
        let store = try makeStore(directory)
        try await store.open(as: user, key: key)
        _ = try await record(store, remarks: String(repeating: "r", count: 300), count: 300)
        await store.close()
        let file = directory.appendingPathComponent("offline.sqlite")
        let original = try Data(contentsOf: file)
        #expect(original.count > 8 * 4096)
        // One flipped bit in any page — the header page, or a data page — is an error where it is read.
        for page in [0, 1, 2, original.count / 4096 - 1] {
            var bytes = original
            bytes[page * 4096 + 1000] ^= 0x01
            try bytes.write(to: file)
            let reopened = try makeStore(directory)
            do {
                try await reopened.open(as: user, key: key)
                _ = try await reopened.read("Aircraft")
                _ = try await reopened.read("Flights")
                _ = try await reopened.read("PreflightChecks")
                _ = try await reopened.pendingEntries()
                _ = try await reopened.archivedEntries()
                Issue.record("Page \(page) was altered and read without an error.")
            } catch {
                #expect(error.code == .storage, "page \(page): \(error)")
            }
            await reopened.close()
        }
        // The unaltered file still opens.
        try original.write(to: file)
        let intact = try makeStore(directory)
        try await intact.open(as: user, key: key)
        #expect(try await intact.count("PreflightChecks") == 300)
    }
}
