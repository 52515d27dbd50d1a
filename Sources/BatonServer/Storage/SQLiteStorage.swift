import BatonSQL
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

    public var dialect: SQLDialect { .sqlite }

    /// Opens (creating it if needed) a database file.
    init(path: String) throws {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        pool = try DatabasePool(path: path, configuration: configuration)
        readers = InlineReaders(pool: pool)
    }

    public func read<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) throws -> T) async throws -> T {
        do {
            return try await pool.read { db in try body(GRDBConnection(db: db)) }
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }

    @discardableResult
    public func write<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) throws -> T) async throws -> T {
        do {
            return try await pool.write { db in try body(GRDBConnection(db: db)) }
        } catch let error as DatabaseError {
            throw StorageError(sqlite: error)
        }
    }

    public func readStatement<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) throws -> T) async throws
        -> T
    {
        do {
            return try readers.readStatement { db in try body(GRDBConnection(db: db)) }
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
/// (GRDB's statement cache): the server's statements are constant text.
struct GRDBConnection: SQLConnection {
    let db: Database

    var dialect: SQLDialect { .sqlite }

    @discardableResult
    func execute(_ sql: String, _ arguments: [SQLValue]) throws -> Int {
        try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(arguments.map(\.databaseValue)))
        return db.changesCount
    }

    func fetchAll(_ sql: String, _ arguments: [SQLValue]) throws -> [SQLRow] {
        let statement = try db.cachedStatement(sql: sql)
        let columns = statement.columnNames
        var rows: [SQLRow] = []
        try statement.forEachRow(arguments: StatementArguments(arguments.map(\.databaseValue))) { row in
            rows.append(
                SQLRow(
                    columns: columns,
                    values: (0..<Int32(columns.count)).map { SQLValue(DatabaseValue(sqliteStatement: row, index: $0)) }
                ))
            return true
        }
        return rows
    }
}

extension StorageError {
    /// The kind of a SQLite error.
    init(sqlite error: DatabaseError) {
        let kind: Kind
        if [.SQLITE_CONSTRAINT_PRIMARYKEY, .SQLITE_CONSTRAINT_UNIQUE].contains(error.extendedResultCode) {
            kind = .uniqueViolation
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
