import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSQL
import BatonSQLGRDB
import BatonSecureStore
import BatonTesting
import Crypto
import Foundation
import GRDB

/// `baton-bench --offline`: the offline store against a live server on loopback — initial download of the
/// seeded checks, upload of queued changes, a local filtered query, opening the store — next to baselines
/// measured in the same run: the same rows inserted in one transaction into a plain GRDB database and into
/// the encrypted store.
struct OfflineBenchmark {
    let checks: Int
    let changes: Int

    func run() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        // A supervisor: the upload corrects seeded checks that others recorded, which ground staff may not.
        try await server.addUser(
            "bench", displayName: "Bench", role: .supervisor, password: "load-generator-secret-1")
        _ = try await server.server.seed(aircraft: 200, checks: checks)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-offline-bench-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (manager, session) = try await server.onboardSingleUserDevice(
            "bench", password: "load-generator-secret-1", passcode: "12345678", directory: directory)
        let key = SymmetricKey(data: session.storeKey ?? Data(count: 32))
        let user = OfflineUser(name: "bench", signingKey: try session.signingKey())
        let model = try ServiceModel.aircraftChecks
        let clock = ContinuousClock()
        print("Offline store, \(checks) checks, \(changes) changes, server on loopback in the same process:\n")

        // Baselines: the rows the server has, inserted in one transaction, plain and into an encrypted store. The
        // plain insert, the encrypted insert and the initial download (each into a new file) take turns three
        // times, and each ratio is the median of the three rounds': this machine's speed drifts within a run, and
        // one of each measured minutes apart told 0.69 and 1.08 on the same build. The encrypted insert is the
        // download's floor: a download writes into the encrypted store, which a plain GRDB file is not.
        let rows = try await fetchAllRows(server: server, session: session, model: model)
        var plainRates: [Double] = []
        var encryptedRates: [Double] = []
        var downloadRates: [Double] = []
        var store: OfflineStore?
        for round in 0..<3 {
            let plainTime = try clock.measure {
                try insert(
                    rows, model: model, into: directory.appendingPathComponent("plain-\(round).sqlite"), key: nil)
            }
            plainRates.append(Double(rows.count) / seconds(plainTime))
            let encryptedTime = try await insertEncrypted(
                rows, model: model, into: directory.appendingPathComponent("encrypted-\(round).sqlite"), key: key,
                user: user)
            encryptedRates.append(Double(rows.count) / seconds(encryptedTime))
            let roundStore = try OfflineStore(
                url: directory.appendingPathComponent("offline-\(round).sqlite"), model: model,
                deviceID: manager.deviceID, definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")])
            try await roundStore.open(as: user, key: key)
            let downloadTime = try await clock.measure { _ = try await roundStore.download(using: session.authorized) }
            downloadRates.append(Double(checks) / seconds(downloadTime))
            if round == 0 { store = roundStore } else { await roundStore.close() }
        }
        guard let store else { throw BenchmarkFailure("no store was downloaded") }
        func byRound(_ numerators: [Double], _ denominators: [Double]) -> (rounds: String, median: Double) {
            let ratios = zip(numerators, denominators).map { $0 / $1 }
            return (ratios.map { String(format: "%.2f", $0) }.joined(separator: "  "), ratios.sorted()[1])
        }
        let plainRate = plainRates.sorted()[1]
        let encryptedRate = encryptedRates.sorted()[1]
        let downloadRate = downloadRates.sorted()[1]
        line("insert baseline, plain GRDB", rate: plainRate, unit: "rows/s (median of 3)")
        line("insert baseline, encrypted", rate: encryptedRate, unit: "rows/s (median of 3)")
        line("initial download", rate: downloadRate, unit: "entities/s (median of 3)")
        let overPlain = byRound(downloadRates, plainRates)
        print(
            pad("download / plain insert, by round") + overPlain.rounds
                + String(
                    format: "   median %.2f (target ≥ 1.0: %@)", overPlain.median,
                    overPlain.median >= 1 ? "met" : "NOT MET"))
        let floor = byRound(encryptedRates, plainRates)
        print(
            pad("encrypted / plain insert, by round") + floor.rounds
                + String(format: "   median %.2f (the download's floor: it writes encrypted)", floor.median))
        let overFloor = byRound(downloadRates, encryptedRates)
        print(
            pad("download / encrypted insert")
                + overFloor.rounds + String(format: "   median %.2f", overFloor.median))

        // Local queries.
        let ids = try await store.read("PreflightChecks?$select=ID&$top=1000").map(\.id)
        var keyTimes: [Duration] = []
        var filterTimes: [Duration] = []
        for (index, id) in ids.prefix(500).enumerated() {
            keyTimes.append(try await clock.measure { _ = try await store.read(id) })
            let filter = "PreflightChecks?$filter=FuelKg gt \(40_000 + index * 10) and Status eq 'final'&$top=50"
            filterTimes.append(try await clock.measure { _ = try await store.read(filter) })
        }
        print(pad("local key read") + String(format: "%10.3f ms p50", median(keyTimes) * 1000))
        print(pad("local filtered page of 50") + String(format: "%10.3f ms p50", median(filterTimes) * 1000))

        // Offline updates (a signed PATCH with the entity's ETag each), queued one by one, then uploaded.
        var updateTimes: [Duration] = []
        func queueUpdate(_ id: String) async throws {
            updateTimes.append(
                try await clock.measure { try await store.update(id, values: ["Remarks": .string("bench")]) })
        }
        for id in ids.prefix(changes) { try await queueUpdate(id) }
        var remaining = changes
        while remaining > ids.count {
            let extra = try await store.read(
                "PreflightChecks?$select=ID&$skip=\(changes - remaining + ids.count)&$top=1000")
            for entity in extra.prefix(remaining - ids.count) { try await queueUpdate(entity.id) }
            remaining -= min(extra.count, remaining - ids.count)
            if extra.isEmpty { break }
        }
        print(
            pad("offline update queued") + String(format: "%10.3f ms p50   (target ≤ 2 ms)", median(updateTimes) * 1000)
        )
        let updateRate = try await uploadQueue(store, session: session, clock: clock, what: "updates")

        // Offline creates of as many new checks, queued and uploaded the same way: the baseline of the updates.
        let tails = try await store.read("PreflightChecks?$select=TailNumber&$top=200").compactMap {
            $0.values["TailNumber"]
        }
        var createTimes: [Duration] = []
        for index in 0..<changes {
            let values: [String: PrimitiveValue] = [
                "ID": .guid(UUID()), "TailNumber": tails[index % max(1, tails.count)],
                "FuelKg": .decimal(Decimal(5_000 + index % 1_000)), "TyrePressureMainPsi": .decimal(200),
                "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15), "Status": .string("final"),
            ]
            createTimes.append(
                try await clock.measure { _ = try await store.create(in: "PreflightChecks", values: values) })
        }
        print(pad("offline create queued") + String(format: "%10.3f ms p50", median(createTimes) * 1000))
        let createRate = try await uploadQueue(store, session: session, clock: clock, what: "creates")
        print(
            pad("updates / creates upload rate")
                + String(format: "%10.2f     (target ≈ 1: updates upload as fast as creates)", updateRate / createRate))

        // Opening.
        await store.close()
        let openTime = try await clock.measure { try await store.open(as: user, key: key) }
        print(pad("open the store") + String(format: "%10.1f ms", seconds(openTime) * 1000))

        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        print(pad("peak memory (client and server)") + String(format: "%10.0f MB", Double(usage.ru_maxrss) / 1024))
        let child = try downloadInChildProcess(server: server)
        line("download, client in own process", rate: child.rate, unit: "entities/s")
        print(pad("peak memory of that client") + String(format: "%10.0f MB", child.peakMB) + "   (target ≤ 150 MB)")
        print(
            String(
                format: "\nencryption overhead %.1f%% (target ≤ 15%%; against the median plain insert)",
                (plainRate / encryptedRate - 1) * 100))
        print("Targets: download ≥ 50,000 entities/s; upload ≥ 5,000 changes/s; indexed local query p50 ≤ 2 ms.")
    }

