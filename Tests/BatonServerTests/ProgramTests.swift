import BatonTesting
import Foundation
import Testing

/// The test kit's one program runner (`Program`, on swift-subprocess), as the executable and cluster tests use it.
@Suite struct ProgramTests {
    let shell = URL(fileURLWithPath: "/bin/sh")

    @Test func exitCodesSignalsAndBothOutputsAreTold() async throws {
        let ended = try await Program.run(shell, ["-c", "echo out; echo err >&2; exit 3"])
        #expect(ended.status == 3 && !ended.signaled)
        #expect(ended.output == "out\n" && ended.error == "err\n")
        let killed = try await Program.run(shell, ["-c", "kill -9 $$"])
        #expect(killed.signaled && killed.status == 128 + 9)
    }

    /// A child that writes far more than a pipe holds to both outputs while its input is still coming does not
    /// stall: input is written while both outputs are read.
    @Test func largeInputAndOutputsDoNotStall() async throws {
        let input = String(repeating: "0123456789abcdef\n", count: 40_000)
        let result = try await Program.run(shell, ["-c", "tee /dev/stderr"], input: input)
        #expect(result.status == 0)
        #expect(result.output == input && result.error == input)
    }

    /// A child that ends without reading its input (a line, or 20,000 bytes: both within the 32 KiB written into
    /// its pipe before it starts) is an ordinary result, many times over: the runner neither waits for it to read
    /// nor stops this process (swift-subprocess 1.0.2 did, on an input still being written when the child ended).
    /// A larger input is still written while the child runs, and a child that ignores one is not covered here.
    @Test func aChildThatIgnoresItsInputEndsCleanly() async throws {
        for round in 0..<200 {
            let input = round % 2 == 0 ? "passcode-\(round)\n" : String(repeating: "x", count: 20_000)
            let result = try await Program.run(shell, ["-c", "exit 7"], input: input)
            #expect(result.status == 7 && !result.signaled)
        }
        let read = try await Program.run(shell, ["-c", "cat"], input: "first line\nsecond\n")
        #expect(read.output == "first line\nsecond\n")
    }

    @Test func theEnvironmentIsAddedToAndTheDirectoryChosen() async throws {
        let result = try await Program.run(
            shell, ["-c", "echo \"$BATON_PROGRAM_TEST:$HOME\"; pwd"], environment: ["BATON_PROGRAM_TEST": "yes"],
            workingDirectory: URL(fileURLWithPath: "/tmp"))
        let home = ProcessInfo.processInfo.environment["HOME"] ?? ""
        #expect(result.output == "yes:\(home)\n/tmp\n")
        await #expect(throws: ProgramError.self) {
            try await Program.run(shell, ["-c", "true"], environment: ["A=B": "x"])
        }
    }

    @Test func outputOverItsLimitIsAnErrorAndAMissingProgramToo() async throws {
        await #expect(throws: (any Error).self) {
            try await Program.run(shell, ["-c", "head -c 5000 /dev/zero"], limit: 1000)
        }
        await #expect(throws: (any Error).self) {
            try await Program.run(URL(fileURLWithPath: "/no/such/program"), [])
        }
    }

    /// The blocking form, off the pool, as a cluster's set-up calls it.
    @Test func theBlockingFormWaitsForTheEnd() async throws {
        let result = try await offThePool { try Program.runBlocking(self.shell, ["-c", "sleep 0.2; echo done"]) }
        #expect(result.output == "done\n")
    }
}
