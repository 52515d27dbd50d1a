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
/// throughput (changes uploaded per second of the whole run), each sync's latency and — with the server in a
/// process of its own — the server's CPU time and memory, and the invariant checker checks every change of every
/// tablet afterwards.
public struct LoadChaos: Sendable {
    /// The numbers of devices measured, in order; the first is the baseline (one device, alone).
    public var devices: [Int]
    /// Rounds per device, each recording `checksPerSync` checks; every other round (and the last) ends with a sync.
    /// A one-device first point (the baseline) runs ten times as many, back to back even when paced.
    public var rounds: Int
    public var checksPerSync: Int
    /// The `baton-server` executable: the server then runs in a process of its own (on SQLite), so its CPU time and
    /// memory are measured apart from the tablets'. Without it, the server runs in this process.
    public var serverBinary: URL?
    /// Each tablet syncs once per `pace`, the first time at a random moment within it, as tablets in use do; without
    /// it, every tablet syncs again as soon as it has recorded its next checks.
    public var pace: Duration?
    /// Tablets per station: a station's tablets check its two aircraft and keep only their checks offline (a
    /// defining query filtered by tail number), as an airline's stations do. Without it, every tablet keeps every
    /// check of the fleet, and each sync downloads what every other tablet uploaded.
    public var stationSize: Int?
    /// How many times the one-device baseline runs (each on a fresh tablet; an even number is made odd, so that
    /// one run is the median); the run with the median changes per server CPU-second counts, and its changes per
    /// second pace the tablets for ``offeredLoad``.
    public var baselineRuns: Int
    /// Instead of a fixed `pace`: each point after a one-device baseline paces its tablets so that together they
    /// offer this share of the baseline's changes per second (each tablet syncing its changes per sync,
    /// `rounds × checksPerSync / syncsPerDevice`, once every `devices × that / (share × baseline)` seconds). The
    /// throughput target asks what the server serves many tablets at a share of one client's throughput; offered
    /// that share, the point's throughput says whether the server kept up (it cannot exceed the share by much)
    /// and its p99 how long the tablets waited. A fixed pace offers a load that is a different share of the
    /// baseline as the machine's speed varies (this VM's varied by a third within an hour).
    public var offeredLoad: Double?

    /// How many times each tablet syncs: every other round and after the last.
    var syncsPerDevice: Int { (rounds + 1) / 2 }

    public init(
        devices: [Int], rounds: Int = 4, checksPerSync: Int = 10, serverBinary: URL? = nil, pace: Duration? = nil,
        stationSize: Int? = nil, baselineRuns: Int = 3, offeredLoad: Double? = nil
    ) {
        self.offeredLoad = offeredLoad
        self.stationSize = stationSize
        self.baselineRuns = max(1, baselineRuns) | 1
        self.devices = devices
        self.rounds = rounds
        self.checksPerSync = checksPerSync
        self.serverBinary = serverBinary
        self.pace = pace
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
        /// The server process's CPU time (user and system) over the point, when it runs in a process of its own.
        public var serverCPUSeconds: Double?
        /// Changes per second of the server's CPU time, and that as a share of the baseline's: the server's own
        /// throughput, apart from the tablets' work on the same cores.
        public var changesPerServerCPUSecond: Double?
        public var serverShareOfBaseline: Double?
        public var serverResidentMB: Double?
        /// The most checks any tablet of the point keeps offline at its end.
        public var checksKeptPerTablet = 0
        /// The baseline's runs (changes per server CPU-second, or per second with the server in this process), lowest
        /// first, when it ran more than once; the point is the median run.
        public var baselineRuns: [Double]?
        /// How often each tablet of the point synced, when paced.
        public var paceSeconds: Double?
    }

    public struct Report: Sendable, Codable {
        public var points: [Point] = []
        public var invariants = ChaosReport()
        public var peakMemoryMB = 0.0
        public var serverPeakMemoryMB: Double?
        public var paceSeconds: Double?
        /// The share of the baseline's changes per second the points after it were offered, when so paced.
        public var offeredLoad: Double?

        public var passed: Bool { invariants.passed }

