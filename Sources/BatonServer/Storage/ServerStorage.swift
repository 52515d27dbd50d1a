import BatonOData
import BatonSQL
import Foundation

/// Where the server keeps its state: the seam between the server's logic and its database engine.
///
/// Two implementations: ``SQLiteStorage`` (GRDB over files in the data directory, the default) and
/// ``PostgresStorage`` (postgres-nio, for many instances on one database). The logic above is written once, as
/// `async` closures over an ``SQLConnection``, in the style of GRDB's `DatabaseWriter`: a ``read(_:)`` sees
/// one snapshot, a ``write(_:)`` is one transaction that commits or leaves nothing behind. Writes are
/// *serializable* on both engines — SQLite has one writer; PostgreSQL runs them at `SERIALIZABLE` and runs the
/// closure again when the engine refuses a commit that could not have happened in some serial order — so a
/// check-then-change (a used refresh token, a repeated request id) means the same on one instance or many. A
/// write whose every check is about the rows it then changes may ask for less (``WriteIsolation/rowChecked``).
/// A write closure may therefore run more than once: it must change nothing but the database.
///
/// A closure awaits only its connection's statements: on PostgreSQL they are sent on the connection's event loop
/// and awaited there; on SQLite they run synchronously and never suspend, so the closure runs to its end inside
/// GRDB's access on GRDB's thread (awaiting anything else there stops the process).
public protocol ServerStorage: Sendable {
    /// The SQL dialect of the engine.
    var dialect: SQLDialect { get }

    /// Runs `body` in a read-only transaction: its statements see one snapshot.
    func read<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T

    /// Runs `body` in a write transaction isolated as `isolation` says (``WriteIsolation``): committed when it
    /// returns, rolled back when it throws. ``write(_:)`` is this with ``WriteIsolation/serializable``.
    @discardableResult
    func write<T: Sendable>(
        isolation: WriteIsolation, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T

    /// Runs a read of one statement, which is atomic on its own, with no transaction around it; on SQLite in
    /// place, on the calling thread (the hot reads of every request: the token check).
    ///
    /// `prepared`: the statement has one of the server's own shapes (constant text, an entity by key, a page in key
    /// order), which PostgreSQL keeps prepared on each connection for the life of the process. A statement a
    /// client's query options shape (`$filter`, `$search`, `$orderby`, `$select`) runs unprepared, so that no
    /// account can take the few prepared-statement slots from the server's own reads.
    func readStatement<T: Sendable>(prepared: Bool, _ body: @escaping @Sendable (any SQLConnection) async throws -> T)
        async throws -> T

    /// Closes every connection (PostgreSQL: in the background). Later calls fail.
    func close()
}

/// How a write is kept apart from the writes running beside it. SQLite has one writer, so there every write is
/// serial whatever is asked; the two differ on PostgreSQL.
public enum WriteIsolation: Sendable, Equatable {
    /// `SERIALIZABLE`: the write commits only if it could have run alone, whatever it read. Any check-then-change
    /// is safe in it, including a check of rows it does not change (a count, an absence).
    case serializable
    /// `REPEATABLE READ`: the write sees one snapshot, and fails (and runs again) when a row it changes was changed
    /// by a transaction that committed after that snapshot; its reads lock nothing. Only for a write whose every
    /// check decides about the rows that same write then changes (an entity's ETag and owner before its update or
    /// delete), about rows that are only ever added and never changed once committed (a request id's answer, an
    /// ETag a device made), or that the database itself keeps (a unique key): a check of anything else (a count,
    /// a row it does not change) could pass in two writes at once.
    ///
    /// Why it exists: under `SERIALIZABLE` a read through a B-tree locks the index page it reads, a hundred of a
    /// transaction's locks on one table become one on the table, and every update of an entity inserts into its
    /// key's index (its change marks are indexed, so no update is HOT): writers of disjoint entities refused each
    /// other's commits and ran their batches again, 1.4 to 2.7 times a batch (docs/BENCHMARKS.md).
    case rowChecked
}

/// A connection inside one ``ServerStorage`` access. Statements use `?` placeholders in both dialects.
public protocol SQLConnection {
    /// The SQL dialect of the engine.
    var dialect: SQLDialect { get }

    /// Runs a statement and returns how many rows it changed.
    @discardableResult
    func execute(_ sql: String, _ arguments: [SQLValue]) async throws -> Int

    /// Runs a statement whose count of changed rows the caller does not need: on PostgreSQL, inside a write, such a
    /// change runs prepared (postgres-nio answers a prepared statement with rows, not with its count).
    func perform(_ sql: String, _ arguments: [SQLValue]) async throws

