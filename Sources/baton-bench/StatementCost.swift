import BatonServer
import Foundation
import Logging
import PostgresNIO

/// What one PostgreSQL statement — a key read's `SELECT` of one check, prepared — costs this process's CPU, through
/// ``PostgresStorage`` (the server's path: a holder task per connection, its prepared-statement slots) and through a
/// plain postgres-nio `PostgresClient` running the same statement as a `PostgresPreparedStatement` on the same
/// database, 16 at a time as wrk's connections send them. The plain client's cost is what postgres-nio itself needs
/// on this machine for the statement.
struct StatementCost {
    let location: PostgresLocation
    let statements = 20_000
    let concurrency = 16

    func run() async throws {
        var logger = Logger(label: "bench")
        logger.logLevel = .error
        let sql = #"SELECT \#(FloorRoutes.columns) FROM "PreflightChecks" WHERE "ID" = CAST(? AS uuid)"#
        let storage = try await PostgresStorage(location: location, logger: logger)
        defer { storage.close() }
        let ids = try await storage.readStatement {
            try await $0.fetchAll(#"SELECT "ID" FROM "PreflightChecks" LIMIT 1000"#).compactMap { $0[0].text }
        }
        guard !ids.isEmpty else { throw BenchmarkFailure("no seeded checks") }
        let ours = try await measure { index in
            let id = ids[index % ids.count]
            let rows = try await storage.readStatement(prepared: true) { try await $0.fetchAll(sql, [.text(id)]) }
            guard rows.count == 1 else { throw BenchmarkFailure("the key read found \(rows.count) rows") }
        }
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable)
        configuration.options.maximumConnections = concurrency
        configuration.options.minimumConnections = concurrency
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let plain = try await withThrowingTaskGroup(of: Double.self) { group in
            group.addTask {
                await client.run()
                return 0
            }
            let cost = try await measure { index in
                let id = UUID(uuidString: ids[index % ids.count]) ?? UUID()
                var count = 0
                for try await _ in try await client.execute(FloorKeyRead(id: id)) { count += 1 }
                guard count == 1 else { throw BenchmarkFailure("the plain key read found \(count) rows") }
            }
            group.cancelAll()
            return cost
        }
        print(
            "\nOne PostgreSQL statement (a key read's SELECT), \(statements) of them, \(concurrency) at a time, CPU of this process:"
        )
        print(
            "  through PostgresStorage".padding(toLength: 36, withPad: " ", startingAt: 0)
                + String(format: "%6.1f µs  target ≤ 40 µs: %@", ours, ours <= 40 ? "met" : "NOT MET"))
        print(
            "  plain postgres-nio, prepared".padding(toLength: 36, withPad: " ", startingAt: 0)
                + String(format: "%6.1f µs  (postgres-nio's own cost for the statement)", plain))
    }

    /// The CPU microseconds per statement of `statements` runs of `body`, `concurrency` at a time, after a warm-up.
    func measure(_ body: @escaping @Sendable (Int) async throws -> Void) async throws -> Double {
        func batch(_ count: Int) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for worker in 0..<concurrency {
                    group.addTask {
                        for index in stride(from: worker, to: count, by: concurrency) { try await body(index) }
                    }
                }
                try await group.waitForAll()
            }
        }
        try await batch(2_000)
        let before = CPUTime.now()
        try await batch(statements)
        return (CPUTime.now() - before).server / Double(statements) * 1e6
    }
}
