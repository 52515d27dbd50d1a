import ArgumentParser
import BatonServer
import Foundation

/// `baton-server seed`: demo or benchmark data for the aircraft-checks model.
struct SeedCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "seed", abstract: "Add demo or benchmark data.")

    @OptionGroup var data: DataOptions
    @Option(help: "How many aircraft (each with one flight).") var aircraft: Int = 20
    @Option(help: "How many pre-flight checks.") var checks: Int = 200
    @Option(help: "The random seed; the same seed gives the same data.") var seed: UInt64 = 1

    func validate() throws {
        guard (1...10_000).contains(aircraft) else {
            throw ValidationError("--aircraft must be between 1 and 10000, not \(aircraft).")
        }
        guard (0...10_000_000).contains(checks) else {
            throw ValidationError("--checks must be between 0 and 10000000, not \(checks).")
        }
    }

    func run() async throws {
        let server = try await data.open()
        do {
            let added = try await server.seed(aircraft: aircraft, checks: checks, seed: seed)
            print("Added \(added.aircraft) aircraft, \(added.flights) flights and \(added.checks) pre-flight checks.")
        } catch let error as ServerSetupError {
            throw CommandFailure(error.description)
        } catch {
            throw CommandFailure(
                "Seeding failed (seeding twice with the same --seed repeats tail numbers; pick another seed): \(error)")
        }
    }
}
