import ArgumentParser
import BatonChaos
import Foundation

/// `baton-chaos`: the fault and load harness. Network faults between a shared tablet and the server through a
/// fault-injecting proxy, server kills, disk faults in the offline store, and many tablets syncing at once; all
/// checked by the invariant checkers.
@main
struct BatonChaosCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton-chaos",
        abstract:
            "Break the network, the server and the disk under tablets, then check nothing was lost or applied twice.",
        subcommands: [RunChaos.self, DiskWriterCommand.self, TabletSyncCommand.self, StoreWriterCommand.self],
        defaultSubcommand: RunChaos.self)
}

/// Ends a child command with `status` (0: normally).
func finish(_ status: Int32) throws {
    if status != 0 { throw ExitCode(status) }
}

/// The disk part's writer process: its input (keys included) comes on standard input.
struct DiskWriterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "disk-writer", abstract: "A disk trial's writer (run by baton-chaos itself).",
        shouldDisplay: false)

    func run() async throws {
        guard let input = ChildProcess.input(DiskWriterInput.self) else {
            throw ValidationError("disk-writer reads its trial as JSON on standard input.")
        }
        try finish(await DiskWriter.run(input))
    }
}

/// The client-kill part's sync process, and the sync crash test's (a `drain`): its input (keys and token included)
/// comes on standard input.
struct TabletSyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tablet-sync",
        abstract: "A tablet's sync process (run and killed by baton-chaos and the sync crash test).",
        shouldDisplay: false)

    func run() async throws {
        guard let input = ChildProcess.input(TabletSyncInput.self) else {
            throw ValidationError("tablet-sync reads its input as JSON on standard input.")
        }
        try finish(await TabletSync.run(input))
    }
}

/// The secure store's writer process (`SecureStoreCrashTests` kills it): its input (the passcode included) comes on
/// standard input.
struct StoreWriterCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store-writer", abstract: "Writes a secure store until killed (run by the crash tests).",
        shouldDisplay: false)

    func run() async throws {
        guard let input = ChildProcess.input(StoreWriterInput.self) else {
            throw ValidationError("store-writer reads its input as JSON on standard input.")
        }
        try finish(await StoreWriter.run(input))
    }
}

