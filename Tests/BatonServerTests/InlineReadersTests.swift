import BatonTestSupport
import Foundation
import GRDB
import Synchronization
import Testing

@testable import BatonServer

/// The read-only connections of the reads done in place: they see every committed write at once, keep a
/// snapshot inside ``InlineReaders/read(_:)``, refuse writes, and fall back to the pool when all are busy.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct InlineReadersTests {
    let directory: URL
    let pool: DatabasePool
    let readers: InlineReaders

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("inline-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        pool = try DatabasePool(path: directory.appendingPathComponent("test.sqlite").path)
        try pool.write { db in
            try db.execute(sql: "CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)")
            try db.execute(sql: "INSERT INTO counter (id, value) VALUES (1, 0)")
        }
        readers = InlineReaders(pool: pool)
    }

    func value() throws -> Int {
        try readers.readStatement { db in try Int.fetchOne(db, sql: "SELECT value FROM counter WHERE id = 1") ?? -1 }
    }

    @Test func readsSeeEveryCommittedWriteAtOnce() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        for expected in 1...20 {
            try pool.write { db in try db.execute(sql: "UPDATE counter SET value = value + 1 WHERE id = 1") }
            #expect(try value() == expected)
        }
    }

    @Test func aReadKeepsOneSnapshot() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let (first, second) = try readers.read { db in
            let first = try Int.fetchOne(db, sql: "SELECT value FROM counter WHERE id = 1")
            // A write committed by another connection while the read is open…
            try pool.write { db in try db.execute(sql: "UPDATE counter SET value = 99 WHERE id = 1") }
            return (first, try Int.fetchOne(db, sql: "SELECT value FROM counter WHERE id = 1"))
        }
        // …is not seen inside it, and is seen by the next read.
        #expect(first == 0)
        #expect(second == 0)
        #expect(try value() == 99)
    }

    @Test func theConnectionsRefuseWrites() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(throws: DatabaseError.self) {
            try readers.readStatement { db in try db.execute(sql: "UPDATE counter SET value = 5 WHERE id = 1") }
        }
        #expect(try value() == 0)
    }

    @Test func moreThreadsThanConnectionsAllReadTheLatestValue() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        try pool.write { db in try db.execute(sql: "UPDATE counter SET value = 7 WHERE id = 1") }
        let threads = InlineReaders.capacity + 8
        let results = Mutex<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        // Plain threads, all reading at once, more than there are connections.
        let gate = DispatchGroup()
        gate.enter()
        for _ in 0..<threads {
            Thread {
                gate.wait()
                let read = (try? value()) ?? -1
                results.withLock { $0.append(read) }
                done.signal()
            }.start()
        }
        gate.leave()
        for _ in 0..<threads { done.wait() }
        #expect(results.withLock { $0 } == Array(repeating: 7, count: threads))
    }
}
