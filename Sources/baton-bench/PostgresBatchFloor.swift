import BatonServer
import Foundation
import Logging
import PostgresNIO

/// What the database and postgres-nio alone spend on a change of the 100-change batch on PostgreSQL, in CPU
/// microseconds of this process and of PostgreSQL's: a plain postgres-nio `PostgresClient` on the server's own
/// database (its writers idle by now), 100 transactions of the batch's 100 checks, each `SERIALIZABLE` as the
/// server's are, reading the checks in one statement (as the server reads a batch ahead), updating the columns a
/// PATCH of `Remarks` changes (the value, the three the server keeps, the sequence; the table's trigger stamps the
/// transaction id) and inserting the changes' audit entries in one statement (as the server writes them, in the
/// change's transaction when the log shares the data's database). Nothing of HTTP, JSON, OData or tokens.
///
/// Two shapes: one `UPDATE` a change, each a round trip (the server's shape: every change its own statement, with
/// its own precondition and answer), and all the batch's updates in one `UPDATE … FROM (VALUES …)`. postgres-nio
/// sends a connection's next statement only when the last has been answered, so the first shape's statements cost
/// one round trip each however they are issued; the second shows what merging a batch's changes would leave.
struct PostgresBatchFloor {
    let location: PostgresLocation
    let ids: [String]
    let rounds = 100

    /// CPU microseconds a change: this process's, and PostgreSQL's.
    struct Cost {
        var client: Double
        var postgres: Double
    }

    func run() async throws -> (perChange: Cost, merged: Cost) {
        var logger = Logger(label: "bench")
        logger.logLevel = .error
        var configuration = PostgresClient.Configuration(
            host: location.host, port: location.port, username: location.user, password: location.password,
            database: location.database, tls: .disable)
        configuration.options.maximumConnections = 1
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        let keys = ids.compactMap(UUID.init(uuidString:))
        guard keys.count == ids.count, !keys.isEmpty else { throw BenchmarkFailure("the batch's checks have no keys") }
        return try await withThrowingTaskGroup(of: (Cost, Cost)?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            var sequence: Int64 = 1 << 41
            // One round of each first: the statements prepared, the connection open, the rows in memory.
            _ = try await measure(client, keys: keys, merged: false, rounds: 1, sequence: &sequence, logger: logger)
            _ = try await measure(client, keys: keys, merged: true, rounds: 1, sequence: &sequence, logger: logger)
            let perChange = try await measure(
                client, keys: keys, merged: false, rounds: rounds, sequence: &sequence, logger: logger)
            let merged = try await measure(
                client, keys: keys, merged: true, rounds: rounds, sequence: &sequence, logger: logger)
            group.cancelAll()
            return (perChange, merged)
        }
    }