/// The harness's parts, short (CI) or long.
struct RunChaos: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run", abstract: "Run the harness (the default command).")

    @Flag(
        help:
            "The long run: 1,000 network faults, 1,000 server kills, 1,000 tablet kills, 1,200 disk trials; 1 to 200 devices at once; 10,000,000 fuzz inputs."
    )
    var long = false
    @Option(help: "Network faults to inject (default: 100, or 1,000 with --long; 0 skips them).") var networkFaults:
        Int?
    @Option(
        help:
            "The numbers of devices syncing at once, comma-separated; the first is the baseline (default: 1,20, or 1,10,50,100,200 with --long; empty skips them)."
    )
    var devices: String?
    @Option(help: "Rounds per device in the load part: 10 checks each, a sync every other round and after the last.")
    var rounds = 4
    @Option(help: "Runs of the one-device baseline in the load part, each on a fresh tablet; the median run counts.")
    var baselineRuns = 3
    @Option(
        help:
            "In the load part, each device syncs once every this many seconds (default: as fast as it can)."
    )
    var pace: Double?
    @Option(
        help:
            "In the load part, instead of --pace: pace each point's tablets so that together they offer this percentage of the one-device baseline's changes per second."
    )
    var offeredLoad: Double?
    @Option(
        help:
            "In the load part, tablets per station: each station's tablets keep only its two aircraft's checks (default: every tablet keeps every check)."
    )
    var stationSize: Int?
    @Option(help: "Kills of the server process (default: 50, or 1,000 with --long; 0 skips them).") var kills: Int?
    @Option(help: "Kills of the tablet's sync process (default: 50, or 1,000 with --long; 0 skips them).")
    var clientKills: Int?
    @Option(help: "Disk trials, one fault each (default: 60, or 1,200 with --long; 0 skips them).") var diskTrials: Int?
    @Option(
        help:
            "Inputs for the parsers under libFuzzer, run by the package's scripts/fuzz over two processes (default: 0, or 10,000,000 with --long; CI replays the kept corpus instead)."
    )
    var fuzzInputs: Int?
    @Option(help: "The seed; the same seed repeats the same run.") var seed: UInt64 = 1
    @Flag(help: "Print JSON.") var json = false

    func deviceCounts() throws -> [Int] {
        let text = devices ?? (long ? "1,10,50,100,200" : "1,20")
        let counts = text.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard counts.allSatisfy({ ($0 ?? 0) > 0 && ($0 ?? 0) <= 1_000 }) else {
            throw ValidationError("--devices takes numbers from 1 to 1000, comma-separated.")
        }
        return counts.compactMap { $0 }
    }

    func validate() throws {
        guard (networkFaults ?? 0) >= 0 else { throw ValidationError("--network-faults must not be negative.") }
        guard (kills ?? 0) >= 0 else { throw ValidationError("--kills must not be negative.") }
        guard (clientKills ?? 0) >= 0 else { throw ValidationError("--client-kills must not be negative.") }
        guard (diskTrials ?? 0) >= 0 else { throw ValidationError("--disk-trials must not be negative.") }
        guard (fuzzInputs ?? 0) >= 0 else { throw ValidationError("--fuzz-inputs must not be negative.") }
        guard (1...10_000).contains(rounds) else { throw ValidationError("--rounds takes 1 to 10000.") }
        guard [1, 3, 5, 7, 9].contains(baselineRuns) else {
            throw ValidationError("--baseline-runs takes 1, 3, 5, 7 or 9 (an odd number: the median run counts).")
        }
        guard (stationSize ?? 1) > 0 else { throw ValidationError("--station-size must be positive.") }
        guard (1...1_000).contains(offeredLoad ?? 1) else {
            throw ValidationError("--offered-load takes a percentage from 1 to 1000.")
        }
        guard pace == nil || offeredLoad == nil else {
            throw ValidationError("--pace and --offered-load both set the pace; give one.")
        }
        if offeredLoad != nil, let first = try? deviceCounts().first, first != 1 {
            throw ValidationError(
                "--offered-load paces the tablets by the one-device baseline: --devices must begin with 1.")
        }
        guard (pace ?? 1) > 0 && (pace ?? 1) <= 3_600 else {
            throw ValidationError("--pace takes seconds, more than 0 and at most 3600.")
        }
        _ = try deviceCounts()
    }

    /// The `baton-server` built beside this executable, if it is there.
    var serverBinary: URL? {
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("baton-server")
        return FileManager.default.isExecutableFile(atPath: binary.path) ? binary : nil
    }

    func run() async throws {
        let faults = networkFaults ?? (long ? 1_000 : 100)
        let note: @Sendable (String) -> Void = { line in FileHandle.standardError.write(Data("… \(line)\n".utf8)) }
        /// Prints a part's report: JSON, or its title and text.
        func emit(_ report: some Encodable, title: String, text: String) throws {
            if json {
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
                print(String(decoding: try encoder.encode(report), as: UTF8.self))
            } else {
                print(title)
                print(text)
            }
        }
        var passed = true
        if faults > 0 {
            let started = ContinuousClock.now
            let report = try await NetworkChaos(faults: faults, seed: seed).run(progress: note)
            let elapsed = ContinuousClock.now - started
            try emit(report, title: "Network faults, seed \(seed), \(elapsed.components.seconds) s:", text: report.text)
            passed = passed && report.passed
        }
        let killCount = kills ?? (long ? 1_000 : 50)
        if killCount > 0 {
            guard let binary = serverBinary else {
                throw ValidationError(
                    "The kill part needs baton-server beside baton-chaos (swift build --product baton-server).")
            }
            let started = ContinuousClock.now
            let report = try await ServerKillChaos(kills: killCount, seed: seed, serverBinary: binary).run(
                progress: note)
            let elapsed = ContinuousClock.now - started
            try emit(
                report, title: "\nServer process kills, seed \(seed), \(elapsed.components.seconds) s:",
                text: report.text)
            passed = passed && report.passed
        }
        let clientKillCount = clientKills ?? (long ? 1_000 : 50)
        if clientKillCount > 0 {
            guard let binary = Bundle.main.executableURL else {
                throw ValidationError("Cannot find baton-chaos itself.")
            }
            let started = ContinuousClock.now
            let report = try await ClientKillChaos(kills: clientKillCount, seed: seed, binary: binary).run(
                progress: note)
            let elapsed = ContinuousClock.now - started
            try emit(
                report, title: "\nTablet sync process kills, seed \(seed), \(elapsed.components.seconds) s:",
                text: report.text)
            passed = passed && report.passed
        }
        let trials = diskTrials ?? (long ? 1_200 : 60)
        if trials > 0 {
            guard let binary = Bundle.main.executableURL else {
                throw ValidationError("Cannot find baton-chaos itself.")
            }
            let started = ContinuousClock.now
            let report = try await DiskChaos(trials: trials, seed: seed, binary: binary).run(progress: note)
            let elapsed = ContinuousClock.now - started
            try emit(
                report, title: "\nDisk faults in the offline store, seed \(seed), \(elapsed.components.seconds) s:",
                text: report.text)
            passed = passed && report.passed
        }
        let counts = try deviceCounts()
        if !counts.isEmpty {
            // The server in a process of its own when baton-server is there: its CPU and memory apart.
            let report = try await LoadChaos(
                devices: counts, rounds: rounds, serverBinary: serverBinary,
                pace: pace.map { .milliseconds($0 * 1_000) }, stationSize: stationSize, baselineRuns: baselineRuns,
                offeredLoad: offeredLoad.map { $0 / 100 }
            ).run(progress: note)
            try emit(
                report, title: "\nDevices syncing at once (\(rounds) rounds each, two users per device):",
                text: report.text)
            passed = passed && report.passed
        }
        let inputs = fuzzInputs ?? (long ? 10_000_000 : 0)
        if inputs > 0 {
            guard let executable = Bundle.main.executableURL, let script = FuzzChaos.script(beside: executable)
            else {
                throw ValidationError(
                    "The fuzz part runs the scripts/fuzz of the package baton-chaos was built in (swift build puts it in .build)."
                )
            }
            let report = try await FuzzChaos(inputs: inputs, script: script).run(progress: note)
            try emit(report, title: "\nThe parsers fuzzed (libFuzzer, AddressSanitizer):", text: report.text)
            passed = passed && report.passed
        }
        if !passed { throw ExitCode(1) }
    }
}