    /// Uploads the whole queue and returns its rate; every change must apply (a refusal goes to the error
    /// archive, another and slower path, so the run stops instead).
    func uploadQueue(_ store: OfflineStore, session: OnboardingSession, clock: ContinuousClock, what: String)
        async throws -> Double
    {
        let queued = try await store.pendingEntries().count
        var report = UploadReport()
        let uploadTime = try await clock.measure {
            report = try await store.upload(using: session.authorized, allowOnBehalf: true)
        }
        guard report.uploaded.count == queued, report.archived.isEmpty else {
            throw BenchmarkFailure(
                "The upload applied \(report.uploaded.count) of \(queued) \(what); first refusal: "
                    + (report.archived.first.map { "\($0.code): \($0.message)" } ?? "none"))
        }
        let rate = Double(queued) / seconds(uploadTime)
        line("upload of \(queued) \(what)", rate: rate, unit: "changes/s")
        return rate
    }

    /// What the child process reports.
    struct ChildReport: Codable {
        var server: String?
        var password: String?
        var entities = 0
        var rate = 0.0
        var peakMB = 0.0
    }

    /// Runs the initial download in a child process (this executable with `--download-client`), so its peak
    /// memory is the client's alone. The password goes to the child on standard input.
    func downloadInChildProcess(server: LiveServer) throws -> ChildReport {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL
        process.arguments = ["--download-client"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        let request = ChildReport(server: server.url.absoluteString, password: "load-generator-secret-1")
        input.fileHandleForWriting.write(try JSONEncoder().encode(request))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw BenchmarkFailure("the download client failed") }
        return try JSONDecoder().decode(ChildReport.self, from: data)
    }

