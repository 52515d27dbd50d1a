import AsyncHTTPClient
import BatonClient
import BatonOData
import BatonOffline
import BatonServer
import BatonTesting
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Many tablets at once against one server: each has two users who take turns recording checks and syncing
/// (the other's changes on their behalf), all tablets concurrently. For each number of devices it measures the
/// server's throughput (changes uploaded per second of the whole run) and each sync's latency, and the
/// invariant checker checks every change of every tablet afterwards.
public struct LoadChaos: Sendable {
    /// The numbers of devices measured, in order; the first is the baseline (one device, alone).
    public var devices: [Int]
    /// Syncs per device, each after recording `checksPerSync` checks.
    public var rounds: Int
    public var checksPerSync: Int

    public init(devices: [Int], rounds: Int = 4, checksPerSync: Int = 10) {
        self.devices = devices
        self.rounds = rounds
        self.checksPerSync = checksPerSync
    }

    /// One point of the curve.
    public struct Point: Sendable, Codable {
        public var devices: Int
        public var changes: Int
        public var seconds: Double
        public var changesPerSecond: Double
        public var syncP50: Double
        public var syncP99: Double
        /// Throughput as a share of the one-device baseline.
        public var shareOfBaseline: Double
    }

    public struct Report: Sendable, Codable {
        public var points: [Point] = []
        public var invariants = ChaosReport()
        public var peakMemoryMB = 0.0

        public var passed: Bool { invariants.passed }

        public var text: String {
            var lines = ["devices  changes  seconds  changes/s  share of 1 device  sync p50  sync p99"]
            for point in points {
                lines.append(
                    String(
                        format: "%7d  %7d  %7.1f  %9.0f  %16.0f%%  %6.0f ms  %6.0f ms", point.devices, point.changes,
                        point.seconds, point.changesPerSecond, point.shareOfBaseline * 100, point.syncP50 * 1000,
                        point.syncP99 * 1000))
            }
            lines.append(String(format: "peak memory (server and every tablet, one process): %.0f MB", peakMemoryMB))
            lines.append(invariants.text)
            return lines.joined(separator: "\n")
        }
    }

    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        // The tablets share one HTTP client (one process); its pool is sized for them, as many tablets would each
        // bring their own connection. Waiting for a connection counts in a sync's latency.
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        configuration.timeout.connect = .seconds(5)
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        defer { Task { try? await client.shutdown() } }
        let transport = AsyncHTTPClientTransport(client: client)
        _ = try await server.server.seed(aircraft: 20, checks: 0)
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("baton-load-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        var report = Report()
        var checker = InvariantChecker(run: "load-\(UUID().uuidString.prefix(8))")
        var baseline: Double?
        var userCount = 0
        var syncs = 0
        for (index, count) in devices.enumerated() {
            // Fresh tablets for each point, two users each (accounts are shared by no two tablets).
            var tablets: [Tablet] = []
            for device in 0..<count {
                var users: [TabletUser] = []
                for _ in 0..<2 {
                    userCount += 1
                    let user = TabletUser(
                        name: "u\(userCount)", password: "load-password-\(userCount)", passcode: "pass-\(userCount)-x")
                    try await server.addUser(user.name, displayName: user.name, password: user.password)
                    users.append(user)
                }
                tablets.append(
                    try await Tablet.make(
                        server: server.url, directory: root.appendingPathComponent("p\(index)-d\(device)"),
                        timeout: .seconds(120), users: users, transport: transport))
            }
            progress("\(count) devices onboarded")
            let tails = try await tablets[0].store.read("Aircraft").compactMap { $0.values["TailNumber"] }
            let started = ContinuousClock.now
            let results = try await withThrowingTaskGroup(of: DeviceResult.self) { group in
                for tablet in tablets {
                    let label = checker.run
                    group.addTask {
                        try await Self.drive(
                            tablet, tails: tails, rounds: rounds, checksPerSync: checksPerSync, label: label)
                    }
                }
                var all: [DeviceResult] = []
                for try await result in group { all.append(result) }
                return all
            }
            let seconds = (ContinuousClock.now - started).seconds
            var latencies = results.flatMap(\.latencies).sorted()
            syncs += latencies.count
            if latencies.isEmpty { latencies = [0] }
            let changes = results.reduce(0) { $0 + $1.created.count }
            for result in results {
                for (id, author, fuel) in result.created {
                    checker.created(id, by: author, fuel: fuel)
                    checker.uploaders[id] = result.uploaders[id]
                }
            }
            for tablet in tablets {
                report.invariants.leftPending +=
                    try await tablet.store.pendingEntries().count + tablet.store.archivedEntries().count
                if try await !tablet.store.integrityCheck() { report.invariants.problems.append("a store is damaged") }
                await tablet.store.close()
                await tablet.manager.close()
            }
            let rate = Double(changes) / max(seconds, 0.001)
            baseline = baseline ?? rate
            report.points.append(
                Point(
                    devices: count, changes: changes, seconds: seconds, changesPerSecond: rate,
                    syncP50: latencies[latencies.count / 2],
                    syncP99: latencies[min(latencies.count - 1, latencies.count * 99 / 100)],
                    shareOfBaseline: rate / (baseline ?? rate)))
            progress("\(count) devices: \(Int(rate)) changes/s")
        }
        let token = try await Self.token(server: server, user: "u1", password: "load-password-1")
        let leftPending = report.invariants.leftPending
        let problems = report.invariants.problems
        report.invariants = try await checker.check(server: server, token: token)
        report.invariants.leftPending = leftPending
        report.invariants.problems += problems
        report.invariants.storeIntact = problems.isEmpty
        report.invariants.syncs = syncs
        report.peakMemoryMB = Self.peakResidentMB()
        return report
    }

