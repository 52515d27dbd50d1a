import BatonTesting
import Foundation
import Testing

/// Runs the built `baton-server` binary as an admin would, and a third-party OAuth client against it.
@Suite(.serialized) struct ServerExecutableTests {
    static var buildDirectory: URL {
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        for _ in 0..<4
        where !FileManager.default.isExecutableFile(atPath: directory.appendingPathComponent("baton-server").path) {
            directory.deleteLastPathComponent()
        }
        return directory
    }

    struct Result {
        var status: Int32
        var output: String
        var error: String
    }

    static func run(_ executable: URL, _ arguments: [String], input: String? = nil) async throws -> Result {
        try await offThePool { try runBlocking(executable, arguments, input: input) }
    }

    static func runBlocking(_ executable: URL, _ arguments: [String], input: String?) throws -> Result {
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        let output = Pipe()
        let error = Pipe()
        let stdin = Pipe()
        process.standardOutput = output
        process.standardError = error
        process.standardInput = stdin
        try process.run()
        if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
        try stdin.fileHandleForWriting.close()
        let out = output.fileHandleForReading.readDataToEndOfFile()
        let err = error.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(
            status: process.terminationStatus, output: String(decoding: out, as: UTF8.self),
            error: String(decoding: err, as: UTF8.self))
    }

    static func server(_ arguments: [String], input: String? = nil) async throws -> Result {
        try await run(buildDirectory.appendingPathComponent("baton-server"), arguments, input: input)
    }

    /// A `baton-server serve --port 0` process and its URL.
    /// Unchecked: its process is started in `init` and only stopped after, by the one test that holds it.
    final class RunningServer: @unchecked Sendable {
        let process = Process()
        let url: String

        init(dataDir: String) throws {
            process.executableURL = ServerExecutableTests.buildDirectory.appendingPathComponent("baton-server")
            process.arguments = ["serve", "--port", "0", "--data-dir", dataDir, "--log-level", "warning"]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let chunk = output.fileHandleForReading.availableData
                guard !chunk.isEmpty else { break }
                line.append(chunk)
            }
            let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard text.hasPrefix("listening on http://127.0.0.1:") else {
                process.terminate()
                throw TestFailure("serve printed '\(text)'")
            }
            url = String(text.dropFirst("listening on ".count))
        }

