import BatonOData
import BatonOffline
import BatonTestSupport
import Crypto
import Foundation
import Testing

/// The offline store's files hold no plaintext, and altered bytes or another key are errors.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct EncryptionTests {
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

    /// A store in `directory`, opened for alice with a new key.
    func openedStore(_ directory: URL) async throws -> (OfflineStore, OfflineUser, SymmetricKey) {
        let key = SymmetricKey(size: .bits256)
        let user = OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey())
        let store = try makeStore(directory)
        try await store.open(as: user, key: key)
        return (store, user, key)
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
        // A photo whose bytes hold the marker too: its file is sealed like the store's pages.
        let photo = try await store.takePhoto(
            Self.jpeg(holding: Array(marker.utf8), size: 600_000), values: ["CheckID": Self.guid(of: ids[1])])
        // While open (WAL in use) and after closing, no byte of any file is the marker, the author or the key.
        func scan() throws {
            for name in try FileManager.default.subpathsOfDirectory(atPath: directory.path) {
                var folder: ObjCBool = false
                let url = directory.appendingPathComponent(name)
                if FileManager.default.fileExists(atPath: url.path, isDirectory: &folder), folder.boolValue {
                    continue
                }
                let data = try Data(contentsOf: url)
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
        #expect(try await store.pendingEntries().count == 202)
        #expect(try await store.photo(photo, using: nil).bytes.count == 600_000)
    }

    /// A JPEG's structure of `size` bytes whose scan data holds `marker` over and over.
    static func jpeg(holding marker: [UInt8], size: Int) -> [UInt8] {
        var bytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]
        while bytes.count < size - 2 - marker.count { bytes += marker }
        bytes += [UInt8](repeating: 0x20, count: size - 2 - bytes.count)
        return bytes + [0xFF, 0xD9]
    }

    /// The key of an entity id such as `PreflightChecks(…)`.
    static func guid(of id: String) -> PrimitiveValue {
        .guid(UUID(uuidString: String(id.dropFirst("PreflightChecks(".count).dropLast())) ?? UUID())
    }

    /// A photo's file altered, cut after a chunk, or swapped for another photo's is an error where it is read, never
    /// other bytes; a file no row names (a photo whose transaction did not commit) goes when the store opens.
    @Test func photoFilesAreSealedChunkByChunkAndOrphansGo() async throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (store, user, key) = try await openedStore(directory)
        let ids = try await record(store, remarks: "photos", count: 2)
        let first = try await store.takePhoto(
            Self.jpeg(holding: [1, 2, 3], size: 700_000), values: ["CheckID": Self.guid(of: ids[0])])
        let second = try await store.takePhoto(
            Self.jpeg(holding: [4, 5, 6], size: 300_000), values: ["CheckID": Self.guid(of: ids[1])])
        let media = directory.appendingPathComponent("offline.sqlite-media")
        let files = try FileManager.default.contentsOfDirectory(atPath: media.path).sorted()
        #expect(files.count == 2)
        let sizes = try files.map { try Data(contentsOf: media.appendingPathComponent($0)).count }
        let large = media.appendingPathComponent(files[sizes[0] > sizes[1] ? 0 : 1])
        let small = media.appendingPathComponent(files[sizes[0] > sizes[1] ? 1 : 0])
        let original = try Data(contentsOf: large)
        let other = try Data(contentsOf: small)
        var flipped = original
        flipped[original.count / 2] ^= 0x01
        // Cut after its first two chunks (each 12 + 256 KiB + 16 bytes after the 15-byte header).
        let cut = original.prefix(15 + 2 * (12 + 256 * 1024 + 16))
        for altered in [flipped, cut, other] {
            try altered.write(to: large)
            await #expect(throws: OfflineError.self) { _ = try await store.photo(first, using: nil) }
        }
        try original.write(to: large)
        #expect(try await store.photo(first, using: nil).bytes.count == 700_000)
        #expect(try await store.photo(second, using: nil).bytes.count == 300_000)
        // An orphan, written an hour ago, goes at the next opening; the named files stay.
        let orphan = media.appendingPathComponent(UUID().uuidString.lowercased())
        try other.write(to: orphan)
        try FileManager.default.setAttributes(
            [.modificationDate: Date(timeIntervalSinceNow: -3600)], ofItemAtPath: orphan.path)
        await store.close()
        try await store.open(as: user, key: key)
        #expect(!FileManager.default.fileExists(atPath: orphan.path))
        #expect(try FileManager.default.contentsOfDirectory(atPath: media.path).sorted() == files)
        #expect(try await store.photo(second, using: nil).bytes.count == 300_000)
        // Wiped: no photo file is left.
        try await store.wipe()
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: media.path)) ?? []).isEmpty)
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
        let (store, user, key) = try await openedStore(directory)
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
