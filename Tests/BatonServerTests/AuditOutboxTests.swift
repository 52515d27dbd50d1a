import BatonTestSupport
import Foundation
import GRDB
import Logging
import Synchronization
import Testing

@testable import BatonServer

/// A change's audit entries are committed with the change, in the data database's outbox, then moved to the
/// audit log: a crash between the two databases loses none and moving twice adds each once.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct AuditOutboxTests {
    static func entry(_ action: String) -> AuditEntry {
        AuditEntry(
            at: Date(timeIntervalSince1970: 1_795_000_000), actor: "alice", action: action, subject: "PreflightChecks",
            address: "127.0.0.1", detail: "by bob")
    }

    func reopen(_ directory: URL) async throws -> BatonServer {
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = directory
        configuration.bcryptCost = 4
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        return try await BatonServer(configuration: configuration, logger: logger)
    }

    func outboxCount(_ server: BatonServer) async throws -> Int {
        try await #require(server.data.store.pool).read { db in
            try Int.fetchOne(db, sql: #"SELECT count(*) FROM "\#(DataStore.auditOutbox)""#) ?? -1
        }
    }

    @Test func entriesLeftByACrashAreMovedAtTheNextStart() async throws {
        let first = try await TestServer()
        defer { first.remove() }
        // A change committed with its entries, and the process gone before they reached the log.
        let outbox = first.server.data.outbox
        try await #require(first.server.data.store.pool).write { db in
            try GRDBConnection.run(db) { connection in
                var entries = [Self.entry("crash-window-1"), Self.entry("crash-window-2")]
                try await outbox.stage(&entries, in: connection)
            }
        }
        #expect(try await outboxCount(first.server) == 2)
        let restarted = try await reopen(first.directory)
        let actions = try await restarted.audit.entries(limit: 1_000).map(\.action)
        #expect(actions.filter { $0.hasPrefix("crash-window") }.sorted() == ["crash-window-1", "crash-window-2"])
        #expect(try await outboxCount(restarted) == 0)
        // A third start finds nothing more to move.
        let again = try await reopen(first.directory)
        #expect(try await again.audit.entries(limit: 1_000).filter { $0.action.hasPrefix("crash-window") }.count == 2)
    }

    /// Entries go in many to a statement (``AuditLog/rowsPerInsert``): more than one statement's worth crosses the
    /// outbox to the log complete, in order, each once even when moved again.
    @Test func moreEntriesThanOneStatementHoldsAreMovedCompleteAndInOrder() async throws {
        let first = try await TestServer()
        defer { first.remove() }
        let outbox = first.server.data.outbox
        let count = AuditLog.rowsPerInsert * 2 + 7
        let staged = try await #require(first.server.data.store.pool).write { db in
            try GRDBConnection.run(db) { connection in
                var entries = (0..<count).map { Self.entry("bulk-\($0)") }
                try await outbox.stage(&entries, in: connection)
                #expect(Set(entries.compactMap(\.outboxKey)).count == count)
                return entries
            }
        }
        #expect(try await outboxCount(first.server) == count)
        let restarted = try await reopen(first.directory)
        let moved = try await restarted.audit.entries(limit: 10_000).map(\.action).filter { $0.hasPrefix("bulk-") }
        // The newest first.
        #expect(moved == (0..<count).reversed().map { "bulk-\($0)" })
        let again = try await reopen(first.directory)
        #expect(try await again.audit.entries(limit: 10_000).filter { $0.action.hasPrefix("bulk-") }.count == count)
        // The same keyed entries written to the log once more, many a statement, add none (each once by its key).
        try await again.database.storage.write { db in try await AuditLog.insert(staged, in: db) }
        #expect(try await again.audit.entries(limit: 10_000).filter { $0.action.hasPrefix("bulk-") }.count == count)
    }

    @Test func movingAnEntryTwiceAddsItOnce() async throws {
        let test = try await TestServer()
        defer { test.remove() }
        let pool = try #require(test.server.data.store.pool)
        let outbox = test.server.data.outbox
        try await pool.write { db in
            try GRDBConnection.run(db) { connection in
                var entries = [Self.entry("moved-once")]
                try await outbox.stage(&entries, in: connection)
            }
        }
        try await pool.write { db in
            try db.execute(sql: #"CREATE TABLE kept AS SELECT * FROM "\#(DataStore.auditOutbox)""#)
        }
        #expect(try await test.server.audit.collect(from: test.server.data.store.storage) == 1)
        // As after a crash between writing the log and emptying the outbox: the same row is there again.
        try await pool.write { db in
            try db.execute(sql: #"INSERT INTO "\#(DataStore.auditOutbox)" SELECT * FROM kept"#)
        }
        #expect(try await test.server.audit.collect(from: test.server.data.store.storage) == 1)
        let moved = try await test.server.audit.entries(limit: 1_000).filter { $0.action == "moved-once" }
        #expect(moved.count == 1)
        #expect(moved.first?.actor == "alice")
        #expect(moved.first?.detail == "by bob")
        #expect(try await outboxCount(test.server) == 0)
    }

    /// On PostgreSQL the audit log and the data are one database: a change's entries go into the log in the
    /// change's own transaction, with nothing left in the outbox to move and no second write. (The outbox cost each
    /// change two more statements, an insert and a delete, and each request a transaction of its own for the log.)
    /// Over HTTP, the entry is there once, and an entry a change stages is in the log when its commit returns.
    @Test func onPostgreSQLAChangesEntriesGoIntoTheLogInItsOwnTransaction() async throws {
        try await Fixtures.world(backend: .postgres) { server, client, alice, _ in
            let id = try await client.createCheck(31, token: alice)
            let storage = server.server.data.store.storage
            let outbox = server.server.data.outbox
            try await server.server.data.store.write { db in
                var entries = [Self.entry("committed-with-the-change")]
                try await outbox.stage(&entries, in: db)
            }
            let left = try await storage.read { db in
                try await db.fetchOne(#"SELECT count(*) FROM "\#(DataStore.auditOutbox)""#)?[0].integer
            }
            #expect(left == 0)
            let entries = try await server.server.audit.entries(limit: 100)
            #expect(entries.filter { $0.action == "committed-with-the-change" }.count == 1)
            let created = entries.filter { $0.action == "entity-created" && $0.subject?.contains(id) == true }
            #expect(created.count == 1, "\(entries)")
        }
    }

    /// On PostgreSQL an entry written with a change that then fails is rolled back with it, and one written by a
    /// change the storage ran again after a conflict is in the log once.
    @Test func onPostgreSQLAnEntryGoesAndComesWithItsChange() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let store = server.server.data.store
        let outbox = server.server.data.outbox
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await store.write { db in
                var entries = [Self.entry("rolled-back")]
                try await outbox.stage(&entries, in: db)
                throw Refused()
            }
        }
        let attempts = Mutex(0)
        try await store.write { db in
            var entries = [Self.entry("ran-again")]
            try await outbox.stage(&entries, in: db)
            let attempt = attempts.withLock { count in
                count += 1
                return count
            }
            if attempt == 1 { throw StorageError(.conflict, "as if PostgreSQL refused the commit") }
        }
        #expect(attempts.withLock { $0 } == 2)
        let actions = try await server.server.audit.entries(limit: 100).map(\.action)
        #expect(!actions.contains("rolled-back"))
        #expect(actions.filter { $0 == "ran-again" }.count == 1)
    }

    @Test func recordedEntriesLeaveTheOutboxWithTheNextChange() async throws {
        let test = try await TestServer()
        defer { test.remove() }
        let pool = try #require(test.server.data.store.pool)
        let outbox = test.server.data.outbox
        let staged = try await pool.write { db in
            try GRDBConnection.run(db) { connection in
                var entries = [Self.entry("change-1"), Self.entry("change-1b")]
                try await outbox.stage(&entries, in: connection)
                return entries
            }
        }
        #expect(staged.allSatisfy { $0.outboxKey != nil })
        try await test.server.audit.record(staged: staged, outbox: outbox)
        // Recorded, and still in the outbox until the next change's transaction…
        #expect(try await outboxCount(test.server) == 2)
        try await pool.write { db in
            try GRDBConnection.run(db) { connection in
                var entries = [Self.entry("change-2")]
                try await outbox.stage(&entries, in: connection)
            }
        }
        // …which deletes them and stages its own.
        #expect(try await outboxCount(test.server) == 1)
        let actions = try await test.server.audit.entries(limit: 100).map(\.action)
        #expect(actions.filter { $0.hasPrefix("change-1") }.count == 2)
        // A restart now moves only the one the log lacks.
        let restarted = try await reopen(test.directory)
        let after = try await restarted.audit.entries(limit: 100).map(\.action)
        #expect(after.filter { $0.hasPrefix("change-") }.sorted() == ["change-1", "change-1b", "change-2"])
    }

    /// The log's recorded keys leave the outbox many to a statement (a 100-change batch deleted them one statement
    /// each): more than one statement's worth all go with the next change, and an entry the log has not recorded
    /// stays, whichever statement its neighbours went in.
    @Test func moreRecordedEntriesThanOneStatementHoldsLeaveTheOutboxTogether() async throws {
        let test = try await TestServer()
        defer { test.remove() }
        let pool = try #require(test.server.data.store.pool)
        let outbox = test.server.data.outbox
        let count = AuditLog.rowsPerInsert * 2 + 7
        let staged = try await pool.write { db in
            try GRDBConnection.run(db) { connection in
                var entries = (0..<count).map { Self.entry("recorded-\($0)") }
                try await outbox.stage(&entries, in: connection)
                return entries
            }
        }
        // The log takes all but one in the middle of the second statement's share.
        let missing = AuditLog.rowsPerInsert + 3
        try await test.server.audit.record(
            staged: staged.enumerated().filter { $0.offset != missing }.map(\.element), outbox: outbox)
        #expect(try await outboxCount(test.server) == count)
        try await pool.write { db in
            try GRDBConnection.run(db) { connection in
                var entries = [Self.entry("next-change")]
                try await outbox.stage(&entries, in: connection)
            }
        }
        let left = try await pool.read { db in
            try String.fetchAll(db, sql: #"SELECT action FROM "\#(DataStore.auditOutbox)" ORDER BY rowid"#)
        }
        #expect(left == ["recorded-\(missing)", "next-change"])
    }
}