    struct DeviceResult: Sendable {
        var created: [(String, String, Decimal)] = []
        var uploaders: [String: String] = [:]
        var latencies: [Double] = []
    }

    /// One tablet's shift: record, sync, now and then hand over to the other user, who syncs both.
    static func drive(
        _ tablet: Tablet, tails: [PrimitiveValue], rounds: Int, checksPerSync: Int, label: String
    ) async throws -> DeviceResult {
        var result = DeviceResult()
        for round in 0..<rounds {
            // Every other round the other user takes over: the first user's last checks go on their behalf.
            let user = tablet.users[round % tablet.users.count].name
            if tablet.session.user.serverUserID != user { try await tablet.switchTo(user) }
            for index in 0..<checksPerSync {
                let id = try await tablet.store.create(
                    in: "PreflightChecks",
                    values: [
                        "ID": .guid(UUID()), "TailNumber": tails[(round + index) % tails.count],
                        "FuelKg": .decimal(Decimal(5_000 + index)), "TyrePressureMainPsi": .decimal(200),
                        "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15), "Status": .string("final"),
                        "Remarks": .string("\(label) #\(UUID().uuidString.prefix(8))"),
                    ])
                result.created.append((id, user, Decimal(5_000 + index)))
            }
            // Half the rounds leave their checks for the next user to upload on this one's behalf.
            guard round % 2 == 1 || round == rounds - 1 else { continue }
            let started = ContinuousClock.now
            let report = try await tablet.sync()
            result.latencies.append((ContinuousClock.now - started).seconds)
            guard report.isComplete else {
                throw ChaosFailure("A sync under load left changes behind: \(report.archived.first?.message ?? "")")
            }
            for entry in report.uploaded { result.uploaders[entry.entityID] = user }
        }
        return result
    }

    static func token(server: LiveServer, user: String, password: String) async throws -> String {
        let grant = try await AsyncHTTPClientTransport().send(
            ClientRequest(
                method: "POST", url: server.url.appendingPathComponent("oauth/token"),
                headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Array("grant_type=password&client_id=baton-device&username=\(user)&password=\(password)".utf8)))
        guard let json = try? JSONValue(parsing: grant.body), let token = json["access_token"]?.stringValue else {
            throw ChaosFailure("No token for \(user) (HTTP \(grant.status)).")
        }
        return token
    }

    static func peakResidentMB() -> Double {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmHWM:") }),
            let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "")
        else { return 0 }
        return kilobytes / 1024
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
