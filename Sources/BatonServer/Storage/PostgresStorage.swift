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
/// statement: a thread hop and a wake-up per statement). Reads run at `REPEATABLE READ` (one snapshot), writes at
/// `SERIALIZABLE` or, when the write asks for ``WriteIsolation/rowChecked``, `REPEATABLE READ`; a write is run
/// again when PostgreSQL refuses it for a conflict with another transaction (SQLSTATE 40001) or breaks a deadlock
/// (40P01).
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
    public var conflictsRetried: Int { retried.load(ordering: .relaxed) }

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

    /// ``WriteIsolation/serializable`` runs at `SERIALIZABLE`, ``WriteIsolation/rowChecked`` at `REPEATABLE READ`;
    /// either is run again when PostgreSQL refuses it for a conflict (at `REPEATABLE READ`: a row it changes was
    /// changed since its snapshot).
    @discardableResult
    public func write<T: Sendable>(
        isolation: WriteIsolation, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        let begin =
            switch isolation {
            case .serializable: "BEGIN ISOLATION LEVEL SERIALIZABLE"
            case .rowChecked: "BEGIN ISOLATION LEVEL REPEATABLE READ"
            }
        var attempt = 0
        while true {
            do {
                return try await transaction(begin, prepared: true, inWrite: true, body)
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
