import BatonOData
import BatonTestSupport
import Crypto
import Foundation
import GRDB
import Testing

@testable import BatonOffline

/// Local OData on the device store, without a server.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct LocalStoreTests {
    static func directory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-local-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A store without defining queries, open for alice.
    static func openStore(in directory: URL) async throws -> OfflineStore {
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: "tablet-1", definingQueries: [])
        try await store.open(
            as: OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey()), key: SymmetricKey(size: .bits256))
        return store
    }

    @Test func stringKeysThatNeedEncodingAreAddressedCanonically() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await Self.openStore(in: directory)
        let id = try await store.create(
            in: "Aircraft",
            values: [
                "TailNumber": .string("D A#B'C"), "Type": .string("A320"), "Station": .string("FRA"),
                "Status": .string("ready"),
            ])
        // The id is the server's canonical URL: percent-encoded, quotes doubled — a URL a request can use.
        #expect(id == "Aircraft('D%20A%23B''C')")
        #expect(URL(string: "http://127.0.0.1/odata/" + id) != nil)
        try await store.update(id, values: ["Status": .string("maintenance")])
        #expect(try await store.read(id).first?.values["Status"] == .string("maintenance"))
        #expect(try await store.pendingEntries().map(\.url) == ["Aircraft", id])
        let duplicate = await #expect(throws: OfflineError.self) {
            try await store.create(
                in: "Aircraft",
                values: [
                    "TailNumber": .string("D A#B'C"), "Type": .string("A320"), "Station": .string("FRA"),
                    "Status": .string("ready"),
                ])
        }
        #expect(duplicate?.message.contains("already exists") == true)
        let missing = await #expect(throws: OfflineError.self) {
            try await store.update("Aircraft('D-NONE')", values: ["Status": .string("ready")])
        }
        #expect(missing?.code == .notFound)
    }

    /// A check the tablet reported recorded survives the tablet losing power, not only its app being killed:
    /// the change and its queued upload are on the disk when `create` returns. GRDB opens a store in WAL mode
    /// with `synchronous = NORMAL`, where a commit reaches the disk only at the next checkpoint.
    @Test func aRecordedChangeIsOnTheDiskBeforeTheStoreSaysSo() async throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await Self.openStore(in: directory)
        let level = try await store.read { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") }
        #expect(level == 2, "PRAGMA synchronous is \(level ?? -1), not FULL (2)")
    }
}
