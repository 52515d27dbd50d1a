import BatonSQL
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

/// ``ServerStorage`` on a PostgreSQL database through postgres-nio, for any number of `baton-server`
/// instances on one database.
///
/// Each access is handed a connection of the pool of the event loop it runs on (held by a task of `LoopPool`)
/// and runs the logic's closure with it: each statement is sent and its answer awaited, with no thread pool and no
/// thread blocked on a future (before, a closure ran on a thread of its own pool that waited on each
/// statement: a thread hop and a wake-up per statement). Reads run at `REPEATABLE READ` (one snapshot), writes at `SERIALIZABLE`, retried when PostgreSQL
/// refuses a commit that conflicts with another transaction (SQLSTATE 40001) or breaks a deadlock (40P01).
public final class PostgresStorage: ServerStorage {
    /// Where the database is (its password redacted in ``PostgresLocation/description``).
    public let location: PostgresLocation
    /// One pool per event loop of NIO's singleton group (the loops Hummingbird serves on), as many as give each at
    /// least ``connectionsPerPool`` connections, so that a request's statements go out on a connection of the loop
    /// the request runs on (with one pool for all loops, a `SELECT 1` cost 130 µs of the server's CPU: perf). The
    /// access itself runs on the task that holds the connection. A request whose own pool is busy is handed to the
    /// pool with the most free connections.
    let pools: [LoopPool]
    let logger: Logger
    private let runner: Mutex<Task<Void, Never>?>
    private let retried = Atomic<Int>(0)

    /// How many times a write ran again because PostgreSQL refused it for a conflict with another transaction
    /// (SQLSTATE 40001 or 40P01), since the start.
    var conflictsRetried: Int { retried.load(ordering: .relaxed) }

    public var dialect: SQLDialect { .postgres }

    /// How many connections the loops' pools keep open between them, unless told
    /// otherwise: 16.
    public static let defaultConnections = 16

    /// How long a statement waits for a lock before it fails as `unavailable` (503): below the statement deadline.
    static var lockTimeout: String { "\(lockTimeoutSeconds)s" }

    static var lockTimeoutSeconds: Int64 {
        max(1, PostgresSQLConnection.statementDeadline.nanoseconds / 1_000_000_000 - 5)
    }

    /// The fewest connections a pool of an event loop has: fewer loops get a pool of their own than starve on one.
    static let connectionsPerPool = 4

