import BatonOData
import BatonOffline
import Crypto
import Foundation

/// Disk faults in the encrypted offline store. Each trial runs a writer process (`baton-chaos disk-writer`) that
/// records and corrects checks in a store of its own — closing and opening it now and then, as a user switch does,
/// which checkpoints the write-ahead log into the database — while the VFS injects one fault: a full disk, a short
/// write, a failed `fsync`, or the process's death right after a page write, in the middle of one, or right after
/// an `fsync`. The writer prints what it tries and what the store answered. Afterwards the store is opened here and
/// must pass `PRAGMA integrity_check`; every change reported recorded must be there with its queued upload, no
/// change reported failed may be, and the store must take a new change.
public struct DiskChaos: Sendable {
    public var trials: Int
    public var seed: UInt64
    /// The `baton-chaos` executable, whose `disk-writer` command each trial runs.
    public var binary: URL

    public init(trials: Int, seed: UInt64, binary: URL) {
        self.trials = trials
        self.seed = seed
        self.binary = binary
    }

    static let writes = 24
    static let reopenEvery = 8

    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> ChaosReport {
        var random = SplitMix64(seed: seed)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-disk-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        // A trial without faults, for each way of checkpointing, counts the writes and syncs a trial makes: the
        // faults strike within them.
        var operations: [Int: (writes: Int, syncs: Int)] = [:]
        for checkpoint in DiskWriterInput.checkpoints {
            let calibration = try await trial(
                DiskWriterInput(fault: nil, after: 0, failures: 0, seed: seed, checkpoint: checkpoint), in: directory,
                number: -checkpoint)
            guard calibration.problems.isEmpty, let counted = calibration.operations, counted.writes > 0 else {
                throw ChaosFailure("The trial without faults failed: \(calibration.problems.joined(separator: "; "))")
            }
            operations[checkpoint] = counted
        }
        var report = ChaosReport()
        report.storeIntact = true
        for number in 1...max(1, trials) {
            let fault = DiskFault.allCases[(number - 1) % DiskFault.allCases.count]
            let checkpoint = DiskWriterInput.checkpoints[random.next(below: DiskWriterInput.checkpoints.count)]
            let counted = operations[checkpoint] ?? (1, 1)
            let input = DiskWriterInput(
                fault: fault, after: random.next(below: fault.onSync ? counted.syncs : counted.writes),
                failures: fault == .diskFull ? 1 + random.next(below: 4) : 1, seed: random.next(),
                checkpoint: checkpoint)
            let result = try await trial(input, in: directory, number: number)
            report.faults[fault.rawValue, default: 0] += result.injected ? 1 : 0
            report.changesChecked += result.changesChecked
            report.losses += result.losses
            report.duplicates += result.duplicates
            report.storeIntact = report.storeIntact && result.intact
            report.problems += result.problems.map { "\(fault.rawValue) after \(input.after): \($0)" }
            if number % 100 == 0 { progress("\(number) disk trials, \(report.changesChecked) changes") }
        }
        return report
    }

    struct TrialResult {
        var injected = false
        var changesChecked = 0
        var losses = 0
        var duplicates = 0
        var intact = false
        var problems: [String] = []
        var operations: (writes: Int, syncs: Int)?
    }

