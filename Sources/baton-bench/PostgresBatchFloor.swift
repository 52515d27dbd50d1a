import BatonServer
import Foundation
import Logging
import PostgresNIO

/// What the database and postgres-nio alone spend on a change of the 100-change batch on PostgreSQL, in CPU
/// microseconds of this process and of PostgreSQL's (every `postgres` process alive at the start and the end, so a
/// worker that starts or ends between them makes that figure rough): a plain postgres-nio `PostgresClient` on the
/// server's own database, once the server's writes have settled, 100 transactions of the batch's 100 checks, each
/// `REPEATABLE READ` as the server's are (changes of entities by key), reading the checks in one statement (as the
/// server does at that isolation), updating the columns a PATCH of `Remarks` changes (the value, the three the
/// server keeps, the sequence; the table's trigger stamps the transaction id) and inserting the changes' audit
/// entries in one statement (as the server writes them there: in the change's transaction, with no outbox key).
/// Nothing of HTTP, JSON, OData or tokens.
///
/// Two shapes: one `UPDATE` a change, each a round trip (the server's shape: every change its own statement, with
/// its own precondition and answer), and all the batch's updates in one `UPDATE … FROM unnest(…)`. postgres-nio
/// sends a connection's next statement only when the last has been answered, so the first shape's statements cost
/// one round trip each however they are issued; the second shows what merging a batch's changes would leave.
struct PostgresBatchFloor {
    let location: PostgresLocation
    let ids: [String]
    let rounds = 100
    /// Written into each change's `Remarks` and audit detail, so the checks after the rounds count this run's alone.
    let marker = "floor " + UUID().uuidString

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
            try await settle(client, logger: logger)
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
        var conflicts = 0
        for _ in 0..<rounds {
            let first = sequence + 1
            sequence += Int64(keys.count)
            // Alone on the database no transaction should conflict; if one does (a write of the server's still
            // running), it runs again, as the server's would, and is reported.
            while true {
                do {
                    try await round(client, keys: keys, merged: merged, first: first, logger: logger)
                    break
                } catch let error as PSQLError where error.serverInfo?[.sqlState] == "40001" && conflicts < 100 {
                    conflicts += 1
                }
            }
        }
        let cost = CPUTime.now() - before
        let postgres = ProcessCPU.postgres() - postgresBefore
        if conflicts > 0 { print("  (the floor's transactions ran again \(conflicts) times after a conflict)") }
        // Every check carries this run's marker and the last round's sequence number, and each of the last round's
        // changes has its audit entry.
        let last = sequence - Int64(keys.count)
        let changed = try await client.query(
            #"SELECT count(*) FROM "PreflightChecks" WHERE "ID" = ANY(\#(keys)) AND "Remarks" = \#(marker) AND "$seq" > \#(last)"#,
            logger: logger
        ).collect().first?.decode(Int.self)
        let details = keys.indices.map { "\(marker) \(last + 1 + Int64($0))" }
        let logged = try await client.query(
            "SELECT count(*) FROM audit WHERE detail = ANY(\(details)) AND outboxKey IS NULL", logger: logger
        ).collect().first?.decode(Int.self)
        guard changed == keys.count, logged == keys.count else {
            throw BenchmarkFailure("the floor's last round changed \(changed ?? 0) checks and logged \(logged ?? 0)")
        }
        let changes = Double(rounds * keys.count)
        return Cost(client: cost.server / changes * 1e6, postgres: postgres / changes * 1e6)
    }

    /// One transaction: the checks read, changed (each by itself, or `merged`), their entries logged.
    func round(_ client: PostgresClient, keys: [UUID], merged: Bool, first: Int64, logger: Logger) async throws {
        try await client.withConnection { connection in
            try await connection.query("BEGIN ISOLATION LEVEL REPEATABLE READ", logger: logger)
            do {
                var read = 0
                for try await _ in try await connection.execute(FloorBatchRead(ids: keys), logger: logger) {
                    read += 1
                }
                guard read == keys.count else { throw BenchmarkFailure("the floor read \(read) checks") }
                let at = Date()
                // postgres-nio answers a prepared statement with its rows, none here (it cannot give the count of
                // one that returns none): the changes are counted once the rounds are done.
                if merged {
                    for try await _ in try await connection.execute(
                        FloorMergedUpdate(ids: keys, first: first, at: at, remarks: marker), logger: logger)
                    {}
                } else {
                    for (offset, id) in keys.enumerated() {
                        for try await _ in try await connection.execute(
                            FloorUpdate(id: id, sequence: first + Int64(offset), at: at, remarks: marker),
                            logger: logger)
                        {}
                    }
                }
                for try await _ in try await connection.execute(
                    FloorAuditInsert(ids: keys, first: first, at: at.timeIntervalSince1970, marker: marker),
                    logger: logger)
                {}
                try await connection.query("COMMIT", logger: logger)
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw error
            }
        }
    }

    /// Waits, up to 30 seconds, until no other session of the database is running a statement: the batch row's
    /// last batches, still running again after conflicts when wrk stopped, would otherwise be counted here. Says so
    /// when they have not settled by then (the floor is measured anyway, and its conflicts are reported).
    func settle(_ client: PostgresClient, logger: Logger) async throws {
        for _ in 0..<300 {
            let busy = try await client.query(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state <> 'idle' AND pid <> pg_backend_pid()",
                logger: logger
            ).collect().first?.decode(Int.self)
            if busy == 0 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        print("  (other sessions were still busy on the database after 30 s: the floor below shares it with them)")
    }
}

/// The batch's checks, read in one statement.
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
    let remarks: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 6)
        bindings.appendChange(remarks: remarks, at: at)
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
    let remarks: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 6)
        bindings.appendChange(remarks: remarks, at: at)
        bindings.append(ids)
        bindings.append(ids.indices.map { first + Int64($0) })
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

extension PostgresBindings {
    /// What a PATCH of `Remarks` sets besides the sequence (`$1` to `$4`): the text, when, who checked, who uploaded.
    mutating func appendChange(remarks: String, at: Date) {
        append(remarks)
        append(at)
        append("bench")
        append("bench")
    }
}

/// The changes' audit entries, one statement for the batch, as the server inserts them on PostgreSQL (no outbox key:
/// the log is in the change's database); each detail names the run and the change.
struct FloorAuditInsert: PostgresPreparedStatement {
    static let sql = #"""
        INSERT INTO audit (at, actor, action, subject, address, detail)
        SELECT $1, 'bench', 'entity-updated', 'PreflightChecks(' || id || ')', '127.0.0.1', $4 || ' ' || seq
        FROM unnest($2::uuid[], $3::bigint[]) AS v(id, seq)
        """#
    typealias Row = PostgresRow
    let ids: [UUID]
    let first: Int64
    let at: Double
    let marker: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 4)
        bindings.append(at)
        bindings.append(ids)
        bindings.append(ids.indices.map { first + Int64($0) })
        bindings.append(marker)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}
