import BatonSQL
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

    /// A read that throws ends its transaction: the connection goes back with none open (which would pin an old
    /// snapshot for the next read on it), the error is the body's, and reads on it go on.
    @Test func aReadThatThrowsLeavesNoTransactionOpen() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        struct Refused: Error {}
        for round in 1...3 {
            #expect(throws: Refused.self) {
                try readers.read { db in
                    _ = try Int.fetchOne(db, sql: "SELECT value FROM counter WHERE id = 1")
                    throw Refused()
                }
            }
            try pool.write { db in try db.execute(sql: "UPDATE counter SET value = ? WHERE id = 1", arguments: [round])
            }
            let (open, read) = try readers.read { db in
                (db.isInsideTransaction, try Int.fetchOne(db, sql: "SELECT value FROM counter WHERE id = 1"))
            }
            #expect(open)
            #expect(read == round)
            #expect(try readers.readStatement { $0.isInsideTransaction } == false)
        }
    }

    /// A body that ends the transaction itself: its own error is the one thrown; without one, the read's COMMIT
    /// fails (there is nothing to commit) and says so; and reads on the connection go on either way.
    @Test func aBodyThatEndsTheTransactionItselfIsToldAndLeavesTheConnectionUsable() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        struct Refused: Error {}
        #expect(throws: Refused.self) {
            try readers.read { db in
                try db.execute(sql: "COMMIT")
                throw Refused()
            }
        }
        #expect(throws: DatabaseError.self) {
            try readers.read { db in
                try db.execute(sql: "COMMIT")
                return 1
            }
        }
        try pool.write { db in try db.execute(sql: "UPDATE counter SET value = 3 WHERE id = 1") }
        #expect(try readers.read { db in try Int.fetchOne(db, sql: "SELECT value FROM counter WHERE id = 1") } == 3)
        #expect(try value() == 3)
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

    /// A one-statement read on the server's storage runs its body in the caller's task, its statements on an in-place
    /// connection's queue: no task of its own (an immediate task a read cost a key read about 2.6 µs). With every
    /// in-place connection held, it reads through the pool, in a task of its own, with the same answer. Fails before:
    /// the body ran in a task of its own.
    @Test func aOneStatementReadRunsInItsCallersTask() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let storage = try SQLiteStorage(path: directory.appendingPathComponent("storage.sqlite").path)
        defer { storage.close() }
        try await storage.write { db in
            try await db.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)", [])
            try await db.execute("INSERT INTO counter (id, value) VALUES (1, 41)", [])
        }
        let caller = withUnsafeCurrentTask { $0?.hashValue }
        let (inside, value) = try await storage.readStatement { db in
            let task = withUnsafeCurrentTask { $0?.hashValue }
            let rows = try await db.fetchAll("SELECT value + 1 AS value FROM counter WHERE id = ?", [.integer(1)])
            return (task, rows.first?["value"])
        }
        #expect(caller != nil)
        #expect(inside == caller)
        #expect(value == .integer(42))
        // Every in-place connection held: the read goes through the pool, in a task of its own, with the same answer.
        func holdingAll(_ count: Int, _ body: () async throws -> Void) async throws {
            guard count > 0 else { return try await body() }
            let held = try await storage.readers.withConnection { _ -> Bool in
                try await holdingAll(count - 1, body)
                return true
            }
            #expect(held == true)
        }
        try await holdingAll(InlineReaders.capacity) {
            #expect(try await storage.readers.withConnection { _ in true } == nil)
            let (throughPool, again) = try await storage.readStatement { db in
                let task = withUnsafeCurrentTask { $0?.hashValue }
                var seen: SQLValue?
                try await db.forEachRow("SELECT value FROM counter WHERE id = 1", []) { cursor in
                    seen = cursor.value(at: 0)
                    return true
                }
                return (task, seen)
            }
            #expect(throughPool != caller)
            #expect(again == .integer(41))
        }
    }
}