    /// Runs a query and returns its rows.
    func fetchAll(_ sql: String, _ arguments: [SQLValue]) async throws -> [SQLRow]

    /// Runs a query and calls `body` with each row, until it returns `false` or the rows end. The cursor is
    /// valid only inside `body` (the hot read paths write JSON straight from it).
    func forEachRow(
        _ sql: String, _ arguments: [SQLValue], _ body: (any SQLCursor) throws -> Bool
    ) async throws

    /// Runs `body` in a savepoint: kept when it returns `true`, rolled back when it returns `false` or throws.
    func inSavepoint(_ body: () async throws -> Bool) async throws
}

/// The row a query is on, inside ``SQLConnection/forEachRow(_:_:_:)``.
public protocol SQLCursor {
    /// The query's column names.
    var columnNames: [String] { get }
    /// The value of a column.
    func value(at index: Int) -> SQLValue
    /// The SQLite statement on the row, when the engine is SQLite: the JSON writer reads its buffers directly.
    var sqliteStatement: OpaquePointer? { get }
}

extension SQLCursor {
    public var sqliteStatement: OpaquePointer? { nil }
}

extension ServerStorage {
    /// Runs `body` in a write transaction at ``WriteIsolation/serializable``: committed when it returns, rolled back
    /// when it throws.
    @discardableResult
    public func write<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T
    {
        try await write(isolation: .serializable, body)
    }

    /// Runs a read of one statement of the server's own shape, prepared (``readStatement(prepared:_:)``).
    public func readStatement<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T)
        async throws
        -> T
    {
        try await readStatement(prepared: true, body)
    }
}

extension SQLConnection {
    public func perform(_ sql: String, _ arguments: [SQLValue]) async throws {
        try await execute(sql, arguments)
    }

    /// Inserts `rows` (each one value per column, in order) into `table`, many rows a statement — a round trip per
    /// `rowsPerInsert` rows rather than per row — in their order; `suffix` follows each statement's values (an
    /// `ON CONFLICT` clause).
    func insert(
        into table: String, columns: [String], rows: [[SQLValue]], suffix: String = "", rowsPerInsert: Int
    ) async throws {
        let tuple = "(" + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"
        for start in stride(from: 0, to: rows.count, by: rowsPerInsert) {
            let chunk = rows[start..<min(rows.count, start + rowsPerInsert)]
            try await execute(
                "INSERT INTO \(table) (\(columns.joined(separator: ", "))) VALUES "
                    + Array(repeating: tuple, count: chunk.count).joined(separator: ", ") + suffix,
                chunk.flatMap { $0 })
        }
    }

    /// Runs a statement with its arguments.
    @discardableResult
    public func execute(_ sql: String, _ arguments: any SQLArgument...) async throws -> Int {
        try await execute(sql, arguments.map { $0.sqlValue })
    }

    /// The rows of a query with its arguments.
    public func fetchAll(_ sql: String, _ arguments: any SQLArgument...) async throws
        -> [SQLRow]
    {
        try await fetchAll(sql, arguments.map { $0.sqlValue })
    }

    /// The first row of a query, if any.
    public func fetchOne(_ sql: String, _ arguments: any SQLArgument...) async throws
        -> SQLRow?
    {
        try await fetchAll(sql, arguments.map { $0.sqlValue }).first
    }
}

/// A row a query returned: its values by position, or by column name (case-insensitive, as PostgreSQL folds
/// unquoted names to lower case).
public struct SQLRow: Sendable {
    /// The column names, shared by the rows of one query.
    public let columns: [String]
    /// The values, in column order.
    public let values: [SQLValue]

    /// Creates a row.
    public init(columns: [String], values: [SQLValue]) {
        self.columns = columns
        self.values = values
    }

    /// The value at a column position.
    public subscript(_ index: Int) -> SQLValue { values[index] }

    /// The value of the named column, its name compared as header names are (`HeaderScanner.sameName`:
    /// byte for byte, ASCII letters' case ignored; PostgreSQL folds an unquoted name to lower case, SQLite keeps it as
    /// written); `.null` when there is no such column. Foundation's `caseInsensitiveCompare` went through `NSString`
    /// and folded by Unicode's rules besides.
    public subscript(_ name: String) -> SQLValue {
        guard let index = columns.firstIndex(where: { HeaderScanner.sameName($0, name) }) else { return .null }
        return values[index]
    }
}

extension SQLValue {
    /// The value as text, if it is text.
    public var text: String? {
        if case .text(let text) = self { return text }
        return nil
    }

