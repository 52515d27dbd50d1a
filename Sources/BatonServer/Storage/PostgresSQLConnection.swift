import BatonSQL
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// A leased PostgreSQL connection as an ``SQLConnection``: `?` placeholders become `$1, $2, …`; each statement
/// is sent on the connection's event loop and its answer awaited.
struct PostgresSQLConnection: SQLConnection {
    let connection: PostgresConnection
    let logger: Logger
    /// How long a statement may go unanswered; `nil` for no limit (migrations, copies).
    let deadline: TimeAmount?
    /// Whether statements are prepared (`PreparedStatements`): the server's own shapes of reads
    /// (``PostgresStorage/readStatement(prepared:_:)``), and in a write (``PostgresStorage/write(_:)``) only the
    /// changes the data service runs through `perform`, whose shapes are its own and the entity sets' columns.
    var prepared = false
    /// Whether this is a write's connection, whose new shapes may take only ``PreparedStatements/writesLimit``.
    var inWrite = false

    var dialect: SQLDialect { .postgres }

    @discardableResult
    func execute(_ sql: String, _ arguments: [SQLValue]) async throws -> Int {
        // A prepared read's count is its rows, as its command tag says; a change's count is only in its tag, which
        // postgres-nio does not give for a prepared statement (`perform(_:_:)` runs changes prepared).
        guard prepared, !inWrite, Self.preparedKind(sql) == .read else {
            return try await run(sql, arguments).metadata.rows ?? 0
        }
        do {
            return try await rows(sql, arguments, prepared: true).count
        } catch let error as PSQLError {
            throw StorageError(postgres: error)
        }
    }

    func perform(_ sql: String, _ arguments: [SQLValue]) async throws {
        guard prepared, Self.preparedKind(sql) != nil else {
            _ = try await run(sql, arguments)
            return
        }
        do {
            _ = try await rows(sql, arguments, prepared: true)
        } catch let error as PSQLError {
            throw StorageError(postgres: error)
        }
    }

    /// Whether a statement of a prepared access runs prepared: reads (`SELECT`) and changes of rows (`INSERT`,
    /// `UPDATE`, `DELETE`); `WITH`, transaction control, settings, locks and schema changes do not (`nil`).
    static func preparedKind(_ sql: String) -> PreparedKind? {
        var bytes = sql.utf8.drop { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") || $0 == UInt8(ascii: "\t") }
        var word: [UInt8] = []
        while let byte = bytes.first, word.count < 7, (byte | 0x20) >= UInt8(ascii: "a"),
            (byte | 0x20) <= UInt8(ascii: "z")
        {
            word.append(byte | 0x20)
            bytes = bytes.dropFirst()
        }
        // Not `WITH`: a common table expression may change rows, whose count `execute` would then not return.
        if "select".utf8.elementsEqual(word) { return .read }
        if ["insert", "update", "delete"].contains(where: { $0.utf8.elementsEqual(word) }) { return .change }
        return nil
    }

    enum PreparedKind { case read, change }

    func fetchAll(_ sql: String, _ arguments: [SQLValue]) async throws -> [SQLRow] {
        // A write's reads run unprepared: a mixed `$batch` reads with a client's `$filter` shapes inside its write.
        guard prepared, !inWrite, Self.preparedKind(sql) != nil else {
            return try Self.rows(of: try await run(sql, arguments))
        }
        do {
            return try await rows(sql, arguments, prepared: true)
        } catch let error as PSQLError {
            throw StorageError(postgres: error)
        }
    }

    /// A result's rows as Baton reads them.
    static func rows(of result: PostgresQueryResult) throws -> [SQLRow] {
        try rows(of: result.rows)
    }

    /// Rows as Baton reads them.
    static func rows(of rows: [PostgresRow]) throws -> [SQLRow] {
        guard let first = rows.first else { return [] }
        let columns = first.map { $0.columnName }
        return try rows.map { row in SQLRow(columns: columns, values: try row.map(Self.value)) }
    }

    func forEachRow(
        _ sql: String, _ arguments: [SQLValue], _ body: (any SQLCursor) throws -> Bool
    ) async throws {
        for row in try await fetchAll(sql, arguments) {
            guard try body(ValuesCursor(row: row)) else { return }
        }
    }

    func inSavepoint(_ body: () async throws -> Bool) async throws {
        try await execute("SAVEPOINT baton", [])
        let keep: Bool
        do {
            keep = try await body()
        } catch {
            try await execute("ROLLBACK TO SAVEPOINT baton", [])
            throw error
        }
        try await execute(keep ? "RELEASE SAVEPOINT baton" : "ROLLBACK TO SAVEPOINT baton", [])
    }

    /// A row already read, as a cursor.
    struct ValuesCursor: SQLCursor {
        let row: SQLRow
        var columnNames: [String] { row.columns }
        func value(at index: Int) -> SQLValue { row.values[index] }
    }

    private func run(_ sql: String, _ arguments: [SQLValue]) async throws -> PostgresQueryResult {
        do {
            return try await answer(sql, arguments).get()
        } catch let error as PSQLError {
            throw StorageError(postgres: error)
        }
    }

    /// Sends a statement; the future is its answer, or fails after the deadline.
    func answer(_ sql: String, _ arguments: [SQLValue]) throws -> EventLoopFuture<PostgresQueryResult> {
        let binds = Self.bindings(arguments)
        // A query written to a connection that has just closed (the server went away) is never answered:
        // postgres-nio drops the write. Such a statement fails after the deadline, and its connection is closed
        // so that the pool makes a new one.
        guard !connection.isClosed else {
            throw StorageError(.unavailable, "The connection to PostgreSQL has closed.")
        }
        let answered = connection.eventLoop.makePromise(of: PostgresQueryResult.self)
        let settled = Claim()
        let connection = self.connection
        let timer = failing(answered, settled)
        connection.query(PostgresQuery(unsafeSQL: Self.numberedPlaceholders(sql), binds: binds), logger: logger)
            .whenComplete { result in
                timer?.cancel()
                guard settled.claim() else { return }
                answered.completeWith(result)
            }
        return answered.futureResult
    }

    /// A timer that, at the deadline (none when `deadline` is `nil`), fails `answered` as `unavailable` and closes
    /// the connection — unless the answer claimed `settled` first.
    func failing<T>(_ answered: EventLoopPromise<T>, _ settled: Claim) -> Scheduled<Void>? {
        let connection = self.connection
        return deadline.map { deadline in
            connection.eventLoop.scheduleTask(in: deadline) {
                guard settled.claim() else { return }
                answered.fail(
                    StorageError(
                        .unavailable, "PostgreSQL did not answer within \(deadline.nanoseconds / 1_000_000_000) s."))
                connection.close().whenComplete { _ in }
            }
        }
    }

    /// How long a statement may go unanswered before it fails as `unavailable`.
    static let statementDeadline = TimeAmount.seconds(20)

    /// `sql` with each `?` outside quotes numbered as PostgreSQL wants: `$1, $2, …`.
    static func numberedPlaceholders(_ sql: String) -> String {
        guard sql.utf8.contains(UInt8(ascii: "?")) else { return sql }
        var result = ""
        result.reserveCapacity(sql.utf8.count + 16)
        var quote: Character?
        var number = 0
        for character in sql {
            if let open = quote {
                if character == open { quote = nil }
            } else if character == "'" || character == "\"" {
                quote = character
            } else if character == "?" {
                number += 1
                result += "$\(number)"
                continue
            }
            result.append(character)
        }
        return result
    }
}