        public var text: String {
            var lines = [
                "devices  changes  seconds  changes/s  share  sync p50  sync p99  server CPU  changes/CPU-s  share  server RSS"
            ]
            for point in points {
                var line = String(
                    format: "%7d  %7d  %7.1f  %9.0f  %4.0f%%  %5.0f ms  %5.0f ms", point.devices, point.changes,
                    point.seconds, point.changesPerSecond, point.shareOfBaseline * 100, point.syncP50 * 1000,
                    point.syncP99 * 1000)
                if let cpu = point.serverCPUSeconds, let rate = point.changesPerServerCPUSecond,
                    let share = point.serverShareOfBaseline, let resident = point.serverResidentMB
                {
                    line += String(format: "  %8.2f s  %13.0f  %4.0f%%  %7.0f MB", cpu, rate, share * 100, resident)
                }
                lines.append(line)
            }
            if let runs = points.first?.baselineRuns {
                let figures = runs.map { String(format: "%.0f", $0) }.joined(separator: ", ")
                let unit = points.first?.serverCPUSeconds == nil ? "per second" : "per server CPU-second"
                lines.append("the baseline is the median of \(runs.count) runs (\(figures) changes \(unit))")
            }
            if let pace = paceSeconds { lines.append(String(format: "each tablet syncs once every %.0f s", pace)) }
            if let load = offeredLoad {
                for point in points.dropFirst() {
                    guard let pace = point.paceSeconds else { continue }
                    lines.append(
                        String(
                            format:
                                "%d devices: each tablet synced once every %.1f s, offering %.0f%% of the baseline's changes per second",
                            point.devices, pace, load * 100))
                }
            }
            if let server = serverPeakMemoryMB {
                lines.append(
                    String(
                        format: "peak memory: server process %.0f MB; tablets (one process) %.0f MB", server,
                        peakMemoryMB)
                )
            } else {
                lines.append(
                    String(format: "peak memory (server and every tablet, one process): %.0f MB", peakMemoryMB))
            }
            lines.append(invariants.text)
            return lines.joined(separator: "\n")
        }
    }

    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("baton-load-\(UUID())")
        defer { try? FileManager.default.removeItem(at: root) }
        let data = root.appendingPathComponent("server")
        // Every point's users up front (two per tablet, no account on two tablets), and the aircraft.
        let setup = try await LiveServer.start(directory: data)
        var users: [[TabletUser]] = []
        let baselineExtra = devices.first == 1 ? baselineRuns - 1 : 0
        for number in 1...((devices.reduce(0, +) + baselineExtra) * 2) {
            let user = TabletUser(name: "u\(number)", password: "load-password-\(number)", passcode: "pass-\(number)-x")
            try await setup.addUser(user.name, displayName: user.name, password: user.password)
            if number % 2 == 1 { users.append([user]) } else { users[users.count - 1].append(user) }
        }
        // Two aircraft per station (or 20 for the whole fleet); their tail numbers, to scope the stations' tablets.
        let stations = stationSize.map { size in ((devices.max() ?? 1) + size - 1) / size } ?? 10
        _ = try await setup.server.seed(aircraft: max(2, stations * 2), checks: 0)
        let fleet = try await Self.tails(of: setup)
        let process: Process?
        let serverURL: URL
        if let serverBinary {
            await setup.stop()
            setup.server.close()
            let port = try await ServerKillChaos.freePort()
            process = try await ServerKillChaos.startServer(serverBinary, data: data, port: port)
            guard let url = URL(string: "http://127.0.0.1:\(port)") else { throw ChaosFailure("No URL.") }
            serverURL = url
        } else {
            process = nil
            serverURL = setup.url
        }
        defer { process?.terminate() }
        progress("\(users.count * 2) users")

