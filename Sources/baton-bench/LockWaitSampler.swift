import BatonServer
import Foundation

/// Samples `pg_stat_activity` every 10 ms from a `psql` session of its own while a measurement runs: of the samples
/// that found one of the servers' connections in a transaction (running a statement, or between two), the share
/// that found it waiting for a lock — a writer waiting for another writer's row, on this instance or another.
struct LockWaitSampler {
    let process: Process
    let output: Pipe

    /// Starts sampling for about `seconds`.
    static func start(database: PostgresLocation, seconds: Int) throws -> LockWaitSampler {
        let psql = ["/usr/bin/psql", "/usr/local/bin/psql"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let psql else {
            throw BenchmarkFailure("psql is needed to sample lock waits: apt-get install postgresql-client")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: psql)
        process.arguments = [
            "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", database.host, "-p", String(database.port), "-U",
            database.user, "-d", database.database, "-c", script(samples: max(1, seconds * 100)),
        ]
        // The password, if any, only through the environment (never on the command line).
        var environment = ProcessInfo.processInfo.environment
        if let password = database.password { environment["PGPASSWORD"] = password }
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        return LockWaitSampler(process: process, output: output)
    }

    /// Waits for the sampling to end: the share of in-transaction samples that waited for a lock (0 when none).
    func finish() throws -> (share: Double, inTransaction: Int) {
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let numbers = text.split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap { Int($0) }
        guard process.terminationStatus == 0, numbers.count == 2 else {
            throw BenchmarkFailure("The lock-wait sampler failed: \(text)")
        }
        return (numbers[0] > 0 ? Double(numbers[1]) / Double(numbers[0]) : 0, numbers[0])
    }

    /// A function in the session's temporary schema (nothing stays in the database) that samples and sums.
    static func script(samples: Int) -> String {
        """
        CREATE FUNCTION pg_temp.baton_waits(samples int) RETURNS text LANGUAGE plpgsql AS $$
        DECLARE busy bigint := 0; waiting bigint := 0; b bigint; w bigint;
        BEGIN
          FOR i IN 1..samples LOOP
            PERFORM pg_stat_clear_snapshot();
            SELECT count(*) FILTER (WHERE state IN ('active', 'idle in transaction')),
                   count(*) FILTER (WHERE wait_event_type = 'Lock')
              INTO b, w
              FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = 'baton-server';
            busy := busy + b;
            waiting := waiting + w;
            PERFORM pg_sleep(0.01);
          END LOOP;
          RETURN busy || ' ' || waiting;
        END $$;
        SELECT pg_temp.baton_waits(\(samples));
        """
    }
}
