import BatonOData
import BatonTestSupport
import BatonTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Synchronization
import Testing

@testable import BatonServer

/// PostgreSQL stops under load (as for maintenance) and comes back: the server answers 503 with an OData error
/// meanwhile, applies nothing by halves, and serves again by itself.
@Suite(.serverSlot, .timeLimit(.minutes(10)), .serialized) struct DatabaseOutageTests {
    /// What the writers saw, per request id.
    final class Outcomes: Sendable {
        let statuses = Mutex<[String: [Int]]>([:])
        let errorCodes = Mutex<Set<String>>([])
        let healthDown = Mutex(0)
        /// 0 before the outage, 1 during it, 2 after it, 3 to stop.
        let phase = Mutex(0)
        /// The last request number handed out.
        let next = Mutex(0)

        func record(_ id: String, _ reply: ODataReply) {
            statuses.withLock { $0[id, default: []].append(Int(reply.status.code)) }
            if reply.status == .serviceUnavailable {
                let code =
                    (reply.json["error"] as? [String: Any])?["code"] as? String ?? "no OData error: \(reply.text)"
                _ = errorCodes.withLock { $0.insert(code) }
            }
        }
    }

    /// A server with four connections on a database of `cluster`, a cluster of the test's own (the shared one
    /// serves other tests, and these stop theirs).
    static func server(on cluster: PostgresCluster) async throws -> TestServer {
        try await offThePool { _ = try cluster.psql("CREATE DATABASE outage") }
        var location = try PostgresLocation(parsing: cluster.url(database: "outage"), fromCommandLine: false)
        location.password = cluster.password
        let keyFile = cluster.directory.appendingPathComponent("master.key")
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: keyFile)
        return try await TestServer {
            $0.database = location
            $0.databaseConnections = 4
            $0.masterKeyFile = keyFile
        }
    }

    @Test func theDatabaseStoppingUnderLoadAnswers503AndServiceResumesByItself() async throws {
        let cluster = try await offThePool { try PostgresCluster() }
        defer { cluster.stop() }
        let server = try await Self.server(on: cluster)
        defer { server.remove() }
        try await server.addUser("alice")
        let outcomes = Outcomes()
        let firstSent = Repeatability.formatIMFFixdate(server.clock.current.withLock { $0 })
        try await server.test { client in
            let alice = try await client.signIn("alice").access
            @Sendable func write(_ n: Int) async throws {
                let id = Fixtures.id(n)
                let reply = try await client.odata(
                    .post, "PreflightChecks", token: alice,
                    headers: [("Repeatability-Request-ID", "w-\(n)"), ("Repeatability-First-Sent", firstSent)],
                    body: Fixtures.check(id))
                outcomes.record(id, reply)
            }
            // Two writers and a health probe, before, during and after the outage.
            let load = Task {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<2 {
                        group.addTask {
                            while outcomes.phase.withLock({ $0 }) < 3 {
                                try await write(
                                    outcomes.next.withLock {
                                        $0 += 1; return $0
                                    })
                            }
                        }
                    }
                    group.addTask {
                        while outcomes.phase.withLock({ $0 }) < 3 {
                            let (status, _, _) = try await client.get("/health", token: nil)
                            if status == .serviceUnavailable { outcomes.healthDown.withLock { $0 += 1 } }
                            try await Task.sleep(for: .milliseconds(50))
                        }
                    }
                    try await group.waitForAll()
                }
            }
            try await Task.sleep(for: .milliseconds(500))
            outcomes.phase.withLock { $0 = 1 }
            try await offThePool { try cluster.pause() }
            // Longer than a request waits for a connection: requests meanwhile answer 503.
            try await Task.sleep(for: .seconds(7))
            try await offThePool { try cluster.resume() }
            outcomes.phase.withLock { $0 = 2 }
            let before = outcomes.next.withLock { $0 }
            // Service resumes by itself: new writes apply again within a while, with no restart.
            let deadline = Date().addingTimeInterval(60)
            var resumed = false
            while Date() < deadline, !resumed {
                try await Task.sleep(for: .milliseconds(200))
                let statuses = outcomes.statuses.withLock { $0 }
                resumed = (before..<outcomes.next.withLock { $0 }).contains {
                    statuses[Fixtures.id($0 + 1)]?.last == 201
                }
            }
            outcomes.phase.withLock { $0 = 3 }
            try await load.value
            #expect(resumed, "no write applied after the database came back")
            let (health, _, _) = try await client.get("/health", token: nil)
            #expect(health == .ok)

            let statuses = outcomes.statuses.withLock { $0 }
            let refused = statuses.filter { $0.value.last != 201 }
            #expect(!refused.isEmpty, "no request met the outage")
            #expect(refused.allSatisfy { $0.value.last == 503 }, "\(refused.values.map(\.last).prefix(5))")
            #expect(outcomes.errorCodes.withLock { $0 } == ["DatabaseUnavailable"])
            #expect(outcomes.healthDown.withLock { $0 } > 0)
            // Each refused write is retried by its device: it applies once (or answers the attempt that applied).
            for id in refused.keys.sorted() {
                guard let n = Int(id.suffix(12)) else { continue }
                try await write(n)
            }
            let after = outcomes.statuses.withLock { $0 }
            #expect(after.values.allSatisfy { $0.last == 201 })
            let count = try await client.odata(.get, "PreflightChecks/$count", token: alice).text
            #expect(count == String(after.count))
        }
        // Nothing applied by halves: each check has exactly one audit entry, and none has one without its check.
        let audit = try await server.server.audit.entries(limit: 100_000).filter { $0.action == "entity-created" }
        let created = outcomes.statuses.withLock { $0 }.keys
        #expect(audit.count == created.count)
        for id in created { #expect(audit.filter { $0.subject?.contains(id) == true }.count == 1, "\(id)") }
    }

    /// A writer of entities queues for the writers' own connection as long as a lock may be waited for only while
    /// another writer holds it; with the database away nobody does, and the writer answers 503 after the lease
    /// deadline like every other request (it waited the whole 15 s, and a short outage met no refused write).
    @Test func aWriterWhileTheDatabaseIsAwayFailsAfterTheLeaseDeadline() async throws {
        let cluster = try await offThePool { try PostgresCluster() }
        defer { cluster.stop() }
        let server = try await Self.server(on: cluster)
        defer { server.remove() }
        let store = server.server.data.store
        _ = try await store.write { db in try await db.execute("SELECT 1") }
        try await offThePool { try cluster.pause() }
        let started = ContinuousClock.now
        await #expect {
            try await store.write { db in try await db.execute("SELECT 1") }
        } throws: { ($0 as? StorageError)?.kind == .unavailable }
        let waited = ContinuousClock.now - started
        #expect(waited < .seconds(PostgresStorage.lockTimeoutSeconds - 3), "waited \(waited)")
        try await offThePool { try cluster.resume() }
        try await eventually { (try? await store.write { db in try await db.execute("SELECT 1") }) != nil }
    }
}
