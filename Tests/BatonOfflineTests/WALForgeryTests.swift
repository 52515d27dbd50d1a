import BatonOData
import BatonOffline
import Crypto
import Foundation
import Testing

/// An attacker with the tablet's files but not the key rewrites the write-ahead log: SQLite's frame checksums
/// need no key (the salts and each frame's running checksum are in plain text), so every forged frame below
/// passes them. None may change what the store holds beyond ending the log early (a rollback).
@Suite struct WALForgeryTests {
    /// A write-ahead log as bytes, with SQLite's frame layout and checksum.
    struct WAL {
        static let pageSize = 4096
        static let frameSize = 24 + pageSize
        var bytes: [UInt8]

        var frames: Int { (bytes.count - 32) / Self.frameSize }
        /// Checksum words are read little-endian (magic 0x377f0682) or big-endian (0x377f0683).
        var littleEndian: Bool { bytes[3] & 1 == 0 }

        func u32(_ offset: Int) -> UInt32 {
            bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
        }
        mutating func put(_ value: UInt32, at offset: Int) {
            for index in 0..<4 { bytes[offset + index] = UInt8(truncatingIfNeeded: value >> (24 - 8 * index)) }
        }
        func frameOffset(_ frame: Int) -> Int { 32 + frame * Self.frameSize }
        /// A checksum word as SQLite reads it from data.
        func word(_ data: ArraySlice<UInt8>, _ index: Int) -> UInt32 {
            let start = data.startIndex + index * 4
            let big = data[start..<start + 4].reduce(0) { $0 << 8 | UInt32($1) }
            return littleEndian ? big.byteSwapped : big
        }
        /// SQLite's running checksum over `data` (whole 8-byte pairs), from `seed`.
        func checksum(_ data: ArraySlice<UInt8>, from seed: (UInt32, UInt32)) -> (UInt32, UInt32) {
            var (s0, s1) = seed
            for pair in 0..<(data.count / 8) {
                s0 = s0 &+ word(data, pair * 2) &+ s1
                s1 = s1 &+ word(data, pair * 2 + 1) &+ s0
            }
            return (s0, s1)
        }
        /// The running checksum stored in a frame's header (or the log header's, before the first frame).
        func storedChecksum(after frame: Int) -> (UInt32, UInt32) {
            frame < 0 ? (u32(24), u32(28)) : (u32(frameOffset(frame) + 16), u32(frameOffset(frame) + 20))
        }

        /// Appends a commit frame for page `page` that leaves the database `size` pages long, whose page is random
        /// bytes, with a checksum made as if the page were all zeros.
        mutating func appendForgedCommit(page: UInt32, size: UInt32) {
            var header = [UInt8](repeating: 0, count: 24)
            for (index, value) in [page, size].enumerated() {
                for byte in 0..<4 { header[index * 4 + byte] = UInt8(truncatingIfNeeded: value >> (24 - 8 * byte)) }
            }
            header[8..<16] = bytes[16..<24]  // the log's salts
            let seed = storedChecksum(after: frames - 1)
            let sum = checksum(
                ArraySlice(Array(header[0..<8]) + [UInt8](repeating: 0, count: Self.pageSize)), from: seed)
            bytes += header
            put(sum.0, at: bytes.count - 8)
            put(sum.1, at: bytes.count - 4)
            bytes += (0..<Self.pageSize).map { _ in UInt8.random(in: 0...255) }
        }

        /// Relabels `frame` as page `page` and mends every checksum from there on without knowing any page's
        /// content: the checksum is linear, so a change to a header word shifts it by an amount the data does
        /// not affect.
        mutating func relabel(_ frame: Int, as page: UInt32) { rewrite(frame, word: 0, to: page) }

        /// Rewrites a frame header's page number (word 0) or commit size (word 1), mending every checksum from
        /// there on.
        mutating func rewrite(_ frame: Int, word: Int, to value: UInt32) {
            let offset = frameOffset(frame)
            var old = Array(bytes[offset..<offset + 8])
            put(value, at: offset + word * 4)
            var new = Array(bytes[offset..<offset + 8])
            var delta: (UInt32, UInt32) = (0, 0)
            for index in frame..<frames {
                let start = frameOffset(index)
                if index != frame { (old, new) = (Array(bytes[start..<start + 8]), Array(bytes[start..<start + 8])) }
                // The difference of two runs over the same page from seeds `delta` apart, header words changed.
                let zeros = [UInt8](repeating: 0, count: Self.pageSize)
                let withNew = checksum(ArraySlice(new + zeros), from: (delta.0, delta.1))
                let withOld = checksum(ArraySlice(old + zeros), from: (0, 0))
                delta = (withNew.0 &- withOld.0, withNew.1 &- withOld.1)
                put(u32(start + 16) &+ delta.0, at: start + 16)
                put(u32(start + 20) &+ delta.1, at: start + 20)
            }
        }
    }

    /// A store with committed changes still in its log, copied as a stolen tablet's files would be.
    func snapshot(_ directory: URL, key: SymmetricKey, user: OfflineUser) async throws -> (Snapshot, WAL, Int) {
        let live = directory.appendingPathComponent("live")
        try FileManager.default.createDirectory(at: live, withIntermediateDirectories: true)
        let store = try OfflineStore(
            url: live.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: "tablet-1", definingQueries: [])
        try await store.open(as: user, key: key)
        for index in 0..<30 {
            _ = try await store.create(
                in: "PreflightChecks",
                values: [
                    "ID": .guid(UUID()), "TailNumber": .string("D-WALF"), "FuelKg": .decimal(Decimal(5000 + index)),
                    "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60),
                    "OilQuarts": .decimal(15),
                    "Status": .string("final"), "Remarks": .string(String(repeating: "w", count: 400)),
                ])
        }
        let wal = WAL(bytes: Array(try Data(contentsOf: live.appendingPathComponent("offline.sqlite-wal"))))
        let database = try Data(contentsOf: live.appendingPathComponent("offline.sqlite"))
        await store.close()
        let copy = directory.appendingPathComponent("copy")
        try FileManager.default.createDirectory(at: copy, withIntermediateDirectories: true)
        return (Snapshot(folder: copy, database: database), wal, 30)
    }