    /// `--download-client`: onboards a new device as the bench user and downloads every check, then reports
    /// the rate and this process's peak memory as JSON.
    static func downloadClient() async throws {
        let request = try JSONDecoder().decode(
            ChildReport.self, from: FileHandle.standardInput.readDataToEndOfFile())
        guard let server = request.server.flatMap(URL.init(string:)), let password = request.password else {
            throw BenchmarkFailure("no server or password on standard input")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-client-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = FlowsConfiguration(mode: .singleUser)
        configuration.keyDerivation = { KeyDerivation(cost: 1 << 10) }
        let manager = try OnboardingSessionManager(
            serverURL: server, directory: directory, configuration: configuration,
            presenter: ScriptedPresenter([
                .credentials("bench", password), .newPasscode("12345678", confirmation: "12345678"),
            ]))
        let session = try await manager.open()
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: manager.deviceID, definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")])
        try await store.open(
            as: OfflineUser(name: "bench", signingKey: try session.signingKey()),
            key: SymmetricKey(data: session.storeKey ?? Data(count: 32)))
        let clock = ContinuousClock()
        var report = DownloadReport()
        let time = try await clock.measure { report = try await store.download(using: session.authorized) }
        await store.close()
        let seconds = Double(time.components.seconds) + Double(time.components.attoseconds) / 1e18
        let result = ChildReport(
            entities: report.updated, rate: Double(report.updated) / seconds, peakMB: peakResidentMB())
        FileHandle.standardOutput.write(try JSONEncoder().encode(result))
    }

    /// This process's peak resident memory (VmHWM). Not `ru_maxrss`: on Linux a child started by fork and exec
    /// inherits the parent's high-water mark there.
    static func peakResidentMB() -> Double { memoryMegabytes("VmHWM") }

    func line(_ name: String, rate: Double, unit: String) {
        print(pad(name) + String(format: "%10.0f ", rate) + unit)
    }

    func pad(_ name: String) -> String { name.padding(toLength: 36, withPad: " ", startingAt: 0) }

    func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    func median(_ values: [Duration]) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? 0 : seconds(sorted[sorted.count / 2])
    }

    /// Every check as the server has it, decoded once (the baselines insert these).
    func fetchAllRows(server: LiveServer, session: OnboardingSession, model: ServiceModel) async throws
        -> [[String: PrimitiveValue]]
    {
        guard let set = model.entitySet(named: "PreflightChecks"), let type = model.entityType(of: set) else {
            return []
        }
        var rows: [[String: PrimitiveValue]] = []
        var next: String? = server.url.absoluteString + "/odata/PreflightChecks"
        while let link = next, let url = URL(string: link) {
            let response = try await session.authorized.send(
                ClientRequest(url: url, headers: [("Prefer", "odata.maxpagesize=5000")]))
            let page = try JSONValue(parsing: response.body)
            for item in page["value"]?.arrayValue ?? [] {
                var values: [String: PrimitiveValue] = [:]
                for property in type.properties {
                    if let json = item[property.name] {
                        values[property.name] = try PrimitiveValue(json: json, for: property)
                    }
                }
                rows.append(values)
            }
            next = page["@odata.nextLink"]?.stringValue
        }
        return rows
    }

    func insert(_ rows: [[String: PrimitiveValue]], model: ServiceModel, into url: URL, key: SymmetricKey?) throws {
        // The same journal mode as the store (WAL), so the comparison measures encryption alone.
        var configuration = Configuration()
        configuration.journalMode = .wal
        let queue = try DatabaseQueue(path: url.path, configuration: configuration)
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let sql = try translator.insert(into: "PreflightChecks", values: [:]).sql
        try queue.write { db in
            for statement in SQLSchema(model: model, dialect: .sqlite).createStatements() {
                try db.execute(sql: statement)
            }
            // Prepared once, bound per row: the fastest plain insert, as the baseline should be.
            let statement = try db.cachedStatement(sql: sql)
            for row in rows {
                let arguments = try translator.insertArguments(into: "PreflightChecks", values: row, systemValues: [])
                try statement.execute(
                    arguments: StatementArguments(arguments.map { $0.databaseValue } as [DatabaseValue]))
            }
        }
        try queue.close()
    }

    /// The same insert into an encrypted store (through its VFS), measured around one transaction.
    func insertEncrypted(
        _ rows: [[String: PrimitiveValue]], model: ServiceModel, into url: URL, key: SymmetricKey, user: OfflineUser
    ) async throws -> Duration {
        let store = try OfflineStore(
            url: url, model: model, deviceID: "bench",
            definingQueries: [])
        try await store.open(as: user, key: key)
        let time = try await store.measureBulkInsert(rows, into: "PreflightChecks")
        await store.close()
        return time
    }
}

struct BenchmarkFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