    /// Connects to the database: checks that it answers, with this user and password, before returning.
    ///
    /// - Throws: ``ServerSetupError`` with a one-line message naming what to fix: the server is not there, the
    ///   password or user is wrong, the database does not exist.
    public init(location: PostgresLocation, connections: Int = defaultConnections, logger: Logger)
        async throws(ServerSetupError)
    {
        self.location = location
        self.logger = logger
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database,
            tls: location.tls == .disable ? .disable : .require(TLSConfiguration.makeClientConfiguration()))
        // A pool of a fixed size, without the pool's keep-alive: postgres-nio arms an idle and a keep-alive timer
        // (a task group and a Dispatch timer each) every time a connection goes back to the pool, which cost
        // a third of a key read's CPU (perf). A connection that died silently meanwhile costs its next
        // statement the statement deadline (then the pool replaces it); one the server or a firewall closed
        // is noticed at once.
        configuration.options.keepAliveBehavior = nil
        configuration.options.connectTimeout = .seconds(5)
        // A statement waits for a lock at most `lock_timeout` (a writer behind another holding its row, below the statement
        // deadline, so it fails as busy rather than leaving a session waiting after its client gave up), and a
        // session whose client went away is noticed while it runs.
        configuration.options.additionalStartupParameters = [
            ("application_name", "baton-server"), ("lock_timeout", Self.lockTimeout),
            ("client_connection_check_interval", "5s"),
        ]
        let loops = Array(
            MultiThreadedEventLoopGroup.singleton.makeIterator().prefix(max(1, connections / Self.connectionsPerPool)))
        pools = loops.enumerated().map { index, loop in
            var configuration = configuration
            let share = connections / loops.count + (index < connections % loops.count ? 1 : 0)
            // Every connection of a pool is held by a task of its own for as long as it lives (``LoopPool``), so
            // postgres-nio's pool sees them leased for good: it arms no idle timer on each release (three tasks and
            // a Dispatch timer each, about 60 µs of a request's CPU), and its minimum stays 0 — with a minimum
            // above 0, postgres-nio 1.33.2 failed a precondition and stopped the process when the database came
            // back after an outage (`DatabaseOutageTests`, one run of two).
            configuration.options.minimumConnections = 0
            configuration.options.maximumConnections = share
            return LoopPool(
                loop: loop, share: share,
                client: PostgresClient(configuration: configuration, eventLoopGroup: loop, backgroundLogger: logger))
        }
        let pools = self.pools
        runner = Mutex(
            Task {
                await withDiscardingTaskGroup { group in
                    for pool in pools {
                        group.addTask { await pool.client.run() }
                        for _ in 0..<pool.share { group.addTask { await pool.hold() } }
                    }
                }
            })
        do {
            // The pool retries a refused connection until the request's deadline; one direct connection tells
            // at once what is wrong.
            let probe = try await PostgresConnection.connect(
                configuration: try Self.directConfiguration(location), id: 0, logger: logger)
            try? await probe.close()
        } catch {
            close()
            throw ServerSetupError(Self.connectionProblem(error, location: location))
        }
    }

    /// The configuration of a connection of its own (not one of the pools').
    static func directConfiguration(_ location: PostgresLocation) throws -> PostgresConnection.Configuration {
        .init(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database,
            tls: location.tls == .disable
                ? .disable
                : .require(try NIOSSLContext(configuration: TLSConfiguration.makeClientConfiguration())))
    }

    /// Listens on `channel` with a connection of its own until the task is cancelled: `onState(true)` once the
    /// `LISTEN` took effect, `onNotification` for each notification, `onState(false)` when the connection is lost —
    /// then it connects again after `retry`.
    func listen(
        _ channel: String, retry: Duration = .milliseconds(250), onState: @escaping @Sendable (Bool) -> Void,
        onNotification: @escaping @Sendable (String) -> Void
    ) async {
        while !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(
                    configuration: try Self.directConfiguration(location), id: 9_000, logger: logger)
                do {
                    try await connection.listen(on: channel) { notifications in
                        onState(true)
                        for try await notification in notifications { onNotification(notification.payload) }
                    }
                } catch {}
                onState(false)
                try? await connection.close()
            } catch {
                onState(false)
            }
            try? await Task.sleep(for: retry)
        }
    }

    public func read<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T {
        try await transaction("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", body)
    }

    @discardableResult
    public func write<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T
    {
        var attempt = 0
        while true {
            do {
                return try await transaction("BEGIN ISOLATION LEVEL SERIALIZABLE", prepared: true, inWrite: true, body)
            } catch let error as StorageError where error.kind == .conflict && attempt < 100 {
                attempt += 1
                retried.add(1, ordering: .relaxed)
                // Back off a random while, growing, so the transactions that collided do not collide again.
                try await Task.sleep(for: .microseconds(Int.random(in: 0...(200 << min(attempt, 8)))))
            }
        }
    }

    /// Runs a migration: one transaction at `READ COMMITTED`, so that after waiting for the migration lock its
    /// statements see what the instance that held the lock committed (at `SERIALIZABLE` the snapshot would date
    /// from before the wait, and the second instance would create the tables again).
    func migrate<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                // No statement deadline: the migration lock may be held by an instance migrating a large table.
                return try await transaction(
                    "BEGIN ISOLATION LEVEL READ COMMITTED", first: "SET LOCAL lock_timeout = 0", deadline: nil, body)
            } catch let error as StorageError where error.kind == .conflict && attempt < 20 {
                // A deadlock with another instance's start (its first writes while this one locks tables to
                // check their indexes): PostgreSQL ended this side; the migration runs again.
                attempt += 1
                try await Task.sleep(for: .milliseconds(Int.random(in: 10...(50 << min(attempt, 5)))))
            }
        }
    }

    /// Updates the planner's statistics of `tables` (quoted names) after a bulk load: until autovacuum gets to
    /// a freshly filled table, PostgreSQL plans its queries blind (a filtered page of 100,000 fresh rows sorted
    /// them all, 40 times slower).
    func analyze(_ tables: [String]) async throws {
        try await transaction("BEGIN", deadline: nil) { db in
            for table in tables { try await db.execute("ANALYZE \(table)") }
        }
    }

    /// Runs a long write (``DataCopy``): one `SERIALIZABLE` transaction, not retried, with no statement deadline.
    func bulkWrite<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T {
        try await transaction(
            "BEGIN ISOLATION LEVEL SERIALIZABLE", first: "SET LOCAL lock_timeout = 0", deadline: nil, body)
    }

    /// Runs a read of one statement (or a few, each atomic on its own) outside a transaction, on a leased
    /// connection; its statements are prepared (`PreparedStatements`) only when `prepared`.
    public func readStatement<T: Sendable>(
        prepared: Bool, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        try await transaction(nil, prepared: prepared, body)
    }

    /// A storage error for what an access threw.
    private func noted(_ error: any Error) -> any Error {
        let mapped: any Error =
            switch error {
            case let error as PSQLError: StorageError(postgres: error)
            case is CancellationError:
                StorageError(.unavailable, "The wait for a database connection was cancelled.")
            default: error
            }
        return mapped
    }

    public func close() {
        let task = runner.withLock { runner in
            defer { runner = nil }
            return runner
        }
        // Once: the holders give their connections back, and cancelling the clients' run closes them.
        guard let task else { return }
        for pool in pools { pool.close() }
        task.cancel()
    }

    /// Runs `body` on a leased connection, in a transaction begun by `begin` (none when `nil`) that first runs
    /// `first` when given (a lock, a setting); its statements prepared only when `prepared`.
    private func transaction<T: Sendable>(
        _ begin: String?, first: String? = nil,
        deadline: TimeAmount? = PostgresSQLConnection.statementDeadline, prepared: Bool = false, inWrite: Bool = false,
        _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        let logger = self.logger
        do {
            return try await leased { connection in
                let sql = PostgresSQLConnection(
                    connection: connection, logger: logger, deadline: deadline, prepared: prepared, inWrite: inWrite)
                guard let begin else { return try await body(sql) }
                try await sql.execute(begin, [])
                do {
                    if let first { try await sql.execute(first, []) }
                    let result = try await body(sql)
                    try await sql.execute("COMMIT", [])
                    return result
                } catch {
                    // A connection that closed or stopped answering rolls back on the server's side; asking
                    // it would only wait for the deadline again.
                    if (error as? StorageError)?.kind != .unavailable, !connection.isClosed {
                        _ = try? await sql.execute("ROLLBACK", [])
                    }
                    throw error
                }
            }
        } catch {
            throw noted(error)
        }
    }

    /// Runs `body` with a connection of the pool (handed over by one of its holders); when none comes within
    /// ``leaseDeadline`` (the database is away: the holders wait for postgres-nio to connect again, or every
    /// connection is busy), fails as `unavailable` instead of waiting, so that requests answer 503 soon and the
    /// balancer moves on. A lease that comes in time runs to its end.
    private func leased<T: Sendable>(
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        let pool = pool()
        guard !pool.isClosed else { throw Self.closedError }
        pool.leases.add(1, ordering: .relaxed)
        defer { pool.leases.subtract(1, ordering: .relaxed) }
        let waiter = Waiter<T>()
        // The deadline is a timer of the pool's event loop, not `Task.sleep` (on Linux a Dispatch timer).
        let timer = pool.loop.scheduleTask(in: Self.leaseDeadline) {
            waiter.finish(
                .failure(
                    StorageError(
                        .unavailable,
                        "No connection to PostgreSQL within \(Self.leaseDeadline.nanoseconds / 1_000_000_000) s: the database is away or busy."
                    )))
        }
        let job = LoopPool.Job(
            isTaken: { waiter.isTaken },
            run: { connection in
                guard waiter.take() else { return }
                timer.cancel()
                do {
                    waiter.deliver(.success(try await body(connection)))
                } catch {
                    waiter.deliver(.failure(error))
                }
            },
            fail: { error in
                timer.cancel()
                waiter.finish(.failure(error))
            })
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (answer: CheckedContinuation<T, any Error>) in
                waiter.wait(answer)
                pool.submit(job)
            }
        } onCancel: {
            // A caller that went away before a connection came stops waiting, and its body never runs.
            job.fail(CancellationError())
        }
    }

    /// What an access of a closed storage fails with.
    static let closedError = StorageError(.unavailable, "The database connections are closed.")

    /// The pool of the event loop the caller runs on while it has a free connection; elsewhere (a loop without a
    /// pool, a command, a test), or when that pool is busy, the pool with the most free connections.
    func pool() -> LoopPool {
        if let here = pools.first(where: { $0.loop.inEventLoop }), here.free > 0 { return here }
        return pools.max { $0.free < $1.free } ?? pools[0]
    }

    /// How long a request waits for a database connection.
    static let leaseDeadline = TimeAmount.seconds(5)

    /// A one-line explanation of a failed connection.
    static func connectionProblem(_ error: any Error, location: PostgresLocation) -> String {
        let redacted = location.description
        guard let error = error as? PSQLError else {
            return
                "Cannot reach PostgreSQL at \(location.host):\(location.port) (\(error)); is the server running, and is the --database URL \(redacted) right?"
        }
        switch error.serverInfo?[.sqlState] {
        case "28P01", "28000":
            return
                "PostgreSQL refused user '\(location.user)' at \(location.host):\(location.port): wrong password or user (the password goes in BATON_DATABASE_URL)."
        case "3D000":
            return
                "PostgreSQL at \(location.host):\(location.port) has no database '\(location.database)': create it (createdb \(location.database)) or fix the --database URL."
        case let state?:
            return
                "PostgreSQL at \(location.host):\(location.port) refused the connection (SQLSTATE \(state): \(error.serverInfo?[.message] ?? "no message"))."
        case nil:
            if error.code == .sslUnsupported {
                return
                    "PostgreSQL at \(location.host):\(location.port) does not offer TLS; enable it on the server, or use ?sslmode=disable on a private network."
            }
            return
                "Cannot reach PostgreSQL at \(location.host):\(location.port) (\(error.code)); is the server running, and is the --database URL \(redacted) right?"
        }
    }
}

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

    /// `arguments` bound as PostgreSQL reads them: integers as `int8`, reals as `float8`, text, bytes as `bytea`.
    static func bindings(_ arguments: [SQLValue]) -> PostgresBindings {
        var binds = PostgresBindings(capacity: arguments.count)
        for argument in arguments {
            switch argument {
            case .null: binds.appendNull()
            case .integer(let number): binds.append(number)
            case .real(let number): binds.append(number)
            case .text(let text): binds.append(text)
            case .blob(let bytes): binds.append(ByteBuffer(bytes: bytes))
            }
        }
        return binds
    }

    /// The value of a cell as Baton reads it: integers, reals, text and bytes; a boolean as 0 or 1; numerics,
    /// instants, dates and times as the canonical text ``BatonSQL/SQLDialect/decode(_:as:column:)`` reads (from
    /// PostgreSQL's binary forms, exactly: microseconds stay microseconds); anything else as its text.
    static func value(_ cell: PostgresCell) throws -> SQLValue {
        guard var bytes = cell.bytes else { return .null }
        switch cell.dataType {
        case .int2, .int4, .int8: return .integer(try cell.decode(Int64.self))
        case .float4, .float8: return .real(try cell.decode(Double.self))
        case .bool: return .integer(try cell.decode(Bool.self) ? 1 : 0)
        case .bytea: return .blob(Array(buffer: try cell.decode(ByteBuffer.self)))
        case .numeric:
            guard let text = numericText(&bytes) else { break }
            return .text(text)
        case .uuid: return .text(try cell.decode(UUID.self).uuidString.lowercased())
        case .timestamptz, .timestamp:
            // ±infinity (written by hand: Baton writes none) have no date; they are refused below, not crashed on.
            guard let micros = bytes.readInteger(as: Int64.self), micros != .min, micros != .max else { break }
            return .text(instantText(microsecondsSince2000: micros))
        case .date:
            guard let days = bytes.readInteger(as: Int32.self), days != .min, days != .max else { break }
            return .text(dateText(daysSince2000: Int64(days)))
        case .time:
            guard let micros = bytes.readInteger(as: Int64.self) else { break }
            return .text(timeText(microseconds: micros))
        default: return .text(try cell.decode(String.self))
        }
        throw StorageError(.other, "A \(cell.dataType) value in column '\(cell.columnName)' is damaged.")
    }

    /// The canonical text of a numeric in PostgreSQL's binary form, as `Decimal`'s description writes it: plain
    /// digits, no exponent, no trailing zeros after the point (which PostgreSQL keeps as the value's scale), `0`
    /// for zero; `nil` for NaN, an infinity or damaged bytes. Read straight from the base-10,000 digit groups:
    /// through `Decimal`, a page of 50 spent a third of its CPU on decimals (perf).
    static func numericText(_ bytes: inout ByteBuffer) -> String? {
        guard let count = bytes.readInteger(as: Int16.self), count >= 0,
            let weight = bytes.readInteger(as: Int16.self).map(Int.init), let sign = bytes.readInteger(as: UInt16.self),
            sign == 0 || sign == 0x4000, bytes.readInteger(as: Int16.self) != nil
        else { return nil }
        var groups: [Int] = []
        groups.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let group = bytes.readInteger(as: Int16.self), (0..<10_000).contains(group) else { return nil }
            groups.append(Int(group))
        }
        // Group i is worth 10,000^(weight - i).
        func group(atPower power: Int) -> Int {
            let index = weight - power
            return groups.indices.contains(index) ? groups[index] : 0
        }
        var text: [UInt8] = []
        text.reserveCapacity(groups.count * 4 + max(0, weight) * 4 + 8)
        if sign == 0x4000 { text.append(UInt8(ascii: "-")) }
        if weight < 0 {
            text.append(UInt8(ascii: "0"))
        } else {
            appendDigits(Int64(group(atPower: weight)), width: 1, to: &text)
            for power in stride(from: weight - 1, through: 0, by: -1) {
                appendDigits(Int64(group(atPower: power)), width: 4, to: &text)
            }
        }
        let lowest = weight - groups.count + 1
        if lowest < 0 {
            text.append(UInt8(ascii: "."))
            for power in stride(from: -1, through: lowest, by: -1) {
                appendDigits(Int64(group(atPower: power)), width: 4, to: &text)
            }
            while text.last == UInt8(ascii: "0") { text.removeLast() }
            if text.last == UInt8(ascii: ".") { text.removeLast() }
        }
        if text == [UInt8(ascii: "-"), UInt8(ascii: "0")] { return "0" }
        return String(decoding: text, as: UTF8.self)
    }

    /// `YYYY-MM-DD` of a day count from 2000-01-01 (PostgreSQL's epoch), proleptic Gregorian.
    static func dateText(daysSince2000 days: Int64) -> String {
        var text: [UInt8] = []
        appendDate(daysSince2000: days, to: &text)
        return String(decoding: text, as: UTF8.self)
    }

    /// `HH:MM:SS.ffffff` of microseconds since midnight.
    static func timeText(microseconds: Int64) -> String {
        var text: [UInt8] = []
        appendTime(microseconds: microseconds, to: &text)
        return String(decoding: text, as: UTF8.self)
    }

    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ` of microseconds since 2000-01-01T00:00:00Z.
    static func instantText(microsecondsSince2000 micros: Int64) -> String {
        let perDay: Int64 = 86_400_000_000
        let days = micros >= 0 ? micros / perDay : (micros - perDay + 1) / perDay
        var text: [UInt8] = []
        text.reserveCapacity(27)
        appendDate(daysSince2000: days, to: &text)
        text.append(UInt8(ascii: "T"))
        appendTime(microseconds: micros - days * perDay, to: &text)
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    private static func appendDate(daysSince2000 days: Int64, to text: inout [UInt8]) {
        // Days from 1970-01-01, then the civil date (Howard Hinnant's days_from_civil, inverted).
        let z = days + 10_957 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shifted = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shifted + 2) / 5 + 1
        let month = shifted < 10 ? shifted + 3 : shifted - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        appendDigits(year, width: 4, to: &text)
        text.append(UInt8(ascii: "-"))
        appendDigits(month, width: 2, to: &text)
        text.append(UInt8(ascii: "-"))
        appendDigits(day, width: 2, to: &text)
    }

    private static func appendTime(microseconds: Int64, to text: inout [UInt8]) {
        let seconds = microseconds / 1_000_000
        appendDigits(seconds / 3_600, width: 2, to: &text)
        text.append(UInt8(ascii: ":"))
        appendDigits(seconds / 60 % 60, width: 2, to: &text)
        text.append(UInt8(ascii: ":"))
        appendDigits(seconds % 60, width: 2, to: &text)
        text.append(UInt8(ascii: "."))
        appendDigits(microseconds % 1_000_000, width: 6, to: &text)
    }

    /// The decimal digits of `number`, zero-padded to `width`, a minus sign first when negative.
    static func appendDigits(_ number: Int64, width: Int, to text: inout [UInt8]) {
        if number < 0 { text.append(UInt8(ascii: "-")) }
        let magnitude = number.magnitude
        var divisor: UInt64 = 1
        var count = 1
        while divisor <= magnitude / 10 {
            divisor *= 10
            count += 1
        }
        for _ in count..<max(count, width) { text.append(UInt8(ascii: "0")) }
        while divisor > 0 {
            text.append(UInt8(ascii: "0") + UInt8(magnitude / divisor % 10))
            divisor /= 10
        }
    }

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

extension StorageError {
    /// The kind of a PostgreSQL error, by SQLSTATE; without one (the connection failed), unavailable.
    init(postgres error: PSQLError) {
        guard let state = error.serverInfo?[.sqlState] else {
            self.init(.unavailable, "PostgreSQL cannot be reached (\(error.code)).")
            return
        }
        let kind: Kind =
            switch state {
            case "23505": .uniqueViolation
            case "23502", "23514": .constraintViolation
            case "40001", "40P01": .conflict
            case _ where state.hasPrefix("22"): .dataException(sqlState: state)
            // 55P03: a lock not granted within `lock_timeout` (another writer held a row too long).
            case _ where state.hasPrefix("08") || state.hasPrefix("57P") || state == "53300" || state == "55P03":
                .unavailable
            default: .other
            }
        // A data exception's message quotes the value it refused (user data): only its SQLSTATE is kept.
        let message = state.hasPrefix("22") ? "a value was refused" : error.serverInfo?[.message] ?? "no message"
        self.init(kind, "PostgreSQL error \(state): \(message)")
    }
}

/// Whichever of two racing completions comes first.
final class Claim: Sendable {
    private let taken = Mutex(false)

    /// Whether a caller claimed it.
    var isTaken: Bool { taken.withLock { $0 } }

    /// `true` once: for the first caller.
    func claim() -> Bool {
        taken.withLock { taken in
            defer { taken = true }
            return !taken
        }
    }
}

/// A request waiting for a connection of a ``LoopPool``: answered once, by whichever comes first — a holder that
/// runs its access, its deadline, its cancellation, or the pool closing — even when that comes before the request
/// began to wait.
final class Waiter<T: Sendable>: Sendable {
    private let claim = Claim()
    private let state = Mutex<(waiting: CheckedContinuation<T, any Error>?, early: Result<T, any Error>?)>((nil, nil))

    /// Whether the outcome is decided.
    var isTaken: Bool { claim.isTaken }

    /// Decides the outcome: `true` for the first caller only.
    func take() -> Bool { claim.claim() }

    /// Answers the request, after ``take()``.
    func deliver(_ result: Result<T, any Error>) {
        let waiting = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard let waiting = state.waiting else {
                state.early = result
                return nil
            }
            state.waiting = nil
            return waiting
        }
        waiting?.resume(with: result)
    }

    /// Takes the outcome and answers with `result`, unless another did first.
    func finish(_ result: Result<T, any Error>) {
        guard take() else { return }
        deliver(result)
    }

    /// Waits with `continuation` (answered at once when the outcome came first).
    func wait(_ continuation: CheckedContinuation<T, any Error>) {
        let early = state.withLock { state -> Result<T, any Error>? in
            if let early = state.early { return early }
            state.waiting = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }
}

/// A postgres-nio pool whose connections live on one event loop, with its share of the connections, how many
/// leases it has (held or waited for), and the tasks that hold its connections.
///
/// Each of `share` holder tasks (``hold()``) leases a connection from postgres-nio and keeps it, running the jobs
/// requests hand it (``submit(_:)``) one after another, until the connection closes; then it leases another. So
/// postgres-nio's pool never sees a connection go idle between requests (it would arm an idle timer each time),
/// and it makes connections only when one is missing.
final class LoopPool: Sendable {
    let loop: any EventLoop
    let share: Int
    let client: PostgresClient
    let leases = Atomic<Int>(0)
    private let queue = Mutex(Queue())

    init(loop: any EventLoop, share: Int, client: PostgresClient) {
        (self.loop, self.share, self.client) = (loop, share, client)
    }

    /// Connections not leased (negative while leases wait).
    var free: Int { share - leases.load(ordering: .relaxed) }

    /// Whether ``close()`` ended the holders.
    var isClosed: Bool { queue.withLock { $0.closed } }

    /// A request's use of a connection: run by the first holder free, unless its deadline, its cancellation or the
    /// pool closing took it first (then `isTaken`, and a holder skips it).
    struct Job: Sendable {
        let isTaken: @Sendable () -> Bool
        let run: @Sendable (PostgresConnection) async -> Void
        let fail: @Sendable (any Error) -> Void
    }

    /// The jobs waiting, first at `head` (taken from the front without moving the rest), and the holders waiting.
    private struct Queue: ~Copyable {
        var jobs: [Job] = []
        var head = 0
        var idle: [CheckedContinuation<Job?, Never>] = []
        var closed = false
        /// How many jobs may wait before the taken ones among them are dropped: doubled each time, so a long
        /// backlog (the database away) is filtered a logarithmic number of times, not on every request.
        var pruneAt = 256

        var isEmpty: Bool { head == jobs.count }

        mutating func popFirst() -> Job? {
            while head < jobs.count {
                let job = jobs[head]
                head += 1
                if head == jobs.count {
                    jobs.removeAll(keepingCapacity: true)
                    head = 0
                }
                if !job.isTaken() { return job }
            }
            return nil
        }

        mutating func append(_ job: Job, first: Bool) {
            if first, head > 0 {
                head -= 1
                jobs[head] = job
            } else if first {
                jobs.insert(job, at: 0)
            } else {
                // Jobs whose deadline passed while no holder came (the database away) go when they are many.
                if jobs.count - head >= pruneAt {
                    jobs = jobs[head...].filter { !$0.isTaken() }
                    head = 0
                    pruneAt = max(256, 2 * jobs.count)
                } else if head >= 1_024, head > jobs.count / 2 {
                    // Jobs handed out stay before `head` until the queue empties; under a steady backlog it never
                    // does, so they go once they are most of the array.
                    jobs.removeFirst(head)
                    head = 0
                }
                jobs.append(job)
            }
        }
    }

    /// How many jobs wait (their deadline may have passed).
    var queued: Int { queue.withLock { $0.jobs.count - $0.head } }

    /// Hands `job` to a holder waiting for work, or queues it for the next (`first`: before the others); fails it
    /// at once when the pool is closed.
    func submit(_ job: Job, first: Bool = false) {
        let (holder, closed) = queue.withLock { queue -> (CheckedContinuation<Job?, Never>?, Bool) in
            guard !queue.closed else { return (nil, true) }
            if let holder = queue.idle.popLast() { return (holder, false) }
            queue.append(job, first: first)
            return (nil, false)
        }
        if closed { job.fail(PostgresStorage.closedError) }
        holder?.resume(returning: job)
    }

    /// The next job, once there is one; `nil` once the pool is closed.
    private func next() async -> Job? {
        await withCheckedContinuation { (holder: CheckedContinuation<Job?, Never>) in
            let job = queue.withLock { queue -> Job?? in
                if let job = queue.popFirst() { return .some(job) }
                if queue.closed { return .some(nil) }
                queue.idle.append(holder)
                return nil
            }
            if let job { holder.resume(returning: job) }
        }
    }

    /// Holds a connection at a time and runs jobs on it until the pool closes.
    func hold() async {
        while !queue.withLock({ $0.closed }) {
            do {
                try await client.withConnection { connection in
                    while let job = await self.next() {
                        // A connection that closed while it waited (the database went away) takes no job: the job
                        // goes to the next holder, this one leases a new connection.
                        guard !connection.isClosed else { return self.submit(job, first: true) }
                        await job.run(connection)
                        if connection.isClosed { return }
                    }
                }
            } catch {
                // No connection (the database is away: postgres-nio keeps trying; or the pool shut down): the jobs
                // waiting meanwhile fail at their deadline.
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// Ends the holders — those waiting for work get none, the others stop after their job — and fails the jobs
    /// still waiting.
    func close() {
        let (holders, jobs) = queue.withLock { queue in
            queue.closed = true
            defer { (queue.idle, queue.jobs, queue.head) = ([], [], 0) }
            return (queue.idle, Array(queue.jobs[queue.head...]))
        }
        for holder in holders { holder.resume(returning: nil) }
        for job in jobs { job.fail(PostgresStorage.closedError) }
    }
}
