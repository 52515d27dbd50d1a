import BatonSQL
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

    /// Runs `body` with an idle connection, in the caller's task, or returns `nil` when ``capacity`` are busy (the
    /// caller then reads through the pool). `body` has the connection to itself until it returns, and runs each
    /// statement on the connection's queue (``InlineConnection``).
    func withConnection<T>(_ body: (DatabaseQueue) async throws -> T) async throws -> T? {
        guard let connection = try take() else { return nil }
        defer { give(connection) }
        return try await body(connection)
    }

    /// Runs a read in one read transaction, so its statements see one snapshot; a read that throws is rolled back.
    ///
    /// Its `BEGIN` and `COMMIT` are the connection's cached statements: `Database.inTransaction` parsed and prepared
    /// both again for every read, a sixtieth of a delta page.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        guard let connection = try take() else { return try pool.read(body) }
        defer { give(connection) }
        return try connection.unsafeRead { db in
            try db.cachedStatement(sql: "BEGIN DEFERRED TRANSACTION").execute()
            let result: T
            do {
                result = try body(db)
                try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            } catch {
                // GRDB's rollback: it retries once after resetting statements an interrupt left active.
                if db.isInsideTransaction { try? db.rollback() }
                throw error
            }
            return result
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
    /// Runs the statement with `values` bound and calls `body` with the SQLite statement on each row, until `body`
    /// returns `false` or the rows end. `body` reads the columns with the `sqlite3_column_*` functions.
    ///
    /// For the hot read paths. GRDB's `Row` cursor indexes the column names of every statement it runs (a
    /// dictionary of lower-cased names), a sixth of a key read; its plainest cursor still decodes a first column,
    /// and its arguments are built as existentials through an initializer generic over their sequence. A statement
    /// that only reads and returns columns (`sqlite3_stmt_readonly`, `sqlite3_column_count`) is therefore stepped
    /// here, with its values bound straight (``bind(_:)``); it runs no trigger and changes nothing, so GRDB's
    /// transaction observers have nothing to see. One that writes (`… RETURNING`) goes through GRDB's cursor,
    /// which tells the observers.
    func forEachRow(binding values: [SQLValue], _ body: (SQLiteStatement) throws -> Bool) throws {
        try bind(values)
        // A statement that returns no columns may still end a transaction or a savepoint (BEGIN, COMMIT,
        // RELEASE … are "read-only" to SQLite): GRDB must see those.
        guard sqlite3_stmt_readonly(sqliteStatement) != 0, sqlite3_column_count(sqliteStatement) > 0 else {
            let cursor = try DatabaseValue.fetchCursor(self)
            while try cursor.next() != nil {
                guard try body(sqliteStatement) else { return }
            }
            return
        }
        // Reset at the end, whole or not: a statement left on a row would keep its read transaction open.
        defer { sqlite3_reset(sqliteStatement) }
        while true {
            let code = sqlite3_step(sqliteStatement)
            if code == SQLITE_DONE { return }
            guard code == SQLITE_ROW else { throw failure(code) }
            guard try body(sqliteStatement) else { return }
        }
    }

    /// Binds `values` to the statement's parameters through SQLite's C interface, after GRDB has reset the
    /// statement and cleared what it held (GRDB then runs it with these bindings: its `execute()` with no
    /// arguments). Text and blobs are copied by SQLite and bound with their byte length, so a NUL inside text is
    /// kept rather than ending it. A count other than the statement's parameters is an error, as in GRDB.
    func bind(_ values: [SQLValue]) throws {
        setUncheckedArguments(StatementArguments())
        let handle = sqliteStatement
        guard Int(sqlite3_bind_parameter_count(handle)) == values.count else {
            throw DatabaseError(
                resultCode: .SQLITE_MISUSE,
                message: "The statement takes \(sqlite3_bind_parameter_count(handle)) arguments, not \(values.count).",
                sql: sql)
        }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .null: code = sqlite3_bind_null(handle, index)
            case .integer(let number): code = sqlite3_bind_int64(handle, index, number)
            case .real(let number): code = sqlite3_bind_double(handle, index, number)
            case .text(var text):
                code = text.withUTF8 { bytes in
                    // An empty buffer may have no address, which SQLite would bind as NULL.
                    guard let address = bytes.baseAddress else {
                        return sqlite3_bind_text(handle, index, "", 0, sqliteTransient)
                    }
                    return sqlite3_bind_text64(
                        handle, index, address, UInt64(bytes.count), sqliteTransient, UInt8(SQLITE_UTF8))
                }
            case .blob(let bytes):
                code = bytes.withUnsafeBytes { bytes in
                    guard let address = bytes.baseAddress, !bytes.isEmpty else {
                        return sqlite3_bind_zeroblob(handle, index, 0)
                    }
                    return sqlite3_bind_blob64(handle, index, address, UInt64(bytes.count), sqliteTransient)
                }
            }
            guard code == SQLITE_OK else { throw failure(code) }
        }
    }

    /// SQLite's error for `code` on this statement's connection, as GRDB reports one.
    private func failure(_ code: Int32) -> DatabaseError {
        DatabaseError(
            resultCode: ResultCode(rawValue: code),
            message: String(cString: sqlite3_errmsg(sqlite3_db_handle(sqliteStatement))), sql: sql)
    }
}

/// SQLite's `SQLITE_TRANSIENT`: it copies the value before the bind returns. The C macro casts -1 to a destructor
/// pointer, which Swift does not import.
private let sqliteTransient = unsafeBitCast(-1, to: sqlite3_destructor_type.self)
