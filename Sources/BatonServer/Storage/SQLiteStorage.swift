import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB
import GRDBSQLite

/// ``ServerStorage`` on a SQLite file through GRDB: a `DatabasePool` (WAL mode, so admin commands and the
/// server can use the file at once) and this process's in-place readers.
public struct SQLiteStorage: ServerStorage {
    /// The GRDB pool.
    let pool: DatabasePool
    /// This process's connections for the reads done in place.
    let readers: InlineReaders
    /// Whether ``read(_:)`` runs on the calling thread (the data service's reads, short and bounded by their
    /// page size) rather than on GRDB's reader queue.
    let readsInPlace: Bool

    public var dialect: SQLDialect { .sqlite }

    /// Opens (creating it if needed) a database file.
    init(path: String, readsInPlace: Bool = false) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        pool = try DatabasePool(path: path, configuration: configuration)
        // GRDB opens a pool in WAL mode with `synchronous = NORMAL`, where a commit reaches the disk only at the
        // next checkpoint: a power loss could take back a change the server had answered for, after the device
        // removed it from its queue. FULL flushes the log at each commit (one fsync per transaction).
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        readers = InlineReaders(pool: pool)
        self.readsInPlace = readsInPlace
    }

    public func read<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T {
        do {
            if readsInPlace { return try readers.read { db in try GRDBConnection.run(db, body) } }
            return try await pool.read { db in try GRDBConnection.run(db, body) }
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }

    /// The one writer makes every write serial: `isolation` makes no difference here.
    @discardableResult
    public func write<T: Sendable>(
        isolation: WriteIsolation, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        do {
            return try await pool.write { db in try GRDBConnection.run(db, body) }
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }

    /// `prepared` makes no difference here: GRDB prepares every statement once per connection.
    ///
    /// The body runs in the caller's task, its statement on an in-place connection's queue (`InlineConnection`):
    /// run inside the connection's access instead, it needed an immediate task of its own (`synchronously(_:)`),
    /// about 2.6 µs of a key read's 130 under `perf`. With every in-place connection busy, it reads through the pool
    /// as before.
    public func readStatement<T: Sendable>(
        prepared: Bool, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        do {
            if let result = try await readers.withConnection({ try await body(InlineConnection(queue: $0)) }) {
                return result
            }
            return try readers.readStatement { db in try GRDBConnection.run(db, body) }
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }

    public func close() {
        readers.close()
        try? pool.close()
    }
}

/// A GRDB database access as an ``SQLConnection``. Statements are prepared once per connection and kept
/// (GRDB's statement cache): the server's statements are constant text, the data service's few per query shape.
///
/// The statements are `async` (the seam's shape, for PostgreSQL) but run synchronously and never suspend:
/// ``run(_:_:)`` starts the logic's body as an immediate task inside GRDB's access, on its thread, where it runs to
/// its end before the access returns.
struct GRDBConnection: SQLConnection {
    let db: Database

    var dialect: SQLDialect { .sqlite }

    /// Runs an access's `body` to its end on the calling thread, inside GRDB's access to `db`.
    static func run<T: Sendable>(_ db: Database, _ body: @escaping @Sendable (any SQLConnection) async throws -> T)
        throws -> T
    {
        try synchronously { try await body(GRDBConnection(db: db)) }
    }

    @discardableResult
    func execute(_ sql: String, _ arguments: [SQLValue]) async throws -> Int {
        try executeNow(sql, arguments)
    }

    /// ``execute(_:_:)``, synchronously.
    func executeNow(_ sql: String, _ arguments: [SQLValue]) throws -> Int {
        do {
            let statement = try db.cachedStatement(sql: sql)
            try statement.bind(arguments)
            try statement.execute()
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
        return db.changesCount
    }

    func fetchAll(_ sql: String, _ arguments: [SQLValue]) async throws -> [SQLRow] {
        try fetchAllNow(sql, arguments)
    }

    /// ``fetchAll(_:_:)``, synchronously.
    func fetchAllNow(_ sql: String, _ arguments: [SQLValue]) throws -> [SQLRow] {
        var rows: [SQLRow] = []
        var columns: [String] = []
        try eachRow(sql, arguments) { cursor in
            if columns.isEmpty { columns = cursor.columnNames }
            rows.append(SQLRow(columns: columns, values: (0..<columns.count).map(cursor.value(at:))))
            return true
        }
        return rows
    }

    func forEachRow(
        _ sql: String, _ arguments: [SQLValue], _ body: (any SQLCursor) throws -> Bool
    ) async throws {
        try eachRow(sql, arguments, body)
    }

    /// ``forEachRow(_:_:_:)``, synchronously.
    func eachRow(_ sql: String, _ arguments: [SQLValue], _ body: (any SQLCursor) throws -> Bool) throws {
        do {
            let statement = try db.cachedStatement(sql: sql)
            let cursor = GRDBCursor(statement: statement.sqliteStatement, columnNames: statement.columnNames)
            try statement.forEachRow(binding: arguments) { _ in try body(cursor) }
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }

    func inSavepoint(_ body: () async throws -> Bool) async throws {
        try savepointNow(body)
    }

    /// ``inSavepoint(_:)``, from synchronous code: GRDB's savepoint takes a synchronous closure, and the body runs to
    /// its end inside it, as in ``run(_:_:)``.
    func savepointNow(_ body: () async throws -> Bool) throws {
        do {
            try db.inSavepoint { try synchronously(body) ? .commit : .rollback }
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }
}

/// An in-place reader's connection, held by one read, as an ``SQLConnection`` whose statements each run on the
/// connection's queue from the caller's task (``SQLiteStorage/readStatement(prepared:_:)``): the read's body needs no
/// task of its own, and nothing else uses the connection until it returns. Outside a transaction, as that read is:
/// each statement is atomic on its own. The body awaits nothing but its statements, as on every SQLite access (read
/// through the pool, when every in-place connection is busy, it runs inside ``synchronously(_:)``).
struct InlineConnection: SQLConnection {
    let queue: DatabaseQueue

    var dialect: SQLDialect { .sqlite }

    @discardableResult
    func execute(_ sql: String, _ arguments: [SQLValue]) async throws -> Int {
        try access { try GRDBConnection(db: $0).executeNow(sql, arguments) }
    }

    func fetchAll(_ sql: String, _ arguments: [SQLValue]) async throws -> [SQLRow] {
        try access { try GRDBConnection(db: $0).fetchAllNow(sql, arguments) }
    }

    func forEachRow(_ sql: String, _ arguments: [SQLValue], _ body: (any SQLCursor) throws -> Bool) async throws {
        try access { try GRDBConnection(db: $0).eachRow(sql, arguments, body) }
    }

    /// The body's statements come back to the queue reentrantly, inside the savepoint's access.
    func inSavepoint(_ body: () async throws -> Bool) async throws {
        try access { try GRDBConnection(db: $0).savepointNow(body) }
    }

    /// Runs `work` on the connection's queue (or right away when already on it, inside a savepoint).
    private func access<T>(_ work: (Database) throws -> T) throws -> T {
        do {
            return try queue.unsafeReentrantRead(work)
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }
}

/// Runs `body` to its end on the calling thread, from synchronous code (inside a GRDB access).
///
/// The logic's bodies are `async` (the seam's shape, for PostgreSQL), but on SQLite their only suspension points
/// are ``GRDBConnection``'s statements, which never suspend: started as an immediate task (`Task.immediate`), the
/// body finishes before this returns, on this thread, inside the access. A body that did suspend (awaited something
/// else) would leave GRDB's access with its connection: that is a programming error, and it stops the process
/// rather than let the database be touched from another thread.
func synchronously<T>(_ body: () async throws -> T) throws -> T {
    try withoutActuallyEscaping(body) { body in
        let outcome = Outcome<T>()
        let work = UnsafeTransfer(body)
        Task.immediate {
            do {
                outcome.result = .success(try await work.value())
            } catch {
                outcome.result = .failure(error)
            }
        }
        guard let result = outcome.result else {
            fatalError("A SQLite access suspended: its body awaited more than its statements.")
        }
        return try result.get()
    }
}

/// What an immediate task left, read on the thread that ran it (``synchronously(_:)``).
private final class Outcome<T>: @unchecked Sendable {
    var result: Result<T, any Error>?
}

/// A value handed to an immediate task that runs on the same thread before the caller goes on
/// (``synchronously(_:)``): never shared between threads.
private struct UnsafeTransfer<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

/// A SQLite statement on a row: the data service's JSON writer reads its columns straight from SQLite's
/// buffers (``RowJSONWriter``).
struct GRDBCursor: SQLCursor {
    let statement: SQLiteStatement
    let columnNames: [String]

    var sqliteStatement: OpaquePointer? { statement }

    func value(at index: Int) -> SQLValue { SQLValue(sqliteStatement: statement, index: Int32(index)) }
}

extension SQLValue {
    /// The value of column `index` of the row `statement` is on, read by its storage class with its byte length:
    /// text keeps a NUL it holds (GRDB's `DatabaseValue` reads text as a C string, which ends at the first NUL).
    init(sqliteStatement statement: SQLiteStatement, index: Int32) {
        switch sqlite3_column_type(statement, index) {
        case SQLITE_INTEGER: self = .integer(sqlite3_column_int64(statement, index))
        case SQLITE_FLOAT: self = .real(sqlite3_column_double(statement, index))
        case SQLITE_TEXT:
            // sqlite3_column_text before sqlite3_column_bytes, as SQLite's documentation asks.
            guard let text = sqlite3_column_text(statement, index) else {
                self = .text("")
                return
            }
            let count = Int(sqlite3_column_bytes(statement, index))
            self = .text(String(decoding: UnsafeBufferPointer(start: text, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            guard let blob = sqlite3_column_blob(statement, index) else {
                self = .blob([])
                return
            }
            let count = Int(sqlite3_column_bytes(statement, index))
            self = .blob(Array(UnsafeRawBufferPointer(start: blob, count: count)))
        default: self = .null
        }
    }
}

extension StorageError {
    /// The kind of a SQLite error.
    init(sqlite error: DatabaseError) {
        let kind: Kind
        if [.SQLITE_CONSTRAINT_PRIMARYKEY, .SQLITE_CONSTRAINT_UNIQUE].contains(error.extendedResultCode) {
            kind = .uniqueViolation
        } else if error.resultCode == .SQLITE_CONSTRAINT {
            kind = .constraintViolation
        } else if [.SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_CANTOPEN, .SQLITE_IOERR, .SQLITE_FULL].contains(
            error.resultCode)
        {
            kind = .unavailable
        } else {
            kind = .other
        }
        self.init(kind, "SQLite error \(error.resultCode.rawValue): \(error.message ?? "no message")")
    }
}