        // The tablets share one HTTP client (one process); its pool is sized for them, as many tablets would each
        // bring their own connection. Waiting for a connection counts in a sync's latency.
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 64)
        configuration.timeout.connect = .seconds(5)
        let client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        defer { Task { try? await client.shutdown() } }
        let transport = AsyncHTTPClientTransport(client: client)
        var report = Report()
        report.paceSeconds = pace?.seconds
        report.offeredLoad = offeredLoad
        var checker = InvariantChecker(run: "load-\(UUID().uuidString.prefix(8))")
        var baseline: (rate: Double, serverRate: Double?)?
        var syncs = 0
        var nextUsers = users.makeIterator()
        var damaged = false
        for (index, count) in devices.enumerated() {
            // The one-device baseline is the single client's throughput: it syncs back to back, paced or not, and
            // runs ten times the rounds, so its server CPU time is read over more than a few of /proc's 10 ms
            // clock ticks. It runs `baselineRuns` times, each on a fresh tablet, and the run with the median
            // changes per server CPU-second (per second with the server in this process) counts: one run alone
            // varied by a third between runs of the harness (a lone tablet leaves the server idle between its
            // requests, and how warm its caches stay depends on where the scheduler puts the two processes).
            let isBaseline = index == 0 && count == 1
            var pointPace = isBaseline ? nil : pace
            if !isBaseline, let offeredLoad, let rate = baseline?.rate, devices.first == 1 {
                let changesPerSync = Double(rounds * checksPerSync) / Double(syncsPerDevice)
                // At most an hour, as `--pace`: a load offered so thin would otherwise pace the tablets for days.
                let seconds = Double(count) * changesPerSync / (offeredLoad * rate)
                pointPace = .milliseconds((seconds.isFinite ? min(seconds, 3_600) : 3_600) * 1_000)
            }
            var runs: [Point] = []
            for _ in 0..<(isBaseline ? baselineRuns : 1) {
                runs.append(
                    try await measure(
                        devices: count, rounds: isBaseline ? rounds * 10 : rounds, pace: pointPace,
                        serverURL: serverURL, process: process, transport: transport, users: &nextUsers,
                        fleet: fleet, root: root.appendingPathComponent("p\(index)-r\(runs.count)"),
                        checker: &checker, report: &report, syncs: &syncs, damaged: &damaged))
            }
            runs.sort {
                ($0.changesPerServerCPUSecond ?? $0.changesPerSecond)
                    < ($1.changesPerServerCPUSecond ?? $1.changesPerSecond)
            }
            var point = runs[runs.count / 2]
            point.paceSeconds = pointPace?.seconds
            if isBaseline && runs.count > 1 {
                point.baselineRuns = runs.map { $0.changesPerServerCPUSecond ?? $0.changesPerSecond }
            }
            baseline = baseline ?? (point.changesPerSecond, point.changesPerServerCPUSecond)
            point.shareOfBaseline = point.changesPerSecond / (baseline?.rate ?? point.changesPerSecond)
            point.serverShareOfBaseline = point.changesPerServerCPUSecond.flatMap { rate in
                baseline?.serverRate.map { rate / $0 }
            }
            report.points.append(point)
            progress("\(count) devices: \(Int(point.changesPerSecond)) changes/s")
        }
        let server: LiveServer
        if let process {
            report.serverPeakMemoryMB = Self.memoryMB(of: process.processIdentifier, field: "VmHWM")
            // Stopped as an operator would (SIGTERM: in-flight requests finish), then opened here for the checker.
            process.terminate()
            process.waitUntilExit()
            server = try await LiveServer.start(directory: data)
        } else {
            server = setup
        }
        defer { Task { await server.shutDown() } }
        let token = try await Self.token(server: server, user: "u1", password: "load-password-1")
        let leftPending = report.invariants.leftPending
        let problems = report.invariants.problems
        report.invariants = try await checker.check(server: server, token: token)
        report.invariants.leftPending = leftPending
        report.invariants.problems += problems
        report.invariants.storeIntact = !damaged
        report.invariants.syncs = syncs
        report.peakMemoryMB = Self.memoryMB(of: getpid(), field: "VmHWM") ?? 0
        return report
    }

    /// One point's run: `devices` fresh tablets record and sync concurrently; their changes go to the checker, their
    /// stores are checked, and the point's figures are returned (its shares of the baseline are the caller's).
    func measure(
        devices count: Int, rounds pointRounds: Int, pace pointPace: Duration?, serverURL: URL, process: Process?,
        transport: AsyncHTTPClientTransport, users: inout IndexingIterator<[[TabletUser]]>, fleet: [String],
        root: URL, checker: inout InvariantChecker, report: inout Report, syncs: inout Int, damaged: inout Bool
    ) async throws -> Point {
        var tablets: [Tablet] = []
        for device in 0..<count {
            guard let pair = users.next() else { throw ChaosFailure("Not enough users.") }
            var queries = Tablet.definingQueries
            if stationSize != nil {
                let tails = Self.station(of: device, size: stationSize, fleet: fleet)
                let filter = tails.map { "TailNumber eq '\($0)'" }.joined(separator: " or ")
                queries = [
                    DefiningQuery(name: "aircraft", url: "Aircraft"),
                    DefiningQuery(name: "checks", url: "PreflightChecks?$filter=\(filter)"),
                ]
            }
            tablets.append(
                try await Tablet.make(
                    server: serverURL, directory: root.appendingPathComponent("d\(device)"),
                    timeout: .seconds(120), users: pair, transport: transport, definingQueries: queries))
        }
        let cpuBefore = process.flatMap { Self.cpuSeconds(of: $0.processIdentifier) }
        let started = ContinuousClock.now
        let label = checker.run
        let checksPerSync = self.checksPerSync
        let stationSize = self.stationSize
        let results = try await withThrowingTaskGroup(of: DeviceResult.self) { group in
            for (device, tablet) in tablets.enumerated() {
                let tails = Self.station(of: device, size: stationSize, fleet: fleet).map(PrimitiveValue.string)
                let offset = pointPace.map { $0 * Double.random(in: 0..<1) }
                group.addTask {
                    try await Self.drive(
                        tablet, tails: tails, rounds: pointRounds, checksPerSync: checksPerSync, label: label,
                        pace: pointPace, offset: offset)
                }
            }
            var all: [DeviceResult] = []
            for try await result in group { all.append(result) }
            return all
        }
        let seconds = (ContinuousClock.now - started).seconds
        let serverCPU = process.flatMap { Self.cpuSeconds(of: $0.processIdentifier) }.flatMap { after in
            cpuBefore.map { after - $0 }
        }
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
        // Every tablet (one in ten past 20) ends holding exactly what its defining queries select on the server.
        for (number, tablet) in tablets.enumerated() where count <= 20 || number % 10 == 0 {
            if let problem = try await tablet.divergence() { report.invariants.problems.append(problem) }
        }
        var kept = 0
        for tablet in tablets {
            kept = max(kept, try await tablet.store.count("PreflightChecks"))
            report.invariants.leftPending +=
                try await tablet.store.pendingEntries().count + tablet.store.archivedEntries().count
            if try await !tablet.store.integrityCheck() {
                damaged = true
                report.invariants.problems.append("a store is damaged")
            }
            await tablet.store.close()
            await tablet.manager.close()
        }
        return Point(
            devices: count, changes: changes, seconds: seconds, changesPerSecond: Double(changes) / max(seconds, 0.001),
            syncP50: latencies[latencies.count / 2],
            syncP99: latencies[min(latencies.count - 1, latencies.count * 99 / 100)], shareOfBaseline: 1,
            serverCPUSeconds: serverCPU, changesPerServerCPUSecond: serverCPU.map { Double(changes) / max($0, 0.001) },
            serverShareOfBaseline: nil,
            serverResidentMB: process.flatMap { Self.memoryMB(of: $0.processIdentifier, field: "VmRSS") },
            checksKeptPerTablet: kept)
    }

    /// The aircraft a device's station checks: two of the fleet's by station, or the whole fleet.
    static func station(of device: Int, size: Int?, fleet: [String]) -> [String] {
        guard let size, fleet.count >= 2 else { return fleet }
        let first = (device / size * 2) % fleet.count
        return [fleet[first], fleet[(first + 1) % fleet.count]]
    }

    /// The fleet's tail numbers, read from the server.
    static func tails(of server: LiveServer) async throws -> [String] {
        let token = try await token(server: server, user: "u1", password: "load-password-1")
        let response = try await AsyncHTTPClientTransport().send(
            ClientRequest(
                url: server.url.appendingPathComponent("odata/Aircraft"),
                headers: [("Authorization", "Bearer \(token)"), ("Accept", "application/json")]))
        guard response.status == 200, let rows = (try? JSONValue(parsing: response.body))?["value"]?.arrayValue else {
            throw ChaosFailure("The aircraft could not be read (HTTP \(response.status)).")
        }
        let tails = rows.compactMap { $0["TailNumber"]?.stringValue }.sorted()
        guard !tails.isEmpty else { throw ChaosFailure("The server has no aircraft.") }
        return tails
    }

    /// A process's CPU time so far (user and system), from `/proc`.
    static func cpuSeconds(of pid: Int32) -> Double? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        // After the command's closing parenthesis: state (field 3) first; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// A `/proc/PID/status` memory figure (`VmRSS`, `VmHWM`) in MB.
    static func memoryMB(of pid: Int32, field: String) -> Double? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
            let kilobytes = Double(line.split(separator: " ").dropFirst().first ?? "")
        else { return nil }
        return kilobytes / 1024
    }

    struct DeviceResult: Sendable {
        var created: [(String, String, Decimal)] = []
        var uploaders: [String: String] = [:]
        var latencies: [Double] = []
    }

    /// One tablet's shift: record, sync, now and then hand over to the other user, who syncs both.
    static func drive(
        _ tablet: Tablet, tails: [PrimitiveValue], rounds: Int, checksPerSync: Int, label: String,
        pace: Duration? = nil, offset: Duration? = nil
    ) async throws -> DeviceResult {
        var result = DeviceResult()
        let start = ContinuousClock.now + (offset ?? .zero)
        var syncNumber = 0
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
            if let pace { try await Task.sleep(until: start + pace * syncNumber) }
            syncNumber += 1
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
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