        /// Sends SIGTERM and returns the exit status.
        func stop() -> Int32 {
            process.terminate()
            process.waitUntilExit()
            return process.terminationStatus
        }
    }

    /// Runs a Python interop script against `running`, with alice's password on its standard input.
    static func interop(_ name: String, against running: RunningServer) async throws {
        let script = try #require(Bundle.module.url(forResource: name, withExtension: "py", subdirectory: "Interop"))
        let missing = TestPython.missing(["requests", "authlib", "odatapy", "httpx", "odata"])
        try #require(missing == nil, "\(missing ?? "")")
        let python = try await run(
            TestPython.executable, [script.path, running.url, "alice"], input: "correct-horse-battery\n")
        #expect(python.status == 0, "\(python.output)\(python.error)")
        #expect(python.output.contains("interop ok"), "\(python.output)\(python.error)")
    }

    static func temporaryDirectory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("baton-cli-\(UUID().uuidString)").path
    }

    @Test func adminCommandsWorkWhileTheServerRunsAndShutdownIsGraceful() async throws {
        let dataDir = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        let running = try await offThePool { try RunningServer(dataDir: dataDir) }
        let added = try await Self.server(
            [
                "user", "add", "alice", "--display-name", "Alice A.", "--data-dir", dataDir, "--password-stdin",
                "--bcrypt-cost", "4",
            ],
            input: "correct-horse-battery\n")
        #expect(added.status == 0, "\(added.error)")
        #expect(added.output == "Added alice (ground-staff).\n")
        let list = try await Self.server(["user", "list", "--data-dir", dataDir])
        #expect(list.output.contains("alice  ground-staff  active    Alice A."))
        let set = try await Self.server(["settings", "set", "passcode.min-length", "6", "--data-dir", dataDir])
        #expect(set.output == "passcode.min-length = 6\n")
        let show = try await Self.server(["settings", "show", "--data-dir", dataDir])
        #expect(show.output.contains("passcode.min-length = 6\n"))
        #expect(running.stop() == 0)
        // Every file the server wrote is private to its owner.
        for file in ["server.sqlite", "keys/signing-key.pem", "keys/master.key"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: dataDir + "/" + file)
            #expect((attributes[.posixPermissions] as? Int) == 0o600, "\(file)")
        }
    }

    @Test func adminErrorsAreClearAndPasswordsAreNeverArguments() async throws {
        let dataDir = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        let unknown = try await Self.server(["settings", "set", "passcode.colour", "blue", "--data-dir", dataDir])
        #expect(unknown.status == 1)
        #expect(
            unknown.error.hasPrefix(
                "Error: Unknown setting 'passcode.colour'. Known settings: shared-devices.multi-user,"))
        let weak = try await Self.server(
            ["user", "add", "bob", "--data-dir", dataDir, "--password-stdin"], input: "short\n")
        #expect(weak.status == 1)
        #expect(weak.error == "Error: The password must have at least 10 characters.\n")
        let noStdin = try await Self.server(["user", "add", "bob", "--data-dir", dataDir])
        #expect(noStdin.status != 0)
        #expect(
            noStdin.error.contains(
                "Pass --password-stdin and give the password on standard input; it is never an argument."))
        let missing = try await Self.server(["user", "disable", "nobody", "--data-dir", dataDir])
        #expect(missing.error == "Error: There is no user named 'nobody'.\n")
    }

    /// Adds alice (and optionally seed data) to a fresh data directory, serves it, and runs an interop script.
    static func interopAgainstFreshServer(_ script: String, seed: Bool) async throws {
        let dataDir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        if seed {
            #expect(try await server(["seed", "--aircraft", "5", "--checks", "40", "--data-dir", dataDir]).status == 0)
        }
        let added = try await server(
            ["user", "add", "alice", "--data-dir", dataDir, "--password-stdin", "--bcrypt-cost", "4"],
            input: "correct-horse-battery\n")
        #expect(added.status == 0)
        let running = try await offThePool { try RunningServer(dataDir: dataDir) }
        defer { _ = running.stop() }
        try await interop(script, against: running)
    }

    @Test(arguments: ["odatapy_interop", "python_odata_interop", "query_encoding_interop"])
    func thirdPartyODataClientsInteroperate(script name: String) async throws {
        try await Self.interopAgainstFreshServer(name, seed: true)
    }

    @Test func seedFillsTheModelWithRealisticData() async throws {
        let dataDir = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        let seeded = try await Self.server(["seed", "--aircraft", "12", "--checks", "300", "--data-dir", dataDir])
        #expect(seeded.output == "Added 12 aircraft, 12 flights and 300 pre-flight checks.\n")
        let again = try await Self.server(["seed", "--aircraft", "12", "--checks", "300", "--data-dir", dataDir])
        #expect(again.status == 1)
        #expect(
            again.error.hasPrefix(
                "Error: Seeding failed (seeding twice with the same --seed repeats tail numbers; pick another seed)"))
    }

    @Test func aThirdPartyOAuthClientInteroperates() async throws {
        try await Self.interopAgainstFreshServer("oauth_interop", seed: false)
    }
}

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension ServerExecutableTests {
    /// One authenticated request each, that used to overflow the stack (the process died) or hit SQLite's limits
    /// (500): now each is a 400 that names the limit, and the server goes on answering.
    @Test func hostileQueriesAreRefusedAndTheServerLives() async throws {
        let dataDir = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        let added = try await Self.server(
            ["user", "add", "alice", "--data-dir", dataDir, "--password-stdin", "--bcrypt-cost", "4"],
            input: "correct-horse-battery\n")
        #expect(added.status == 0)
        let running = try await offThePool { try RunningServer(dataDir: dataDir) }
        defer { _ = running.stop() }
        let base = try #require(URL(string: running.url))
        var tokenRequest = URLRequest(url: base.appendingPathComponent("oauth/token"))
        tokenRequest.httpMethod = "POST"
        tokenRequest.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        tokenRequest.httpBody = Data(
            "grant_type=password&client_id=baton-device&username=alice&password=correct-horse-battery".utf8)
        let (tokenData, _) = try await URLSession.shared.data(for: tokenRequest)
        let token = try #require(
            (try JSONSerialization.jsonObject(with: tokenData) as? [String: Any])?["access_token"] as? String)

        func send(_ path: String, method: String = "GET", body: String? = nil) async throws -> (Int, String) {
            var request = URLRequest(url: try #require(URL(string: running.url + "/odata/" + path)))
            request.httpMethod = method
            request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
            if let body {
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                request.httpBody = Data(body.utf8)
            }
            let (data, response) = try await URLSession.shared.data(for: request)
            return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
        }
        func chain(_ term: String, _ separator: String, _ count: Int) -> String {
            Array(repeating: term, count: count).joined(separator: separator)
        }
        let hostile = [
            "PreflightChecks?$filter=" + chain("true", "%20or%20", 3000),
            "PreflightChecks?$filter=" + chain("true", "%20or%20", 400),
            "PreflightChecks?$filter=" + chain("true", "%20and%20", 1500),
            "PreflightChecks?$filter=FuelKg%20add%20" + chain("1", "%20add%20", 3000) + "%20gt%200",
            "PreflightChecks?$filter=FuelKg%20mod%20" + chain("2", "%20mod%20", 60) + "%20eq%200",
            "PreflightChecks?$search=" + chain("fuel", "%20", 8000),
            "PreflightChecks?$search=" + chain("NOT", "%20", 3000) + "%20fuel",
            "PreflightChecks?$orderby=" + chain("FuelKg", ",", 2000),
            "Aircraft?$expand=" + chain("Checks", ",", 500),
        ]
        for path in hostile {
            let (status, text) = try await send(path)
            #expect(status == 400, "\(path.prefix(60)): \(status) \(text.prefix(200))")
            #expect(text.contains("LimitExceeded"), "\(path.prefix(60)): \(text.prefix(200))")
        }
        // 2,500 terms inside a 24 KB $batch: the request inside answers 400, the batch 200.
        let inner = "PreflightChecks?$filter=" + chain("true", "%20or%20", 2500)
        let (batchStatus, batchText) = try await send(
            "$batch", method: "POST", body: #"{"requests":[{"id":"1","method":"GET","url":"\#(inner)"}]}"#)
        #expect(batchStatus == 200)
        #expect(batchText.contains(#""status":400"#), "\(batchText.prefix(300))")
        // Ordinary queries still work, and the process is alive.
        let (ok, _) = try await send("PreflightChecks?$filter=FuelKg%20gt%205000%20or%20FuelKg%20lt%2010&$top=1")
        #expect(ok == 200)
        #expect(running.process.isRunning)
    }
}
