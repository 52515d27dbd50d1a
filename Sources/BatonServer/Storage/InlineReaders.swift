import BatonSQLGRDB
import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// Read-only connections for the short reads a request does in place (an entity by key, a page, the token
/// check).
///
/// `DatabasePool`'s reads take a reader from its pool, which builds a key path at run time on every call, and
/// check the schema version: together a tenth of a key read. These connections are taken from a plain stack
/// under a lock, last returned first out (so the connection taken is the one whose page cache is warm), and
/// need no schema check: these reads use none of GRDB's schema introspection, and SQLite prepares a statement
/// again by itself when another process changed the schema. With ``capacity`` connections busy, a read goes
/// to the pool.
final class InlineReaders: Sendable {
    let pool: DatabasePool
    private let configuration: Configuration
    private let state = Mutex<(idle: [DatabaseQueue], opened: Int)>(([], 0))
    static let capacity = 8

    init(pool: DatabasePool) {
        self.pool = pool
        var configuration = pool.configuration
        configuration.readonly = true
        configuration.label = (configuration.label ?? "baton") + ".inline"
        self.configuration = configuration
    }

    /// Runs a read of exactly one SQL statement outside a transaction: one statement is atomic on its own (a
    /// transaction around it paid a BEGIN and a COMMIT for nothing). Reads of several statements that must
    /// see one snapshot use ``read(_:)``.
    func readStatement<T>(_ body: (Database) throws -> T) throws -> T {
        guard let connection = try take() else { return try pool.unsafeRead(body) }
        defer { give(connection) }
        return try connection.unsafeRead(body)
    }

    /// Runs a read in one read transaction, so its statements see one snapshot.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        guard let connection = try take() else { return try pool.read(body) }
        defer { give(connection) }
        return try connection.unsafeRead { db in
            var result: Result<T, any Error>?
            try db.inTransaction(.deferred) {
                result = Result { try body(db) }
                return .commit
            }
            guard let result else { throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "No read result") }
            return try result.get()
        }
    }

    /// The most recently returned idle connection, or a new one; `nil` when ``capacity`` are busy.
    private func take() throws -> DatabaseQueue? {
        let (idle, mayOpen) = state.withLock { state -> (DatabaseQueue?, Bool) in
            if let connection = state.idle.popLast() { return (connection, false) }
            guard state.opened < Self.capacity else { return (nil, false) }
            state.opened += 1
            return (nil, true)
        }
        if let idle { return idle }
        guard mayOpen else { return nil }
        do {
            return try DatabaseQueue(path: pool.path, configuration: configuration)
        } catch {
            state.withLock { $0.opened -= 1 }
            throw error
        }
    }

    /// Closes the idle connections and opens no new ones (reads go to the pool, which the owner closes).
    func close() {
        let idle = state.withLock { state in
            defer {
                state.idle.removeAll()
                state.opened = Self.capacity
            }
            return state.idle
        }
        for connection in idle { try? connection.close() }
    }

    private func give(_ connection: DatabaseQueue) {
        state.withLock { $0.idle.append(connection) }
    }
}

extension Statement {
    /// Runs the statement and calls `body` with the SQLite statement on each row, until `body` returns
    /// `false` or the rows end. `body` reads the columns with the `sqlite3_column_*` functions.
    ///
    /// For the hot read paths: GRDB's `Row` cursor indexes the column names of every statement it runs (a
    /// dictionary of lower-cased names), a sixth of a key read; this steps with GRDB's plainest cursor instead,
    /// which decodes only the first column (a copy, so the column keeps its type for `body`).
    func forEachRow(arguments: StatementArguments, _ body: (SQLiteStatement) throws -> Bool) throws {
        let cursor = try DatabaseValue.fetchCursor(self, arguments: arguments)
        while try cursor.next() != nil {
            guard try body(sqliteStatement) else { return }
        }
    }
}