    /// The value as an integer (a whole real counts).
    public var integer: Int64? {
        switch self {
        case .integer(let number): number
        case .real(let number) where number.rounded() == number && abs(number) < 9e18: Int64(number)
        default: nil
        }
    }

    /// The value as a real number.
    public var real: Double? {
        switch self {
        case .integer(let number): Double(number)
        case .real(let number): number
        default: nil
        }
    }

    /// The value as a flag: a non-zero integer is `true`.
    public var bool: Bool? { integer.map { $0 != 0 } }

    /// The value as bytes.
    public var bytes: [UInt8]? {
        if case .blob(let bytes) = self { return bytes }
        return nil
    }

    /// The value as an instant: seconds since 1970, how Baton stores instants on both engines.
    public var date: Date? { real.map(Date.init(timeIntervalSince1970:)) }
}

/// A value that binds to a statement placeholder.
public protocol SQLArgument: Sendable {
    /// The bound value.
    var sqlValue: SQLValue { get }
}

extension SQLValue: SQLArgument {
    public var sqlValue: SQLValue { self }
}

extension String: SQLArgument {
    public var sqlValue: SQLValue { .text(self) }
}

extension Int: SQLArgument {
    public var sqlValue: SQLValue { .integer(Int64(self)) }
}

extension Int64: SQLArgument {
    public var sqlValue: SQLValue { .integer(self) }
}

extension Double: SQLArgument {
    public var sqlValue: SQLValue { .real(self) }
}

extension Bool: SQLArgument {
    public var sqlValue: SQLValue { .integer(self ? 1 : 0) }
}

extension Date: SQLArgument {
    /// Seconds since 1970: instants compare and order as numbers on both engines.
    public var sqlValue: SQLValue { .real(timeIntervalSince1970) }
}

extension Data: SQLArgument {
    public var sqlValue: SQLValue { .blob(Array(self)) }
}

extension Optional: SQLArgument where Wrapped: SQLArgument {
    public var sqlValue: SQLValue { self?.sqlValue ?? .null }
}

/// A storage failure the server's logic tells apart; anything else is ``Kind/other``.
public struct StorageError: Error, Sendable, CustomStringConvertible {
    /// What went wrong.
    public enum Kind: Sendable, Equatable {
        /// A unique key or primary key already holds the value.
        case uniqueViolation
        /// A `NOT NULL` or `CHECK` constraint refused the value.
        case constraintViolation
        /// The engine cannot be reached or went away: a 503, and try again later.
        case unavailable
        /// The engine refused a transaction that conflicted with another; run it again.
        case conflict
        /// The database was migrated by a newer `baton-server`.
        case newerSchema
        /// PostgreSQL could not evaluate a value of the statement (SQLSTATE class 22, a data exception: a number
        /// out of range, a substring bound out of range, text that is no number, a NUL in text); `sqlState` says
        /// which. In a read the client's query is at fault: the data service answers 400.
        case dataException(sqlState: String)
        /// Anything else.
        case other
    }

    /// The kind.
    public let kind: Kind
    /// The engine's message, without argument values.
    public let description: String

    /// Creates an error.
    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }

    /// The SQLSTATE of a ``Kind/dataException(sqlState:)``; `nil` for any other kind.
    public var dataExceptionState: String? {
        if case .dataException(let state) = kind { return state }
        return nil
    }
}

/// The engine a server runs on, as a value the compiler sees through: every access is a direct, specialised
/// call into one of the two storages (through `any ServerStorage` each read of a request went through
/// unspecialised generic code, measurably on the hot reads).
public enum StorageEngine: ServerStorage {
    /// SQLite through GRDB.
    case sqlite(SQLiteStorage)
    /// PostgreSQL through postgres-nio.
    case postgres(PostgresStorage)

    public var dialect: SQLDialect {
        switch self {
        case .sqlite: .sqlite
        case .postgres: .postgres
        }
    }

    public func read<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T {
        switch self {
        case .sqlite(let storage): try await storage.read(body)
        case .postgres(let storage): try await storage.read(body)
        }
    }

    @discardableResult
    public func write<T: Sendable>(
        isolation: WriteIsolation, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        switch self {
        case .sqlite(let storage): try await storage.write(isolation: isolation, body)
        case .postgres(let storage): try await storage.write(isolation: isolation, body)
        }
    }

    public func readStatement<T: Sendable>(
        prepared: Bool, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        switch self {
        case .sqlite(let storage): try await storage.readStatement(prepared: prepared, body)
        case .postgres(let storage): try await storage.readStatement(prepared: prepared, body)
        }
    }

    public func close() {
        switch self {
        case .sqlite(let storage): storage.close()
        case .postgres(let storage): storage.close()
        }
    }
}
