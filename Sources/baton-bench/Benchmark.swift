import ArgumentParser
import BatonSQLGRDB
import BatonServer
import BatonTesting
import Foundation
import GRDB
import Hummingbird
import Logging
import NIOPosix
import PostgresNIO

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `swift run -c release baton-bench`: seeds 100,000 pre-flight checks and measures, with wrk over loopback,
/// a key read, a filtered page of 50, a delta page and a 100-change JSON batch, next to a bare Hummingbird
/// route that returns a fixed body — the framework's limit on this machine. Prints requests per second and
/// each rate as a share of the bare route's.
@main
struct Benchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton-bench", abstract: "Benchmark the OData data service.")

    @Option(help: "Pre-flight checks to seed.") var checks = 100_000
    @Option(help: "Seconds per measurement.") var duration = 10
    @Option(help: "Concurrent connections.") var connections = 16
    @Option(
        help:
            "Slices per row: each row after the bare route is measured in this many slices, each right after a slice of the bare route, and its share is against those."
    )
    var slices = 3
    @Option(help: "Run only the measurements whose name contains this text (for profiling), besides the bare route.")
    var only: String?

    @Flag(help: "Measure unlock and user switch (client side) instead of the data service.")
    var flows = false
    @Flag(
        help:
            "Measure photos: upload of a 5 MiB photo against a bare route streaming to disk, memory with 16 uploads at once, capture on the tablet."
    )
    var media = false
    @Flag(help: "Measure the offline store (download, upload, local queries, open) instead of the data service.")
    var offline = false
    @Option(help: "Queued changes to upload in the offline measurement.") var changes = 10_000
    @Option(help: "Repetitions of each flow measurement.") var repetitions = 10
    @Option(
        help: "Profile: send this many key reads and filtered pages through the router in-process (no sockets).")
    var inProcess: Int?

    @Option(
        help:
            "Profile the admin cockpit: seed this many audit entries (the issue's figure: 100000) and render the overview, users and audit pages in-process, reporting p50 and CPU per page."
    )
    var cockpit: Int?
    @Flag(help: .hidden) var downloadClient = false

    @Option(
        help: ArgumentHelp(
            "Measure on this PostgreSQL database instead of SQLite: an empty one, which the benchmark fills. postgres://USER@HOST:PORT/DATABASE; the password only from BATON_DATABASE_URL (which alone also selects PostgreSQL).",
            valueName: "url"))
    var database: String?
    @Option(
        help:
            "On PostgreSQL, also measure the 100-change batch through nginx (deploy/nginx.conf) in front of one, then this many baton-server processes; 0 skips it."
    )
    var instances = 2

    @Flag(
        help:
            "Give each batch in flight checks of its own (64 sets of 100, two wrk threads cycling through 32 each) instead of every batch updating the same 100 — in the 100-change batch row and through nginx."
    )
    var disjoint = false

    /// The servers' limit of one user's changing requests at once: one user stands for many tablets here, and the
    /// batches wrk's warm-up left when it closed its connections still queue for the rows they change (a request
    /// runs to its end when its client goes away) as the measurement starts (with `--connections`, a run through
    /// nginx saw 252 of 315 batches refused).
    var changesPerUser: Int { min(10_000, connections.multipliedReportingOverflow(by: 4).partialValue) }

    /// `--database` with the password of `BATON_DATABASE_URL`, or `BATON_DATABASE_URL` alone; `nil` for SQLite.
    func databaseLocation() throws -> PostgresLocation? {
        let environment = ProcessInfo.processInfo.environment["BATON_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 }
        let fromEnvironment = try environment.map { try PostgresLocation(parsing: $0, fromCommandLine: false) }
        guard let database else { return fromEnvironment }
        var location = try PostgresLocation(parsing: database, fromCommandLine: true)
        location.password = fromEnvironment?.password
        return location
    }

    @Flag(help: "Compare the $batch multipart reader and writer with vapor/multipart-kit's instead.")
    var multipart = false

    func run() async throws {
        if multipart { return try MultipartBenchmark().run() }
        if downloadClient { return try await OfflineBenchmark.downloadClient() }
        if flows { return try await FlowsBenchmark(repetitions: repetitions).run() }
        if media { return try await MediaBenchmark(duration: duration).run() }
        if offline { return try await OfflineBenchmark(checks: checks, changes: changes).run() }
        // As `baton-server serve` runs.
        BatonServer.runConcurrencyOnEventLoops()
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/wrk") else {
            throw ValidationError("wrk is needed: apt-get install wrk")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "baton-bench-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = directory
        configuration.port = 0
        configuration.bcryptCost = 4
        configuration.dataService.maximumConcurrentChangesPerUser = changesPerUser
        // One user stands for many tablets here too: wrk's connections read at once.
        configuration.dataService.maximumConcurrentReadsPerUser = changesPerUser
        let location = try databaseLocation()
        if let location {
            // Every instance needs the same master key, from a file.
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let keyFile = directory.appendingPathComponent("master.key")
            guard
                FileManager.default.createFile(
                    atPath: keyFile.path, contents: Data((0..<32).map { _ in UInt8.random(in: 0...255) }),
                    attributes: [.posixPermissions: 0o600])
            else { throw ValidationError("Cannot write \(keyFile.path).") }
            configuration.database = location
            configuration.masterKeyFile = keyFile
            print("On PostgreSQL: \(location)")
        }
        var logger = Logger(label: "bench")
        logger.logLevel = .error
        let server = try await BatonServer(configuration: configuration, logger: logger)
        let seedStart = ContinuousClock.now
        _ = try await server.seed(aircraft: 200, checks: checks)
        print("Seeded \(checks) checks in \(ContinuousClock.now - seedStart).")
        try await server.users.add(
            name: "bench", displayName: nil, role: .supervisor, password: "load-generator-secret-1")

        if let cockpit {
            return try await CockpitProfile(server: server, entries: cockpit).run()
        }
        if let inProcess {
            return try await InProcessProfile(server: server, requests: inProcess, only: only).run()
        }
        let ports = AsyncStream<Int>.makeStream()
        let bareRouter = Router()
        bareRouter.get("/bare") { _, _ in #"{"status":"ok"}"# }
        let floorSource: FloorRoutes.Source
        var floorClient: PostgresClient?
        if let location {
            var options = PostgresClient.Configuration(
                host: location.host, port: location.port, username: location.user, password: location.password,
                database: location.database, tls: .disable)
            options.options.maximumConnections = connections
            let client = PostgresClient(configuration: options, backgroundLogger: logger)
            floorClient = client
            floorSource = .postgres(client)
        } else {
            floorSource = .sqlite(
                try SQLiteReaders(path: directory.appendingPathComponent("data.sqlite").path, count: 8))
        }
        let floorAnswers = FloorAnswers()
        FloorRoutes(source: floorSource, answers: floorAnswers).add(to: bareRouter)
        let bare = Application(
            router: bareRouter, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { ports.continuation.yield($0.localAddress?.port ?? 0) }, logger: logger)
        let application = server.application { _, port in ports.continuation.yield(port) }

        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await application.run() }
            group.addTask { try await bare.run() }
            if let floorClient { group.addTask { await floorClient.run() } }
            var iterator = ports.stream.makeAsyncIterator()
            var found: [Int] = []
            while found.count < 2, let port = await iterator.next() { found.append(port) }
            // Which port is which: the data service answers /health.
            let serverPort = try await isBaton(found[0]) ? found[0] : found[1]
            let barePort = serverPort == found[0] ? found[1] : found[0]
            let measured = try await measure(
                server: "http://127.0.0.1:\(serverPort)", bare: "http://127.0.0.1:\(barePort)", directory: directory,
                metrics: server.metrics, floorAnswers: floorAnswers,
                writesRetried: { server.writesRetried })
            let baseline = measured.bareRate
            if location != nil, let postgres = measured.batchPerChange {
                try await compareBatchWithSQLite(postgres: postgres)
            }
            if let location, only.map({ "key read".contains($0) }) ?? true {
                try await StatementCost(location: location).run()
            }
            if let location, instances > 0, only.map({ "100-change JSON batch".contains($0) }) ?? true {
                try await measureBehindNginx(
                    database: location, masterKeyFile: directory.appendingPathComponent("master.key"),
                    directory: directory, baseline: baseline)
            }
            group.cancelAll()
        }
    }

    func isBaton(_ port: Int) async throws -> Bool {
        let (_, response) = try await URLSession.shared.data(from: try url("http://127.0.0.1:\(port)/health"))
        return (response as? HTTPURLResponse)?.statusCode == 200
    }

    /// Runs the measurements and returns the bare route's rate, and the batch's server CPU a change when it ran.
    @discardableResult
    func measure(
        server: String, bare: String, directory: URL, metrics: ServerMetrics, floorAnswers: FloorAnswers,
        writesRetried: () -> Int
    ) async throws -> (bareRate: Double, batchPerChange: Double?) {
        var batchPerChange: Double?
        let auth = try await signIn(server)
        func answer(_ address: String, prefer: String? = nil) async throws -> Data {
            var request = URLRequest(url: try url(address))
            request.setValue(auth, forHTTPHeaderField: "Authorization")
            if let prefer { request.setValue(prefer, forHTTPHeaderField: "Prefer") }
            let (data, response) = try await URLSession.shared.data(for: request)
            guard (response as? HTTPURLResponse)?.statusCode == 200 else {
                throw ValidationError("GET \(address) did not answer 200.")
            }
            return data
        }
        func get(_ path: String, prefer: String? = nil) async throws -> [String: Any] {
            (try JSONSerialization.jsonObject(with: try await answer(server + "/odata/" + path, prefer: prefer))
                as? [String: Any]) ?? [:]
        }
        let sample = (try await get("PreflightChecks?$top=100&$select=ID")["value"] as? [[String: Any]] ?? [])
            .compactMap { $0["ID"] as? String }
        guard let key = sample.first, sample.count == 100 else { throw ValidationError("Seeded data is missing.") }
        let tracked = try await get("PreflightChecks?$top=1&$select=ID,FuelKg", prefer: "odata.track-changes")
        guard let deltaLink = tracked["@odata.deltaLink"] as? String else { throw ValidationError("No delta link.") }
        let batch = Self.batch(sample)
        var batchScript = Self.batchScript(batch)
        if disjoint {
            var sets: [[String]] = []
            for set in 0..<64 {
                sets.append(
                    (try await get("PreflightChecks?$top=100&$skip=\(set * 100)&$select=ID")["value"]
                        as? [[String: Any]]
                        ?? []).compactMap { $0["ID"] as? String })
            }
            batchScript = Self.disjointScript(sets, auth: auth)
        }
        // One batch first, so the delta page has 100 changes to report.
        var first = URLRequest(url: try url(server + "/odata/$batch"))
        first.httpMethod = "POST"
        first.setValue(auth, forHTTPHeaderField: "Authorization")
        first.setValue("application/json", forHTTPHeaderField: "Content-Type")
        first.httpBody = Data(batch.utf8)
        _ = try await URLSession.shared.data(for: first)

        let filtered = "PreflightChecks?$filter=FuelKg%20gt%2050000%20and%20Status%20eq%20'final'&$top=50"
        // Each floor sends the bytes the data service answers to its request.
        floorAnswers.set(.key, try await answer(server + "/odata/PreflightChecks(\(key))"))
        floorAnswers.set(.page, try await answer(server + "/odata/" + filtered))
        floorAnswers.set(.delta, try await answer(deltaLink))
        let sizes = floorAnswers.sizes
        // A client's trace context, as devices send it: the server reads it and logs its id.
        let traced = #"wrk.headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; "#
        // The last field: whether metrics and trace context are on (off for one run, to measure their cost).
        var runs: [(String, String, String, Bool)] = [
            ("bare Hummingbird route", bare + "/bare", "", true),
            ("health (no auth)", server + "/health", "", true),
            ("service document (auth)", server + "/odata/", "", true),
            ("floor: key read's rows", bare + "/floor/key/\(key)", traced, true),
            ("key read", server + "/odata/PreflightChecks(\(key))", traced, true),
            ("key read, no metrics/trace", server + "/odata/PreflightChecks(\(key))", traced, false),
            ("floor: filtered page's rows", bare + "/floor/page", "", true),
            ("filtered page of 50", server + "/odata/" + filtered, "", true),
            ("floor: delta page's rows", bare + "/floor/delta", "", true),
            ("delta page (100 changes)", deltaLink, "", true),
            ("100-change JSON batch", server + "/odata/$batch", batchScript, true),
        ]
        // On SQLite, a second floor under each page writes its rows as JSON the least way a writer can (what any
        // server answering with them does): GRDB's rows, which the plain floor fetches, cost more than that writing,
        // so it stands as high or higher, and a target above it cannot be met on this machine.
        var jsonSizes: [String: Int] = [:]
        if !onPostgres {
            for (after, name, path) in [
                ("floor: filtered page's rows", "floor: filtered page's rows as JSON", "/floor/page-json"),
                ("floor: delta page's rows", "floor: delta page's rows as JSON", "/floor/delta-json"),
            ] {
                guard let index = runs.firstIndex(where: { $0.0 == after }) else { continue }
                runs.insert((name, bare + path, "", true), at: index + 1)
                jsonSizes[name] = try await URLSession.shared.data(from: try url(bare + path)).0.count
            }
        }
        var baseline = 0.0
        // The share of the floor row measured last (the rows it bounds follow it).
        var floorShare: Double?
        print("\nwrk -t2 -c\(connections) -d\(duration)s over loopback, 2 cores shared with the server:\n")
        print(
            "request".padding(toLength: 28, withPad: " ", startingAt: 0)
                + "req/s    share   CPU/req  switches/req  cores: server / wrk  RSS MB"
                + (onPostgres ? "  PostgreSQL CPU/req" : ""))
        // Warm up both servers first (connections, caches, lazily built state): the first run measured cold
        // varied by a fifth.
        let warmUp = directory.appendingPathComponent("warm-up.lua")
        guard
            FileManager.default.createFile(
                atPath: warmUp.path, contents: Data(#"wrk.headers["Authorization"] = "\#(auth)""#.utf8),
                attributes: [.posixPermissions: 0o600])
        else { throw ValidationError("Cannot write \(warmUp.path).") }
        for url in [bare + "/bare", server + "/odata/PreflightChecks(\(key))"] {
            _ = try await NIOThreadPool.singleton.runIfActive { try wrk(url, script: warmUp, seconds: 2) }
        }
        let bareScript = directory.appendingPathComponent("bare.lua")
        guard FileManager.default.createFile(atPath: bareScript.path, contents: Data()) else {
            throw ValidationError("Cannot write \(bareScript.path).")
        }
        for (index, (name, url, script, telemetry)) in runs.enumerated()
        where index == 0 || only.map({ name.contains($0) }) ?? true {
            // The token goes in a private script file, never on wrk's command line. A floor receives the request
            // the rows it bounds receive — the token, and the key read's trace context — and reads neither: reading
            // them is part of any server's answer to that request.
            let header = name.hasPrefix("bare") ? "" : #"wrk.headers["Authorization"] = "\#(auth)"; "#
            let file = directory.appendingPathComponent("run-\(index).lua")
            guard
                FileManager.default.createFile(
                    atPath: file.path, contents: Data((header + script).utf8), attributes: [.posixPermissions: 0o600])
            else { throw ValidationError("Cannot write \(file.path).") }
            metrics.isEnabled = telemetry
            metrics.readsTraceContext = metrics.isEnabled
            // Every row after the first is measured in slices, each right after a slice of the bare route, and its
            // share is against those: the machine's speed drifts within a run, and against one bare measurement
            // at the start the same binary's key read ranged from 37% to 61% of it in one hour.
            let reference = index == 0
            // The bare route's own row is one slice of the whole duration.
            let parts = reference ? 1 : max(1, slices)
            let sliceSeconds = max(1, duration / parts)
            var requests = 0.0
            var bareRequests = 0.0
            var used = CPUTime.zero
            var postgresUsed = 0.0
            let retriedBefore = writesRetried()
            for _ in 0..<parts {
                if !reference {
                    let bareRate = try await NIOThreadPool.singleton.runIfActive {
                        try wrk(bare + "/bare", script: bareScript, seconds: sliceSeconds)
                    }
                    bareRequests += bareRate * Double(sliceSeconds)
                }
                let before = CPUTime.now()
                let postgresBefore = onPostgres ? ProcessCPU.postgres() : 0
                let sliceRate = try await NIOThreadPool.singleton.runIfActive {
                    try wrk(url, script: file, seconds: sliceSeconds)
                }
                used = used + (CPUTime.now() - before)
                if onPostgres { postgresUsed += ProcessCPU.postgres() - postgresBefore }
                requests += sliceRate * Double(sliceSeconds)
            }
            let seconds = Double(parts * sliceSeconds)
            let rate = requests / seconds
            if baseline == 0 { baseline = rate }
            let rowBaseline = reference ? rate : bareRequests / seconds
            let share = rowBaseline > 0 ? String(format: "%5.1f%%", rate / rowBaseline * 100) : "-"
            if name.hasPrefix("floor") { floorShare = rowBaseline > 0 ? rate / rowBaseline * 100 : nil }
            // What each request cost the server, and how much of the two cores each side used.
            print(
                name.padding(toLength: 28, withPad: " ", startingAt: 0)
                    + String(
                        format: "%-8.0f %@  %7.1f µs  %5.2f  %5.2f / %4.2f", rate, share, used.server / requests * 1e6,
                        used.switches / requests, used.server / seconds, used.generator / seconds)
                    + String(format: "  %4.0f", memoryMegabytes("VmRSS"))
                    + (onPostgres && !name.hasPrefix("bare")
                        ? String(format: "  %7.1f µs", postgresUsed / requests * 1e6) : "")
                    + Self.verdict(
                        name, share: rowBaseline > 0 ? rate / rowBaseline * 100 : 0,
                        cpuPerRequest: used.server / requests * 1e6, postgres: onPostgres, floor: floorShare,
                        answerBytes: jsonSizes[name] ?? Self.floorRead(name).flatMap { sizes[$0] }))
            if name == "100-change JSON batch", requests > 0 { batchPerChange = used.server / requests * 1e6 / 100 }
            if onPostgres, name.hasPrefix("100-change") {
                // Each batch that PostgreSQL refused for a serialization failure ran again, all its statements anew.
                let retried = writesRetried() - retriedBefore
                print(
                    "".padding(toLength: 28, withPad: " ", startingAt: 0)
                        + String(
                            format: "%d writes run again after a conflict with another transaction (%.2f a batch "
                                + "answered)", retried, requests > 0 ? Double(retried) / requests : 0))
            }
        }
        metrics.isEnabled = true
        metrics.readsTraceContext = true
        if !onPostgres, only.map({ "100-change JSON batch".contains($0) }) ?? true {
            let data = directory.appendingPathComponent("data.sqlite")
            // Each floor's CPU a change, then what it measured.
            func report(_ name: String, _ microseconds: Double, _ what: String) {
                print(
                    name.padding(toLength: 28, withPad: " ", startingAt: 0)
                        + String(format: "%.1f µs a change of CPU (", microseconds) + what)
            }
            report(
                "plain GRDB, the batch's statements", try databaseFloor(data, ids: sample),
                "100 × read by key + update of 5 columns, one transaction, synchronous FULL): the database's share of "
                    + "a change, below which no batch goes")
            let log = directory.appendingPathComponent("server.sqlite")
            report(
                "…and their audit entries", try databaseFloor(data, audit: .outbox(log: log), ids: sample),
                "the same, and each change's audit entry as the server keeps it: into the outbox in the change's "
                    + "transaction, into the log in one of its own, out of the outbox with the next; 100 rows a "
                    + "statement): what the database must do for a change, below which no batch goes")
            let together = try databaseFloor(data, audit: .sameTransaction(schemaFrom: log), ids: sample)
            report(
                "…entries in the same file", together,
                "the plain statements, and each change's audit entry in the change's own transaction, into a table "
                    + "of the log's schema and indexes in the data file; 100 rows a statement): the least a change "
                    + "with its entry can cost the database, however the log is kept — "
                    + (together > 30
                        ? "above the 30 µs target, which this run cannot show"
                        : "below the 30 µs target: the rest is Baton's own cost"))
        } else if let location = try databaseLocation(), only.map({ "100-change JSON batch".contains($0) }) ?? true {
            let floor = try await PostgresBatchFloor(location: location, ids: sample).run()
            func report(_ name: String, _ cost: PostgresBatchFloor.Cost, _ what: String) {
                print(
                    name.padding(toLength: 28, withPad: " ", startingAt: 0)
                        + String(format: "%.1f µs a change of CPU, PostgreSQL %.1f µs (", cost.client, cost.postgres)
                        + what + " — " + (cost.client > 60 ? "above" : "below") + " the 60 µs target")
            }
            report(
                "plain postgres-nio, batch", floor.perChange,
                "the batch's checks read in one statement, one UPDATE a change, the audit entries in one statement, "
                    + "one REPEATABLE READ transaction of 100, prepared): the least a change costs with a statement "
                    + "of its own")
            report(
                "…updates merged", floor.merged,
                "the same with the 100 updates in one UPDATE … FROM unnest(…): what merging a batch's changes "
                    + "into one statement would leave")
        }
        print(
            "\nTargets (issue 37), each row's after it: shares of the bare route, and server CPU per change of a "
                + "100-change batch (SQLite ≤ 30 µs; PostgreSQL ≤ twice SQLite's: 60 µs, twice SQLite's target, in its row, "
                + "and twice SQLite's CPU a change measured after it, in the comparison). A floor row is the bare "
                + "route reading the next rows' columns and rows plainly — "
                + (onPostgres ? "a plain postgres-nio client, prepared" : "plain GRDB on the server's file, in place")
                + " — for the request those rows receive (their token, and the key read's trace context; read by neither), and "
                + "sending the bytes the data service answered to it: no token checked, no OData, no JSON written. A "
                + "target above its floor's share "
                + "cannot be met on this machine; one below it is Baton's own cost to cut."
                + (onPostgres
                    ? " On PostgreSQL the plain client is a comparison, not a strict floor: Baton's own connection "
                        + "holders can do better than it (they did on key reads)." : ""))
        return (baseline, batchPerChange)
    }

    /// PostgreSQL's batch target is twice SQLite's CPU a change: the same batch on SQLite, measured right after by
    /// this program in a process of its own (no database URL; the same checks, connections, duration and slices),
    /// and the ratio of the two. The child's own rows (its bare route, its batch, its floors) are printed indented.
    func compareBatchWithSQLite(postgres: Double) async throws {
        guard let executable = Bundle.main.executableURL else { return }
        var arguments = [
            "--checks", String(checks), "--duration", String(duration), "--connections", String(connections),
            "--slices", String(slices), "--only", "100-change JSON batch",
        ]
        if disjoint { arguments.append("--disjoint") }
        var environment = ProcessInfo.processInfo.environment
        environment["BATON_DATABASE_URL"] = nil
        print("\nThe same batch on SQLite, measured now by a process of its own:")
        let (childArguments, childEnvironment) = (arguments, environment)
        let text = try await NIOThreadPool.singleton.runIfActive {
            let process = Process()
            process.executableURL = executable
            process.arguments = childArguments
            process.environment = childEnvironment
            let output = Pipe()
            process.standardOutput = output
            // Its log (batches cancelled in flight as it stops) into a file, shown only when it fails.
            let logFile = FileManager.default.temporaryDirectory.appendingPathComponent(
                "baton-bench-sqlite-\(UUID().uuidString).log")
            guard FileManager.default.createFile(atPath: logFile.path, contents: nil),
                let errors = FileHandle(forWritingAtPath: logFile.path)
            else { throw ValidationError("Cannot write \(logFile.path).") }
            defer {
                try? errors.close()
                try? FileManager.default.removeItem(at: logFile)
            }
            process.standardError = errors
            try process.run()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            let log = (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
            guard process.terminationStatus == 0 else {
                throw ValidationError("The SQLite run failed (\(process.terminationStatus)):\n\(text)\n\(log)")
            }
            return text
        }
        for line in text.split(separator: "\n")
        where line.hasPrefix("bare") || line.hasPrefix("100-change") || line.hasPrefix("plain")
            || line.hasPrefix("…")
        {
            print("  " + line)
        }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("100-change JSON batch") }),
            let range = line.range(of: #"[0-9.]+ µs a change"#, options: .regularExpression),
            let sqlite = Double(line[range].split(separator: " ")[0]), sqlite > 0
        else { throw ValidationError("Cannot read the SQLite run's batch:\n\(text)") }
        let ratio = postgres / sqlite
        print(
            String(
                format: "PostgreSQL / SQLite, CPU a change of the batch: %.1f / %.1f µs = %.2f×, target ≤ 2×: %@",
                postgres, sqlite, ratio, ratio <= 2 ? "met" : "NOT MET"))
    }

    /// What the database alone spends on a change of the 100-change batch, in CPU microseconds of this process: on
    /// the server's own data file (its writer idle by now), each transaction reads the 100 checks by key and updates
    /// the columns a PATCH of `Remarks` changes (the value, the three the server keeps, the sequence), with the
    /// server's settings (WAL, synchronous FULL), statements prepared once. Nothing of HTTP, JSON, OData or audit.
    ///
    /// With `audit` (the server's own file), each change also keeps its audit entry as the server does: the entry
    /// goes into the data file's outbox in the change's transaction, into the log in a transaction of the log's own
    /// after the commit, and out of the outbox with the next transaction — 100 rows a statement, as the server writes
    /// them. What a change must cost the database for its entry to survive a crash between the two files.
    ///
    /// With ``AuditFloor/sameTransaction(schemaFrom:)``, each change's entry goes into a table of the log's own
    /// schema and indexes (read from the server's file, so it follows the log's migrations) made in the data file,
    /// in the change's transaction: no outbox, no second commit. The cheapest way a change and its entry can commit
    /// together, whatever Baton's own layout.
    func databaseFloor(_ file: URL, audit: AuditFloor = .none, ids: [String]) throws -> Double {
        var configuration = Configuration()
        configuration.busyMode = .timeout(5)
        let queue = try DatabaseQueue(path: file.path, configuration: configuration)
        defer { try? queue.close() }
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        var log: DatabaseQueue?
        var inline: String?
        switch audit {
        case .none: break
        case .outbox(let url):
            log = try DatabaseQueue(path: url.path, configuration: configuration)
            try log?.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
        case .sameTransaction(let url):
            inline = try Self.copyLogSchema(from: url, into: queue, configuration: configuration)
        }
        defer {
            try? log?.close()
            if let inline { try? queue.write { db in try db.execute(sql: "DROP TABLE \(inline)") } }
        }
        let keepsEntries = log != nil || inline != nil
        // 100 transactions (10,000 changes): with 40, one run's figure ranged from 38 to 63 µs in one hour.
        let rounds = 100
        var sequence: Int64 = 1 << 40
        var recorded: [String] = []
        let prefix = UUID().uuidString
        func rows(_ count: Int) -> String {
            Array(repeating: "(?, ?, ?, ?, ?, ?, ?)", count: count).joined(separator: ", ")
        }
        let before = CPUTime.now()
        for _ in 0..<rounds {
            var entries: [(any DatabaseValueConvertible)?] = []
            var keys: [String] = []
            try queue.write { db in
                let select = try db.cachedStatement(sql: #"SELECT * FROM "PreflightChecks" WHERE "ID" = ?"#)
                let update = try db.cachedStatement(
                    sql:
                        #"UPDATE "PreflightChecks" SET "Remarks" = ?, "ChangedAt" = ?, "CheckedBy" = ?, "UploadedBy" = ?, "$seq" = ? WHERE "ID" = ?"#
                )
                for id in ids {
                    sequence += 1
                    _ = try Row.fetchOne(select, arguments: [id])
                    try update.execute(
                        arguments: ["floor", "2026-11-27T03:00:00.000000000000Z", "bench", "bench", sequence, id])
                    guard keepsEntries else { continue }
                    let key = prefix + ":" + String(sequence)
                    keys.append(key)
                    entries += [
                        key, Date().timeIntervalSince1970, "bench", "entity-updated", "PreflightChecks(\(id))",
                        "127.0.0.1", "uploaded by bench",
                    ]
                }
                if let inline {
                    // The log's columns, with no outbox key: nothing is left to move to another file.
                    var logged: [(any DatabaseValueConvertible)?] = []
                    for start in stride(from: 0, to: entries.count, by: 7) {
                        logged += entries[(start + 1)..<(start + 7)]
                    }
                    try db.cachedStatement(
                        sql: "INSERT INTO \(inline) (at, actor, action, subject, address, detail) VALUES "
                            + Array(repeating: "(?, ?, ?, ?, ?, ?)", count: keys.count).joined(separator: ", ")
                    ).execute(arguments: StatementArguments(logged))
                    return
                }
                guard log != nil else { return }
                if !recorded.isEmpty {
                    try db.cachedStatement(
                        sql: #"DELETE FROM "$auditOutbox" WHERE key IN ("#
                            + Array(repeating: "?", count: recorded.count).joined(separator: ", ") + ")"
                    ).execute(arguments: StatementArguments(recorded))
                }
                try db.cachedStatement(
                    sql: #"INSERT INTO "$auditOutbox" (key, at, actor, action, subject, address, detail) VALUES "#
                        + rows(keys.count)
                ).execute(arguments: StatementArguments(entries))
            }
            try log?.write { db in
                // The log's columns in the outbox's order, the outbox key last.
                var logged: [(any DatabaseValueConvertible)?] = []
                for start in stride(from: 0, to: entries.count, by: 7) {
                    logged += entries[(start + 1)..<(start + 7)] + [entries[start]]
                }
                try db.cachedStatement(
                    sql: "INSERT INTO audit (at, actor, action, subject, address, detail, outboxKey) VALUES "
                        + rows(keys.count) + " ON CONFLICT DO NOTHING"
                ).execute(arguments: StatementArguments(logged))
            }
            recorded = keys
        }
        return (CPUTime.now() - before).server / Double(rounds * ids.count) * 1e6
    }

    /// Where ``databaseFloor(_:audit:ids:)`` keeps each change's audit entry.
    enum AuditFloor {
        /// No entry: the batch's statements alone.
        case none
        /// As the server keeps it: the data file's outbox, then the log's own file (`log`).
        case outbox(log: URL)
        /// In the change's transaction, into a copy of the log's table (its schema read from `schemaFrom`).
        case sameTransaction(schemaFrom: URL)
    }

    /// Makes, in `queue`'s file, an empty table with the schema and indexes of the `audit` table in the file at
    /// `url` (each statement as SQLite keeps it, the table's and the indexes' names changed), and returns its quoted
    /// name.
    static func copyLogSchema(from url: URL, into queue: DatabaseQueue, configuration: Configuration) throws -> String {
        let source = try DatabaseQueue(path: url.path, configuration: configuration)
        defer { try? source.close() }
        let statements = try source.read { db in
            try String.fetchAll(
                db,
                sql: "SELECT sql FROM sqlite_master WHERE tbl_name = 'audit' AND sql IS NOT NULL "
                    + "ORDER BY type = 'table' DESC, name")
        }
        guard let table = statements.first, table.hasPrefix("CREATE TABLE audit ") else {
            throw ValidationError("The server's file has no audit table to copy.")
        }
        let name = #""$floorAudit""#
        try queue.write { db in
            try db.execute(sql: "DROP TABLE IF EXISTS \(name)")
            try db.execute(sql: "CREATE TABLE \(name) " + table.dropFirst("CREATE TABLE audit ".count))
            for index in statements.dropFirst() {
                // "CREATE [UNIQUE] INDEX name ON audit (…)": the index gets a name of its own, on the copy.
                guard let on = index.range(of: " ON audit ") else {
                    throw ValidationError("An audit index the floor cannot copy: \(index)")
                }
                let head = index[..<on.lowerBound].replacingOccurrences(of: " INDEX ", with: " INDEX floor_")
                try db.execute(sql: head + " ON \(name) " + index[on.upperBound...])
            }
        }
        return name
    }

    /// Each measured row's target, and whether this run met it.
    static func verdict(
        _ name: String, share: Double, cpuPerRequest: Double, postgres: Bool, floor: Double?, answerBytes: Int? = nil
    ) -> String {
        if name.hasPrefix("floor"), name.hasSuffix(" as JSON") {
            return "  the same, the rows written as JSON the least way (\(answerBytes ?? 0) bytes: each column's bytes "
                + "copied, quoted by type, nothing checked or escaped): what any server answering with them does"
        }
        if name.hasPrefix("floor") {
            return "  the same request; the rows read plainly and the data service's answer sent "
                + "(\(answerBytes ?? 0) bytes): no token checked, no OData, no JSON written"
        }
        let shares: [String: (sqlite: Double, postgres: Double)] = [
            "key read": (57, 25), "key read, no metrics/trace": (60, 25), "filtered page of 50": (30, 10),
            "delta page (100 changes)": (25, 8),
        ]
        if let target = shares[name] {
            let wanted = postgres ? target.postgres : target.sqlite
            let verdict = String(format: "  target ≥ %.0f%%: %@", wanted, share >= wanted ? "met" : "NOT MET")
            guard let floor else { return verdict }
            return verdict
                + String(
                    format: floor < wanted ? " (its floor, %.1f%%, is below it)" : " (its floor: %.1f%%)", floor)
        }
        if name == "100-change JSON batch" {
            let perChange = cpuPerRequest / 100
            let wanted: Double = postgres ? 60 : 30
            return String(
                format: "  %.1f µs a change, target ≤ %.0f µs%@: %@", perChange, wanted,
                postgres ? " (twice SQLite's target)" : "", perChange <= wanted ? "met" : "NOT MET")
        }
        return ""
    }

    /// The read whose answer a floor row sends.
    static func floorRead(_ name: String) -> FloorAnswers.Read? {
        if name.hasPrefix("floor: key") { return .key }
        if name.hasPrefix("floor: filtered") { return .page }
        if name.hasPrefix("floor: delta") { return .delta }
        return nil
    }

    /// Whether the measured server runs on PostgreSQL.
    var onPostgres: Bool { (try? databaseLocation()) != nil }

    /// Signs in as the benchmark's user and returns the `Authorization` header value.
    func signIn(_ server: String) async throws -> String {
        var tokenRequest = URLRequest(url: try url(server + "/oauth/token"))
        tokenRequest.httpMethod = "POST"
        tokenRequest.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        tokenRequest.httpBody = Data(
            "grant_type=password&client_id=baton-device&username=bench&password=load-generator-secret-1".utf8)
        let token =
            try JSONSerialization.jsonObject(with: try await URLSession.shared.data(for: tokenRequest).0)
            as? [String: Any]
        guard let accessToken = token?["access_token"] as? String else {
            throw ValidationError("Cannot sign in to the server.")
        }
        return "Bearer \(accessToken)"
    }

    /// A `$batch` of 100 PATCHes, one atomicity group.
    static func batch(_ ids: [String]) -> String {
        "{\"requests\":["
            + ids.enumerated().map { index, id in
                #"{"id":"\#(index)","atomicityGroup":"g","method":"PATCH","url":"PreflightChecks(\#(id))","headers":{"If-Match":"*"},"body":{"Remarks":"bench"}}"#
            }.joined(separator: ",") + "]}"
    }

    /// A wrk script whose batches each change checks of their own: 64 sets of 100, each wrk thread cycling through
    /// 32 of its own, so its 8 connections' batches in flight are 8 consecutive sets and no two share a check.
    static func disjointScript(_ sets: [[String]], auth: String) -> String {
        let bodies = sets.map { "[[" + batch($0) + "]]" }
        return """
            bodies = {\(bodies.joined(separator: ","))}
            threads = 0
            function setup(thread) thread:set("first", threads * 32); threads = threads + 1 end
            n = 0
            function request()
                n = n + 1
                return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Authorization"] = "\(auth)"}, bodies[first + (n % 32) + 1])
            end
            """
    }

    static func batchScript(_ batch: String) -> String {
        #"wrk.method = "POST"; wrk.headers["Content-Type"] = "application/json"; wrk.body = [[\#(batch)]]"#
    }

    func url(_ text: String) throws -> URL {
        guard let url = URL(string: text) else { throw ValidationError("Not a URL: \(text)") }
        return url
    }

    /// Runs wrk with a Lua script and returns its requests per second. Blocks until wrk is done: call it on a
    /// thread of NIO's pool, never on one that serves requests.
    func wrk(_ url: String, script: URL, seconds: Int? = nil) throws -> Double {
        try Self.wrk(url, script: script, connections: connections, seconds: seconds ?? duration)
    }

    /// Runs wrk (two threads) with `script` against `url` and returns its requests per second; any error answer
    /// fails the run.
    static func wrk(_ url: String, script: URL, connections: Int, seconds: Int) throws -> Double {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/wrk")
        process.arguments = ["-t2", "-c\(connections)", "-d\(seconds)s", "-s", script.path, url]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        if text.contains("Non-2xx or 3xx responses") {
            throw ValidationError("wrk saw error responses for \(url):\n\(text)")
        }
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("Requests/sec:") }),
            let rate = Double(line.split(separator: " ").last ?? "")
        else { throw ValidationError("Cannot read wrk's output:\n\(text)") }
        return rate
    }
}
