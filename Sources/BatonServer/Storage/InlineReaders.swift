import Foundation
import GRDB
import GRDBSQLite
import Synchronization

/// Read-only connections for the short reads a request does in place (an entity by key, a page through an
/// index, the token check), one per thread that does them.
///
/// `DatabasePool`'s reads take a reader from its pool, which builds a key path at run time on every call, then
/// check the schema version: together a tenth of a key read. A thread's own connection needs neither: no
/// other thread uses it, and the server changes no schema while it runs. Past ``capacity`` threads (a thread
/// pool that grew), reads go to the pool.
final class InlineReaders: Sendable {
    let pool: DatabasePool
    private let configuration: Configuration
    private let connections = Mutex<[UInt: DatabaseQueue]>([:])
    static let capacity = 16

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
        guard let connection = try connection() else { return try pool.unsafeRead(body) }
        return try connection.unsafeRead(body)
    }

    /// Runs a read in one read transaction, so its statements see one snapshot.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        guard let connection = try connection() else { return try pool.read(body) }
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

    /// This thread's connection, opened on first use; `nil` past ``capacity``.
    private func connection() throws -> DatabaseQueue? {
        let thread = UInt(pthread_self())
        return try connections.withLock { connections in
            if let connection = connections[thread] { return connection }
            guard connections.count < Self.capacity else { return nil }
            let connection = try DatabaseQueue(path: pool.path, configuration: configuration)
            connections[thread] = connection
            return connection
        }
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