    /// Where the copy is opened, and its database file as copied (each open starts from it again).
    struct Snapshot {
        var folder: URL
        var database: Data
    }

    /// Opens the copy with `wal` as its log; returns the checks it holds, or nil when it does not open or is not
    /// whole.
    func open(_ snapshot: Snapshot, wal: WAL, key: SymmetricKey, user: OfflineUser) async throws -> Int? {
        let copy = snapshot.folder
        try snapshot.database.write(to: copy.appendingPathComponent("offline.sqlite"))
        try Data(wal.bytes).write(to: copy.appendingPathComponent("offline.sqlite-wal"))
        try? FileManager.default.removeItem(at: copy.appendingPathComponent("offline.sqlite-shm"))
        let store = try OfflineStore(
            url: copy.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: "tablet-1", definingQueries: [])
        guard (try? await store.open(as: user, key: key)) != nil, (try? await store.integrityCheck()) == true else {
            await store.close()
            return nil
        }
        let count = try await store.count("PreflightChecks")
        await store.close()
        return count
    }

    func directory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-walf-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A transaction larger than SQLite's page cache spills frames to the log and rewrites some of them before it
    /// commits; SQLite writes their headers with zero salts first and the real salts last. The log's pages must
    /// read back whole all the same, and after a reopen (found by the load harness at 200 tablets: a store that
    /// no longer opened, SQLite 11, when the salts were bound to the pages).
    @Test func aTransactionThatSpillsAndRewritesFramesReadsBackWhole() async throws {
        let directory = try directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = SymmetricKey(size: .bits256)
        let user = OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey())
        let url = directory.appendingPathComponent("offline.sqlite")
        let store = try OfflineStore(
            url: url, model: try ServiceModel.aircraftChecks, deviceID: "tablet-1", definingQueries: [])
        try await store.open(as: user, key: key)
        let rows = (0..<12_000).map { index -> [String: PrimitiveValue] in
            [
                "ID": .guid(UUID()), "TailNumber": .string("D-BULK"), "FuelKg": .decimal(Decimal(index)),
                "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15),
                "Status": .string("final"), "Remarks": .string(String(repeating: "b", count: 300)),
            ]
        }
        _ = try await store.measureBulkInsert(rows, into: "PreflightChecks")
        #expect(try await store.count("PreflightChecks") == 12_000)
        #expect(try await store.integrityCheck())
        await store.close()
        let reopened = try OfflineStore(
            url: url, model: try ServiceModel.aircraftChecks, deviceID: "tablet-1", definingQueries: [])
        try await reopened.open(as: user, key: key)
        #expect(try await reopened.count("PreflightChecks") == 12_000)
        #expect(try await reopened.integrityCheck())
        await reopened.close()
    }

    @Test func aForgedCommitFrameEndsTheLogInsteadOfCommitting() async throws {
        let directory = try directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = SymmetricKey(size: .bits256)
        let user = OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey())
        let (copy, wal, recorded) = try await snapshot(directory, key: key, user: user)
        #expect(wal.frames > 3)
        // The checksum as SQLite makes it: the log header's own.
        let headerSum = wal.checksum(wal.bytes[0..<24], from: (0, 0))
        #expect(headerSum.0 == wal.storedChecksum(after: -1).0 && headerSum.1 == wal.storedChecksum(after: -1).1)
        // The last transaction made uncommitted (its commit frame's size cleared), then a forged commit frame after
        // it for a page past the end, which nothing ever reads. Both pass SQLite's checksums.
        let last = wal.frames - 1
        let size = wal.u32(wal.frameOffset(last) + 4)
        #expect(size > 0)
        var forged = wal
        forged.rewrite(last, word: 1, to: 0)
        #expect(try await open(copy, wal: forged, key: key, user: user) == recorded - 1)
        // The forged commit must not commit that transaction: the log ends before it, and the store is whole.
        forged.appendForgedCommit(page: size + 100, size: size)
        #expect(try await open(copy, wal: forged, key: key, user: user) == recorded - 1)
    }

    @Test func aRelabelledFrameIsNotUsedAsAnotherPage() async throws {
        let directory = try directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = SymmetricKey(size: .bits256)
        let user = OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey())
        let (copy, wal, recorded) = try await snapshot(directory, key: key, user: user)
        // Each frame in turn claims to be page 2 (or 3, if it is page 2): the log ends before it, whole.
        for frame in stride(from: 1, to: wal.frames, by: max(1, wal.frames / 6)) {
            var forged = wal
            let page = wal.u32(wal.frameOffset(frame))
            forged.relabel(frame, as: page == 2 ? 3 : 2)
            let count = try await open(copy, wal: forged, key: key, user: user)
            #expect(count != nil, "relabelled frame \(frame) left a store that does not open whole")
            #expect((count ?? 0) <= recorded)
        }
        // Unchanged, the copy holds every check.
        #expect(try await open(copy, wal: wal, key: key, user: user) == recorded)
    }
}
