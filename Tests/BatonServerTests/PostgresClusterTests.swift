import BatonTestSupport
import BatonTesting
import Foundation
import Testing

/// The throw-away PostgreSQL cluster the PostgreSQL tests build on: it starts as `initdb` and `pg_ctl` make it,
/// answers SQL, refuses a wrong password over TCP, and leaves nothing behind.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct PostgresClusterTests {
    @Test func aClusterStartsAnswersAndIsGoneAfterStop() async throws {
        try #require(PostgresCluster.missing == nil, "\(PostgresCluster.missing ?? "")")
        let cluster = try await offThePool { try PostgresCluster() }
        // Stopping twice is harmless: this only matters when a step below throws.
        defer { cluster.stop() }
        let version = try await offThePool { try cluster.psql("SHOW server_version_num") }
        #expect(Int(version.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0 >= 150_000)
        _ = try await offThePool { try cluster.psql("CREATE DATABASE baton") }
        #expect(try await offThePool { try cluster.psql("SELECT current_database()", database: "baton") } == "baton\n")
        // Over TCP a password is needed: SCRAM, so the wrong one is refused.
        let psql = try #require(PostgresCluster.binDirectory?.appendingPathComponent("psql"))
        let refused = try await Program.run(
            psql, ["-h", "127.0.0.1", "-p", String(cluster.port), "-U", "baton", "-c", "SELECT 1"],
            environment: ["PGPASSWORD": "not-the-password", "PGCONNECT_TIMEOUT": "10"])
        let wrong = refused.output + refused.error
        #expect(wrong.contains("password authentication failed"), "\(wrong)")
        let directory = cluster.directory
        cluster.stop()
        #expect(!FileManager.default.fileExists(atPath: directory.path))
        // Nothing listens on its port any more.
        let stillThere = try await offThePool { () -> Bool in
            guard let socket = try? SecurityTests.connect(port: cluster.port) else { return false }
            close(socket)
            return true
        }
        #expect(!stillThere)

        // A stale `postmaster.pid` (another data directory's, or a pid since reused) signals nobody.
        let bystander = Process()
        bystander.executableURL = URL(fileURLWithPath: "/bin/sleep")
        bystander.arguments = ["30"]
        try bystander.runAlone()
        defer { bystander.terminate() }
        let data = directory.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: true)
        try Data("\(bystander.processIdentifier)\n/some/other/cluster\n".utf8)
            .write(to: data.appendingPathComponent("postmaster.pid"))
        cluster.stop()
        #expect(bystander.isRunning)
        #expect(!FileManager.default.fileExists(atPath: directory.path))
    }
}