    /// One writer process with one fault, then the check of its store.
    func trial(_ base: DiskWriterInput, in directory: URL, number: Int) async throws -> TrialResult {
        var input = base
        let store = directory.appendingPathComponent("trial-\(number).sqlite")
        let key = SymmetricKey(size: .bits256)
        let signingKey = P256.Signing.PrivateKey()
        input.storePath = store.path
        input.key = key.withUnsafeBytes { Data($0) }.base64EncodedString()
        input.signingKey = signingKey.rawRepresentation.base64EncodedString()
        let (status, output) = try await Self.runWriter(binary, input: input)
        defer {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: store.path + suffix) }
        }
        var result = TrialResult()
        let log = DiskWriterLog(output)
        result.operations = log.operations
        if let fault = input.fault, fault.kills {
            result.injected = status == 137
            if status != 137 && !(status == 0 && log.finished && !log.injected) {
                result.problems.append("the writer should have died or finished, exit status \(status)")
            }
        } else if input.fault != nil {
            result.injected = log.injected
            if status != 0 { result.problems.append("the writer failed (exit status \(status)): \(log.errors)") }
            // A failed change is explained in words a person can act on.
            for failure in log.failures where !failure.contains("storage") {
                result.problems.append("unclear error: \(failure)")
            }
        } else if status != 0 {
            result.problems.append("the writer failed (exit status \(status)): \(log.errors.joined(separator: "; "))")
        }

        // The store opens, is whole, and holds exactly what was reported recorded.
        let offline = try OfflineStore(
            url: store, model: try ServiceModel.aircraftChecks, deviceID: DiskWriterInput.device, definingQueries: [])
        do {
            try await offline.open(as: OfflineUser(name: DiskWriterInput.user, signingKey: signingKey), key: key)
        } catch {
            result.problems.append("the store does not open: \(DiskWriter.describe(error))")
            return result
        }
        try await check(offline, against: log, into: &result)
        await offline.close()
        return result
    }

    /// Compares the reopened store with what the writer reported.
    func check(_ offline: OfflineStore, against log: DiskWriterLog, into result: inout TrialResult) async throws {
        result.intact = (try? await offline.integrityCheck()) ?? false
        if !result.intact { result.problems.append("PRAGMA integrity_check fails") }
        let local = Dictionary(
            try await offline.read("PreflightChecks").map { ($0.id, $0.values["FuelKg"]) },
            uniquingKeysWith: { a, _ in a }
        )
        var queued: [String: [QueueEntry]] = [:]
        for entry in try await offline.pendingEntries() { queued[entry.entityID, default: []].append(entry) }
        for (id, attempts) in log.attempts {
            result.changesChecked += attempts.filter { $0.outcome == .recorded }.count
            let kept = local[id]
            let entries = queued[id] ?? []
            guard let create = attempts.first, create.method == "POST" else { continue }
            if kept == nil {
                if create.outcome == .recorded {
                    result.losses += 1
                    result.problems.append("\(id): reported recorded, not in the store")
                }
                if !entries.isEmpty { result.problems.append("\(id): queued but not in the store") }
                continue
            }
            if create.outcome == .failed { result.problems.append("\(id): reported failed, yet in the store") }
            // The queue holds the create and every correction that was kept, once each, in order.
            let posts = entries.filter { $0.method == "POST" }.count
            if posts != 1 {
                if posts > 1 { result.duplicates += 1 }
                result.problems.append("\(id): \(posts) queued creates")
            }
            let recorded = attempts.filter { $0.outcome == .recorded }
            let queuedFuels = entries.compactMap { Self.fuel(in: $0) }
            let inFlight = attempts.last.flatMap { $0.outcome == .inFlight ? $0.fuel : nil }
            let expected = recorded.map(\.fuel)
            if queuedFuels != expected && queuedFuels != expected + [inFlight].compactMap({ $0 }) {
                if queuedFuels.count > Set(queuedFuels).count { result.duplicates += 1 }
                if Set(expected).subtracting(queuedFuels).isEmpty == false { result.losses += 1 }
                result.problems.append("\(id): queued \(queuedFuels), reported recorded \(expected)")
            }
            for failed in attempts where failed.outcome == .failed && queuedFuels.contains(failed.fuel) {
                result.problems.append("\(id): the correction to \(failed.fuel) was reported failed, yet queued")
            }
            if let last = queuedFuels.last, kept != .decimal(last) {
                result.problems.append("\(id): holds \(String(describing: kept)), its last queued change sets \(last)")
            }
        }
        for id in local.keys where log.attempts[id] == nil {
            result.problems.append("\(id): in the store, never written")
        }
        // And the store takes a new change.
        do {
            _ = try await offline.create(in: "PreflightChecks", values: DiskWriter.check(fuel: 1))
        } catch {
            result.problems.append("the store takes no new change: \(DiskWriter.describe(error))")
        }
    }

    static func fuel(in entry: QueueEntry) -> Decimal? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(entry.body)) as? [String: Any],
            let fuel = object["FuelKg"]
        else { return nil }
        return Decimal(string: "\(fuel)")
    }

    /// Runs the writer with `input` on its standard input; returns its exit status and standard output.
    static func runWriter(_ binary: URL, input: DiskWriterInput) async throws -> (Int32, String) {
        let (process, stdout) = try ChildProcess.start(binary, command: "disk-writer", input: input)
        let output: Data = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                let data = stdout.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                continuation.resume(returning: data)
            }
        }
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }
}

/// What a writer process is told (on its standard input: the keys never go on a command line).
package struct DiskWriterInput: Codable, Sendable {
    static let device = "disk-chaos"
    static let user = "alice"
    var storePath = ""
    var key = ""
    var signingKey = ""
    var fault: DiskFault?
    var after: Int
    var failures: Int
    var seed: UInt64
    /// Pages after which SQLite checkpoints the log: every few (writes then also land on old frames of a log that
    /// started over), or SQLite's default.
    var checkpoint: Int
    static let checkpoints = [4, 1_000]
}