    func measure(
        _ client: PostgresClient, keys: [UUID], merged: Bool, rounds: Int, sequence: inout Int64, logger: Logger
    ) async throws -> Cost {
        let before = CPUTime.now()
        let postgresBefore = ProcessCPU.postgres()
        for _ in 0..<rounds {
            let first = sequence + 1
            sequence += Int64(keys.count)
            try await client.withConnection { connection in
                try await connection.query("BEGIN ISOLATION LEVEL SERIALIZABLE", logger: logger)
                do {
                    var read = 0
                    for try await _ in try await connection.execute(FloorBatchRead(ids: keys), logger: logger) {
                        read += 1
                    }
                    guard read == keys.count else { throw BenchmarkFailure("the floor read \(read) checks") }
                    let at = Date()
                    // postgres-nio answers a prepared statement with its rows, none here (it cannot give the count
                    // of one that returns none): the changes are counted once the rounds are done.
                    if merged {
                        for try await _ in try await connection.execute(
                            FloorMergedUpdate(ids: keys, first: first, at: at), logger: logger)
                        {}
                    } else {
                        for (offset, id) in keys.enumerated() {
                            for try await _ in try await connection.execute(
                                FloorUpdate(id: id, sequence: first + Int64(offset), at: at), logger: logger)
                            {}
                        }
                    }
                    for try await _ in try await connection.execute(
                        FloorAuditInsert(ids: keys, first: first, at: at.timeIntervalSince1970), logger: logger)
                    {}
                    try await connection.query("COMMIT", logger: logger)
                } catch {
                    _ = try? await connection.query("ROLLBACK", logger: logger)
                    throw error
                }
            }
        }
        let cost = CPUTime.now() - before
        let postgres = ProcessCPU.postgres() - postgresBefore
        // Every check carries the last round's sequence number, and each of its changes has its audit entry.
        let last = sequence - Int64(keys.count)
        let changed = try await client.query(
            #"SELECT count(*) FROM "PreflightChecks" WHERE "ID" = ANY(\#(keys)) AND "$seq" > \#(last)"#,
            logger: logger
        ).collect().first?.decode(Int.self)
        let logged = try await client.query(
            "SELECT count(*) FROM audit WHERE outboxKey = ANY(\(keys.indices.map { "floor:\(last + 1 + Int64($0))" }))",
            logger: logger
        ).collect().first?.decode(Int.self)
        guard changed == keys.count, logged == keys.count else {
            throw BenchmarkFailure("the floor's last round changed \(changed ?? 0) checks and logged \(logged ?? 0)")
        }
        let changes = Double(rounds * keys.count)
        return Cost(
            client: cost.server / changes * 1e6, postgres: postgres / changes * 1e6)
    }
}

/// The batch's checks, read ahead in one statement.
struct FloorBatchRead: PostgresPreparedStatement {
    static let sql = #"SELECT \#(FloorRoutes.columns) FROM "PreflightChecks" WHERE "ID" = ANY($1)"#
    typealias Row = PostgresRow
    let ids: [UUID]

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(ids)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

/// One change of the batch: the columns a PATCH of `Remarks` changes.
struct FloorUpdate: PostgresPreparedStatement {
    static let sql =
        #"UPDATE "PreflightChecks" SET "Remarks" = $1, "ChangedAt" = $2, "CheckedBy" = $3, "UploadedBy" = $4, "$seq" = $5 WHERE "ID" = $6"#
    typealias Row = PostgresRow
    let id: UUID
    let sequence: Int64
    let at: Date

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 6)
        bindings.append("floor")
        bindings.append(at)
        bindings.append("bench")
        bindings.append("bench")
        bindings.append(sequence)
        bindings.append(id)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

/// All the batch's changes in one statement: each key with its sequence number.
struct FloorMergedUpdate: PostgresPreparedStatement {
    static let sql = #"""
        UPDATE "PreflightChecks" AS t SET "Remarks" = $1, "ChangedAt" = $2, "CheckedBy" = $3, "UploadedBy" = $4, "$seq" = v.seq
        FROM unnest($5::uuid[], $6::bigint[]) AS v(id, seq) WHERE t."ID" = v.id
        """#
    typealias Row = PostgresRow
    let ids: [UUID]
    let first: Int64
    let at: Date

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 6)
        bindings.append("floor")
        bindings.append(at)
        bindings.append("bench")
        bindings.append("bench")
        bindings.append(ids)
        bindings.append(ids.indices.map { first + Int64($0) })
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

/// The changes' audit entries, one statement for the batch, as the server inserts them (with an outbox key each).
struct FloorAuditInsert: PostgresPreparedStatement {
    static let sql = #"""
        INSERT INTO audit (at, actor, action, subject, address, detail, outboxKey)
        SELECT $1, 'bench', 'entity-updated', 'PreflightChecks(' || id || ')', '127.0.0.1', 'uploaded by bench',
            'floor:' || seq FROM unnest($2::uuid[], $3::bigint[]) AS v(id, seq) ON CONFLICT DO NOTHING
        """#
    typealias Row = PostgresRow
    let ids: [UUID]
    let first: Int64
    let at: Double

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(at)
        bindings.append(ids)
        bindings.append(ids.indices.map { first + Int64($0) })
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}
