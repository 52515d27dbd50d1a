import Foundation
import Testing

/// The interactive app driven as a person would: the built `baton` in an 80x24 pseudo-terminal (pexpect)
/// against a real `baton-server` that the script stops and restarts to cut the network.
@Suite struct TerminalAppTests {
    @Test func handoverInTheTerminalWithBadInputLocksAndThePasscodeLimit() throws {
        let script = try #require(
            Bundle.module.url(forResource: "app_session", withExtension: "py", subdirectory: "Terminal"))
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-terminal-\(UUID())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let server = BatonExecutableTests.executable.deletingLastPathComponent().appendingPathComponent("baton-server")
        let transcript = work.appendingPathComponent("transcript.txt")
        let result = try BatonExecutableTests.run(
            ["python3", script.path, BatonExecutableTests.executable.path, server.path, work.path, transcript.path],
            executable: URL(fileURLWithPath: "/usr/bin/env"), input: "blue-harbour-1234\ngreen-meadow-5678\n")
        let seen = (try? String(contentsOf: transcript, encoding: .utf8)) ?? ""
        #expect(result.status == 0, "\(result.error)\n--- transcript (end) ---\n\(seen.suffix(3000))")
        #expect(result.output.contains("terminal ok"))
        // Secrets typed at hidden prompts never reach the screen.
        for secret in ["blue-harbour-1234", "green-meadow-5678", "alice-2468", "bob-13579x"] {
            #expect(!seen.contains(secret), "\(secret) was echoed")
        }
    }

    @Test func scriptableCommandsRefuseBadInputWithDocumentedExitStatus() throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-script-\(UUID())")
        defer { try? FileManager.default.removeItem(at: work) }
        let dataDir = work.appendingPathComponent("device").path
        // No server yet: a usage error, not a crash or a prompt.
        let noServer = try BatonExecutableTests.run(["users", "add", "--user", "alice", "--data-dir", dataDir])
        #expect(noServer.status == 64, "\(noServer.error)")
        #expect(noServer.error.contains("give --server URL"))
        let badURL = try BatonExecutableTests.run(["users", "--data-dir", dataDir, "--server", "not a url"])
        #expect(badURL.status == 64)
        #expect(badURL.error.contains("'not a url' is not a server URL"))
        // A check with an out-of-range value is refused before any passcode is asked.
        let outOfRange = try BatonExecutableTests.run([
            "checks", "add", "--user", "alice", "--data-dir", dataDir, "--tail", "D-AIBL", "--fuel-kg", "5200",
            "--main-psi", "900", "--nose-psi", "60", "--oil-quarts", "15",
        ])
        #expect(outOfRange.status == 6)
        #expect(outOfRange.error.contains("Main tyre pressure: 900 psi is outside 30–350 psi."))
        // An unknown user on a device with a server: not found.
        let unknown = try BatonExecutableTests.run(
            [
                "pending", "--user", "carol", "--passcode-stdin", "--data-dir", dataDir, "--server",
                "http://127.0.0.1:9",
            ],
            input: "whatever-1\n")
        #expect(unknown.status == 7, "\(unknown.error)")
        #expect(unknown.error.contains("carol is not on this device"))
        // `baton lock` with no app open says the device is locked.
        let lock = try BatonExecutableTests.run(["lock", "--data-dir", dataDir])
        #expect(lock.status == 0)
        #expect(lock.output.contains("the device is locked"))
    }
}
