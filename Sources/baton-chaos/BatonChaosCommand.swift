import ArgumentParser
import BatonChaos
import Foundation

/// `baton-chaos`: the fault and load harness. Today: network faults between a shared tablet and the server,
/// through a fault-injecting proxy, checked by the invariant checker.
@main
struct BatonChaosCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton-chaos",
        abstract: "Break the network between a tablet and the server, then check nothing was lost or applied twice.")

    @Flag(help: "The long run: 1,000 network faults.") var long = false
    @Option(help: "Network faults to inject (default: 100, or 1,000 with --long).") var networkFaults: Int?
    @Option(help: "The seed; the same seed repeats the same run.") var seed: UInt64 = 1
    @Flag(help: "Print JSON.") var json = false

    func run() async throws {
        let faults = networkFaults ?? (long ? 1_000 : 100)
        guard faults > 0 else { throw ValidationError("--network-faults must be positive.") }
        let started = ContinuousClock.now
        let report = try await NetworkChaos(faults: faults, seed: seed).run { line in
            FileHandle.standardError.write(Data("… \(line)\n".utf8))
        }
        let elapsed = ContinuousClock.now - started
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
            print(String(decoding: try encoder.encode(report), as: UTF8.self))
        } else {
            print("Network faults, seed \(seed), \(elapsed.components.seconds) s:")
            print(report.text)
        }
        if !report.passed { throw ExitCode(1) }
    }
}
