import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSecureStore
import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Synchronization
import Testing

/// Two real `baton-server serve` processes on one PostgreSQL database behind a real nginx (`deploy/nginx.conf`);
/// one instance after the other is killed with SIGKILL while a shared tablet keeps uploading its users' changes
/// through the balancer. Afterwards every change is on the server exactly once, attributed to its author and its
/// uploader, and nothing waits on the device.
///
/// `BATON_SERVER_KILLS` sets the number of kills (default 50; docs/CHAOS.md's longer run uses 500).
@Suite(.serverSlot, .timeLimit(.minutes(10)), .serialized) struct ServerKillTests {
    static let kills = Int(ProcessInfo.processInfo.environment["BATON_SERVER_KILLS"] ?? "") ?? 50

    /// The shared tablet (``TestTablet``): Alice and Bob onboarded, the store open as one of them at a time.
    struct Tablet {
        let base: TestTablet
        let alice: OnboardingSession
        let bob: OnboardingSession

        var store: OfflineStore { base.store }
        var directory: URL { base.directory }
        var bobSession: OnboardingSession { bob }

        /// Opens the store as `name` with the keys of their onboarding (no passcode, no server contact).
        func open(as name: String) async throws { try await base.openStore(as: name) }
    }

    static func tablet(_ url: URL) async throws -> Tablet {
        let base = try TestTablet(
            server: url,
            users: [
                TestTablet.User("alice", password: HandoverTests.alicePassword, passcode: "alice-pass-1"),
                TestTablet.User("bob", password: HandoverTests.bobPassword, passcode: "bob-pass-12"),
            ],
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("baton-kill-\(UUID())"))
        let sessions = try await base.onboardAll()
        return Tablet(base: base, alice: sessions[0], bob: sessions[1])
    }

    /// Retries `body` until it returns, for at most `seconds`: an instance may be down, or nginx may answer 502
    /// for a request the killed instance was serving.
    static func persistently<T: Sendable>(
        _ what: String, seconds: TimeInterval = 120, failures: inout Int, _ body: () async throws -> T?
    ) async throws -> T {
        let deadline = Date().addingTimeInterval(seconds)
        var last = "no attempt"
        while Date() < deadline {
            do {
                if let value = try await body() { return value }
                last = "incomplete"
            } catch {
                last = "\(error)"
                failures += 1
                if ProcessInfo.processInfo.environment["BATON_KILL_DEBUG"] != nil { print("\(what): \(last)") }
            }
            try await Task.sleep(for: .milliseconds(40))
        }
        throw KillTestFailure("\(what) did not succeed within \(Int(seconds)) s; last: \(last)")
    }

    static func guid(_ id: String) -> String {
        String(id.drop { $0 != "(" }.dropFirst().prefix { $0 != ")" }).lowercased()
    }

    @Test func killingInstancesMidBatchLosesNoChangeAndAppliesNoneTwice() async throws {
        let database = try await SharedPostgres.freshDatabase()
        let cluster = try await ServerCluster.start(database: database) { server in
            _ = try await server.users.add(
                name: "alice", displayName: "Alice", role: .groundStaff, password: HandoverTests.alicePassword)
            _ = try await server.users.add(
                name: "bob", displayName: "Bob", role: .groundStaff, password: HandoverTests.bobPassword)
            _ = try await server.seed(aircraft: 2, checks: 0)
        }
        defer { cluster.stop() }
        let tablet = try await Self.tablet(cluster.url)
        defer { try? FileManager.default.removeItem(at: tablet.directory) }
        var failures = 0
        try await tablet.open(as: "bob")
        _ = try await Self.persistently("the first download", failures: &failures) {
            try await tablet.store.download(using: tablet.bobSession.authorized)
        }
        let tail = try #require(try await tablet.store.read("Aircraft").first?.values["TailNumber"]?.text)

        // The killer: one instance after the other, at random moments, restarted at once. Mostly the other
        // instance serves meanwhile; when the next kill comes before nginx uses the restarted one again (2 s),
        // the balancer answers 502 for a moment, as it would in production.
        let killed = Killed()
        let killer = Task.detached {
            for round in 0..<Self.kills {
                try await Task.sleep(for: .milliseconds(Int.random(in: 100...2500)))
                let index = round % cluster.count
                try await offThePool {
                    cluster.kill(index)
                    usleep(UInt32.random(in: 0...150_000))
                    try cluster.startInstance(index)
                }
                killed.count.withLock { $0 += 1 }
            }
        }
        // A test that fails early stops killing (and restarting) before the cluster stops.
        defer { killer.cancel() }
        // The tablet: each round Alice records a check and corrects her previous one, Bob records one, and
        // Bob's sync uploads all of it (Alice's on her behalf) through the balancer.
        var aliceChecks: [String] = []
        var bobChecks: [String] = []
        var fuel: [String: Int] = [:]
        var rounds = 0
        while killed.count.withLock({ $0 }) < Self.kills || rounds < 3 {
            try await tablet.open(as: "alice")
            if let previous = aliceChecks.last {
                fuel[previous, default: 0] += 1
                try await tablet.store.update(previous, values: ["FuelKg": .decimal(Decimal(5000 + fuel[previous]!))])
            }
            let created = try await tablet.store.create(in: "PreflightChecks", values: Self.check(tail, fuel: 5000))
            aliceChecks.append(created)
            try await tablet.open(as: "bob")
            bobChecks.append(try await tablet.store.create(in: "PreflightChecks", values: Self.check(tail, fuel: 4000)))
            _ = try await Self.persistently("round \(rounds)'s upload", failures: &failures) {
                let report = try await tablet.store.upload(using: tablet.bobSession.authorized, allowOnBehalf: true)
                return report.isComplete ? report : nil
            }
            rounds += 1
        }
        try await killer.value
        #expect(killed.count.withLock { $0 } == Self.kills)
        #expect(try await tablet.store.pendingEntries().isEmpty)
        #expect(try await tablet.store.archivedEntries().isEmpty)
        let failed = failures
        print(
            "ServerKillTests: \(Self.kills) kills, \(rounds) rounds, \(aliceChecks.count + bobChecks.count) checks created, \(fuel.values.reduce(0, +)) updates, \(failed) failed attempts retried"
        )
        // Failed attempts prove that kills landed while the tablet was syncing.
        #expect(failed > 0)

        // What the server holds, read as an admin would after the cluster stopped: every instance has gone, the
        // outbox entries a killed instance left are moved by this last start.
        let masterKey = try Data(contentsOf: cluster.masterKeyFile)
        cluster.stop()
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "baton-kill-audit-\(UUID())")
        configuration.database = database
        configuration.databaseConnections = 4
        let keyFile = tablet.directory.appendingPathComponent("master.key")
        try masterKey.write(to: keyFile)
        configuration.masterKeyFile = keyFile
        let server = try await BatonServer(configuration: configuration, logger: .init(label: "kill-check"))
        defer {
            server.close()
            try? FileManager.default.removeItem(at: configuration.dataDirectory)
        }
        let postgres = try await SharedPostgres.shared()
        let rows = try await offThePool {
            try postgres.psql(
                #"SELECT "ID", "CheckedBy", "UploadedBy", "FuelKg" FROM "PreflightChecks""#, database: database.database
            )
        }.split(separator: "\n").map { $0.split(separator: "|").map(String.init) }
        #expect(rows.count == aliceChecks.count + bobChecks.count)
        let byID = Dictionary(rows.map { ($0[0], $0) }, uniquingKeysWith: { first, _ in first })
        for (id, author) in aliceChecks.map({ ($0, "alice") }) + bobChecks.map({ ($0, "bob") }) {
            let row = byID[Self.guid(id)] ?? []
            #expect(row.count == 4 && row[1] == author && row[2] == "bob", "\(id): \(row)")
            let expectedFuel = (author == "bob" ? 4000 : 5000) + (fuel[id] ?? 0)
            #expect(row.count == 4 && Double(row[3]) == Double(expectedFuel), "\(id): \(row)")
        }
        let audit = try await server.audit.entries(limit: 1_000_000)
        for id in aliceChecks + bobChecks {
            let guid = Self.guid(id)
            let about = audit.filter { $0.subject?.lowercased().contains(guid) == true }
            #expect(about.filter { $0.action == "entity-created" }.count == 1, "\(id)")
            #expect(about.filter { $0.action == "entity-updated" }.count == fuel[id] ?? 0, "\(id)")
        }
    }

    static func check(_ tail: String, fuel: Int) -> [String: PrimitiveValue] {
        [
            "ID": .guid(UUID()), "TailNumber": .string(tail), "FuelKg": .decimal(Decimal(fuel)),
            "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15),
            "Status": .string("draft"),
        ]
    }
}

/// How many kills the killer has done so far.
final class Killed: Sendable {
    let count = Mutex(0)
}

struct KillTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