/// The writer's side of a disk trial.
package enum DiskWriter {
    /// Records and corrects checks in the store, printing `try POST|PATCH ID FUEL` before each change and
    /// `recorded` or `failed MESSAGE` after it; `operations WRITES SYNCS` and `done` at the end. The armed fault may
    /// end the process anywhere.
    package static func run(_ input: DiskWriterInput) async -> Int32 {
        func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
        guard let keyData = Data(base64Encoded: input.key), let signingData = Data(base64Encoded: input.signingKey),
            let signingKey = try? P256.Signing.PrivateKey(rawRepresentation: signingData)
        else {
            say("error bad input")
            return 2
        }
        let user = OfflineUser(name: DiskWriterInput.user, signingKey: signingKey)
        let key = SymmetricKey(data: keyData)
        var random = SplitMix64(seed: input.seed)
        do {
            let store = try OfflineStore(
                url: URL(fileURLWithPath: input.storePath), model: try ServiceModel.aircraftChecks,
                deviceID: DiskWriterInput.device, definingQueries: [])
            try await store.open(as: user, key: key)
            let checkpoint = input.checkpoint
            try await store.setLogCheckpoint(pages: checkpoint)
            DiskFaults.arm(input.fault, path: input.storePath, after: input.after, failures: input.failures)
            var recorded: [String] = []
            for number in 0..<DiskChaos.writes {
                if number > 0 && number % DiskChaos.reopenEvery == 0 {
                    // A user switch: the store closes (its log checkpointed) and opens again.
                    await store.close()
                    do { try await store.open(as: user, key: key) } catch {
                        say("error reopen \(describe(error))")
                        // The fault may still be armed; the next trial's check opens the store without it.
                        DiskFaults.disarm()
                        try await store.open(as: user, key: key)
                    }
                    try await store.setLogCheckpoint(pages: checkpoint)
                }
                let fuel = Decimal(10_000 + number)
                do {
                    if recorded.isEmpty || random.next(below: 3) == 0 {
                        let values = check(fuel: fuel)
                        let id = ResourcePath.canonicalURL(
                            entitySet: "PreflightChecks", key: [KeyValue(name: "ID", value: values["ID"] ?? .null)])
                        say("try POST \(id) \(fuel)")
                        _ = try await store.create(in: "PreflightChecks", values: values)
                        recorded.append(id)
                    } else {
                        let id = recorded[random.next(below: recorded.count)]
                        say("try PATCH \(id) \(fuel)")
                        try await store.update(id, values: ["FuelKg": .decimal(fuel)])
                    }
                    say("recorded")
                } catch {
                    say("failed \(describe(error))")
                }
            }
            await store.close()
            let operations = DiskFaults.disarm()
            say("operations \(operations.writes) \(operations.syncs) \(operations.injected)")
            say("done")
            return 0
        } catch {
            say("error \(error)")
            return 1
        }
    }

    static func describe(_ error: any Error) -> String { (error as? OfflineError)?.message ?? "\(error)" }

    static func check(fuel: Decimal) -> [String: PrimitiveValue] {
        [
            "ID": .guid(UUID()), "TailNumber": .string("D-DISK"), "FuelKg": .decimal(fuel),
            "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15),
            "Status": .string("draft"), "Remarks": .string("disk chaos"),
        ]
    }
}

/// A writer's output, read back: each entity's attempts and their outcomes.
struct DiskWriterLog {
    enum Outcome { case recorded, failed, inFlight }
    struct Attempt {
        var method: String
        var fuel: Decimal
        var outcome: Outcome
    }
    var attempts: [String: [Attempt]] = [:]
    var operations: (writes: Int, syncs: Int)?
    var errors: [String] = []
    /// Whether the writer says the fault struck.
    var injected = false
    var finished = false
    /// The messages of the changes that failed.
    var failures: [String] { errors.filter { $0.hasPrefix("failed ") } }

    init(_ output: String) {
        var current: String?
        var finished = false
        for line in output.split(separator: "\n").map(String.init) {
            let words = line.split(separator: " ", maxSplits: 3).map(String.init)
            switch words.first {
            case "try" where words.count == 4:
                current = words[2]
                attempts[words[2], default: []].append(
                    Attempt(method: words[1], fuel: Decimal(string: words[3]) ?? 0, outcome: .inFlight))
            case "recorded":
                if let id = current { settle(id, .recorded) }
                current = nil
            case "failed":
                if let id = current { settle(id, .failed) }
                current = nil
                errors.append(line)
            case "operations" where words.count == 4:
                operations = (Int(words[1]) ?? 0, Int(words[2]) ?? 0)
                if (Int(words[3]) ?? 0) > 0 { injected = true }
            case "done":
                finished = true
            case "error":
                errors.append(line)
            default:
                continue
            }
        }
        self.finished = finished
    }

    /// Gives the last attempt on `id` its outcome.
    mutating func settle(_ id: String, _ outcome: Outcome) {
        guard var list = attempts[id], !list.isEmpty else { return }
        list[list.count - 1].outcome = outcome
        attempts[id] = list
    }
}
