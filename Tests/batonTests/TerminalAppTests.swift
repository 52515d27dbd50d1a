import BatonTestSupport
import BatonTesting
import Foundation
import Testing

/// The interactive app driven as a person would: the built `baton` in an 80x24 pseudo-terminal (pexpect)
/// against a real `baton-server` that the script stops and restarts to cut the network.
@Suite(.serverSlot, .interactiveSlot) struct TerminalAppTests {
    @Test func handoverInTheTerminalWithBadInputLocksAndThePasscodeLimit() async throws {
        let script = try #require(
            Bundle.module.url(forResource: "app_session", withExtension: "py", subdirectory: "Terminal"))
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-terminal-\(UUID())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let server = BatonExecutableTests.executable.deletingLastPathComponent().appendingPathComponent("baton-server")
        let transcript = work.appendingPathComponent("transcript.txt")
        let missing = try await offThePool { TestPython.missing(["pexpect"]) }
        try #require(missing == nil, "\(missing ?? "")")
        let result = try await BatonExecutableTests.run(
            [script.path, BatonExecutableTests.executable.path, server.path, work.path, transcript.path],
            executable: TestPython.executable, input: "blue-harbour-1234\ngreen-meadow-5678\n")
        let seen = (try? String(contentsOf: transcript, encoding: .utf8)) ?? ""
        #expect(result.status == 0, "\(result.error)\n--- transcript (end) ---\n\(seen.suffix(3000))")
        #expect(result.output.contains("terminal ok"))
        // Secrets typed at hidden prompts never reach the screen.
        for secret in ["blue-harbour-1234", "green-meadow-5678", "alice-2468", "bob-13579x"] {
            #expect(!seen.contains(secret), "\(secret) was echoed")
        }
    }

    @Test func aSecondUserJoinsFromAScriptOnlyWithAnApprover() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-join-\(UUID())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let serverData = work.appendingPathComponent("server").path
        let serverBinary = BatonExecutableTests.executable.deletingLastPathComponent().appendingPathComponent(
            "baton-server")
        for (name, password) in [("alice", "blue-harbour-1234"), ("bob", "green-meadow-5678")] {
            let added = try await BatonExecutableTests.run(
                ["user", "add", name, "--data-dir", serverData, "--password-stdin", "--bcrypt-cost", "4"],
                executable: serverBinary, input: password + "\n")
            #expect(added.status == 0, "\(added.error)")
        }
        let server = Process()
        server.executableURL = serverBinary
        server.arguments = ["serve", "--port", "0", "--data-dir", serverData, "--log-level", "error"]
        let output = Pipe()
        server.standardOutput = output
        server.standardError = FileHandle.nullDevice
        try server.runAlone()
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let reader = output.fileHandleForReading
        let line = try await offThePool {
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = reader.availableData
                guard !chunk.isEmpty else { break }
                line.append(chunk)
            }
            return line
        }
        let url = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            .replacingOccurrences(of: "listening on ", with: "")
        let device = work.appendingPathComponent("device").path
        func add(_ arguments: [String], input: String) async throws -> BatonExecutableTests.Result {
            try await BatonExecutableTests.run(
                ["users", "add", "--data-dir", device, "--server", url, "--password-stdin"] + arguments, input: input)
        }
        let alice = try await add(["--user", "alice"], input: "blue-harbour-1234\nalice-2468x\n")
        #expect(alice.status == 0, "\(alice.error)")
        // Bob's password alone does not get him onto the tablet.
        let alone = try await add(["--user", "bob"], input: "green-meadow-5678\nbob-13579x\n")
        #expect(alone.status != 0)
        #expect(alone.error.contains("Name them with --approver USER"), "\(alone.error)")
        let wrong = try await add(
            ["--user", "bob", "--approver", "alice"], input: "green-meadow-5678\nbob-13579x\nnot-it-123\n")
        #expect(wrong.status == 3, "\(wrong.error)")
        let approved = try await add(
            ["--user", "bob", "--approver", "alice"], input: "green-meadow-5678\nbob-13579x\nalice-2468x\n")
        #expect(approved.status == 0, "\(approved.error)")
        let users = try await BatonExecutableTests.run(["users", "--data-dir", device])
        #expect(users.output.contains("Alice") || users.output.contains("alice"))
        #expect(users.output.contains("bob"))
        // A sync names the trace id its requests carried, for the server's log; a failed one too.
        let sync = try await BatonExecutableTests.run(
            ["sync", "--data-dir", device, "--user", "bob", "--passcode-stdin", "--json"], input: "bob-13579x\n")
        #expect(sync.status == 0, "\(sync.error)")
        let report = try JSONSerialization.jsonObject(with: Data(sync.output.utf8)) as? [String: Any]
        let traceID = try #require(report?["traceID"] as? String)
        #expect(traceID.count == 32 && traceID.allSatisfy(\.isHexDigit))
        server.terminate()
        server.waitUntilExit()
        let failed = try await BatonExecutableTests.run(
            ["sync", "--data-dir", device, "--user", "bob", "--passcode-stdin"], input: "bob-13579x\n")
        #expect(failed.status != 0)
        #expect(failed.error.contains("trace id "), "\(failed.error)")
        #expect(!failed.error.contains(traceID))
    }

    @Test func scriptableCommandsRefuseBadInputWithDocumentedExitStatus() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-script-\(UUID())")
        defer { try? FileManager.default.removeItem(at: work) }
        let dataDir = work.appendingPathComponent("device").path
        // No server yet: a usage error, not a crash or a prompt.
        let noServer = try await BatonExecutableTests.run(["users", "add", "--user", "alice", "--data-dir", dataDir])
        #expect(noServer.status == 64, "\(noServer.error)")
        #expect(noServer.error.contains("give --server URL"))
        let badURL = try await BatonExecutableTests.run(["users", "--data-dir", dataDir, "--server", "not a url"])
        #expect(badURL.status == 64)
        #expect(badURL.error.contains("'not a url' is not a server URL"))
        // A check with an out-of-range value is refused before any passcode is asked.
        let outOfRange = try await BatonExecutableTests.run([
            "checks", "add", "--user", "alice", "--data-dir", dataDir, "--tail", "D-AIBL", "--fuel-kg", "5200",
            "--main-psi", "900", "--nose-psi", "60", "--oil-quarts", "15",
        ])
        #expect(outOfRange.status == 6)
        #expect(outOfRange.error.contains("Main tyre pressure: 900 psi is outside 30–350 psi."))
        // An unknown user on a device with a server: not found.
        let unknown = try await BatonExecutableTests.run(
            [
                "pending", "--user", "carol", "--passcode-stdin", "--data-dir", dataDir, "--server",
                "http://127.0.0.1:9",
            ],
            input: "whatever-1\n")
        #expect(unknown.status == 7, "\(unknown.error)")
        #expect(unknown.error.contains("carol is not on this device"))
        // The remembered server URL is owner-only, also when an older version or a copy left it readable.
        let remembered = work.appendingPathComponent("device/server-url").path
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: remembered)
        _ = try await BatonExecutableTests.run(["users", "--data-dir", dataDir])
        #expect(try FileManager.default.attributesOfItem(atPath: remembered)[.posixPermissions] as? Int == 0o600)
        // `baton lock` with no app open says the device is locked.
        let lock = try await BatonExecutableTests.run(["lock", "--data-dir", dataDir])
        #expect(lock.status == 0)
        #expect(lock.output.contains("the device is locked"))
    }
}
