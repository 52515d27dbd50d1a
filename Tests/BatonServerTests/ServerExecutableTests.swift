import BatonOData
import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

/// Runs the built `baton-server` binary as an admin would, and a third-party OAuth client against it.
@Suite(.serverSlot, .timeLimit(.minutes(10)), .serialized) struct ServerExecutableTests {
    static var buildDirectory: URL { ServerCluster.buildDirectory }

    typealias Result = ProgramResult

    /// Runs `executable` to its end (``Program``), with `environment` added to this process's.
    static func run(
        _ executable: URL, _ arguments: [String], input: String? = nil, environment: [String: String] = [:]
    ) async throws -> Result {
        try await Program.run(executable, arguments, environment: environment, input: input)
    }

    static func server(_ arguments: [String], input: String? = nil) async throws -> Result {
        try await run(buildDirectory.appendingPathComponent("baton-server"), arguments, input: input)
    }

    /// A `baton-server serve --port 0` process and its URL.
    /// Unchecked: its process is started in `init` and only stopped after, by the one test that holds it.
    final class RunningServer: @unchecked Sendable {
        let process = Process()
        let url: String

        /// `http://127.0.0.1:PORT/metrics` when `--metrics-port` was given.
        let metricsURL: String?

        /// Starts `serve` with `arguments` after the data directory's; its standard error goes to `errorLog`
        /// (a file, which a server that logs much can never fill as it could a pipe nobody reads).
        init(dataDir: String, arguments: [String] = ["--log-level", "warning"], errorLog: URL? = nil) throws {
            process.executableURL = ServerExecutableTests.buildDirectory.appendingPathComponent("baton-server")
            process.arguments = ["serve", "--port", "0", "--data-dir", dataDir] + arguments
            let output = Pipe()
            process.standardOutput = output
            if let errorLog {
                guard FileManager.default.createFile(atPath: errorLog.path, contents: nil) else {
                    throw TestFailure("cannot create \(errorLog.path)")
                }
                process.standardError = try FileHandle(forWritingTo: errorLog)
            } else {
                process.standardError = FileHandle.nullDevice
            }
            try process.runAlone()
            // The API and the metrics endpoint start side by side: their lines come in either order.
            let expected = arguments.contains("--metrics-port") ? 2 : 1
            var text = ""
            while text.filter({ $0 == "\n" }).count < expected {
                let chunk = output.fileHandleForReading.availableData
                guard !chunk.isEmpty else { break }
                text += String(decoding: chunk, as: UTF8.self)
            }
            let lines = text.split(separator: "\n").map(String.init)
            guard let listening = lines.first(where: { $0.hasPrefix("listening on http://127.0.0.1:") }) else {
                process.terminate()
                throw TestFailure("serve printed '\(text)'")
            }
            url = String(listening.dropFirst("listening on ".count))
            metricsURL = lines.first { $0.hasPrefix("metrics on ") }.map { String($0.dropFirst("metrics on ".count)) }
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
        let missing = try await offThePool { TestPython.missing(["requests", "authlib", "odatapy", "httpx", "odata"]) }
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
        let rotate = try await Self.server(["keys", "rotate", "--data-dir", dataDir])
        #expect(rotate.output.hasPrefix("New token-signing key "), "\(rotate.output)")
        #expect(running.stop() == 0)
        // Every file the server wrote is private to its owner; the signing keys are in the database, sealed.
        for file in ["server.sqlite", "data.sqlite", "keys/master.key"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: dataDir + "/" + file)
            #expect((attributes[.posixPermissions] as? Int) == 0o600, "\(file)")
        }
        #expect(!FileManager.default.fileExists(atPath: dataDir + "/keys/signing-key.pem"))
    }

    @Test func serveLogsJSONWithTraceIDsAndServesMetricsOnItsOwnPort() async throws {
        let dataDir = Self.temporaryDirectory()
        let errorLog = URL(fileURLWithPath: dataDir + ".stderr")
        defer {
            try? FileManager.default.removeItem(atPath: dataDir)
            try? FileManager.default.removeItem(at: errorLog)
        }
        let running = try await offThePool {
            try RunningServer(
                dataDir: dataDir, arguments: ["--log-format", "json", "--access-log", "--metrics-port", "0"],
                errorLog: errorLog)
        }
        let metricsURL = try #require(running.metricsURL.flatMap(URL.init(string:)))
        let trace = "0af7651916cd43dd8448eb211c80319c"
        for _ in 0..<3 {
            var request = URLRequest(url: try #require(URL(string: running.url + "/health")))
            request.setValue("00-\(trace)-b7ad6b7169203331-01", forHTTPHeaderField: "traceparent")
            let (_, response) = try await URLSession.shared.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)
        }
        let (body, response) = try await URLSession.shared.data(from: metricsURL)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let metrics = String(decoding: body, as: UTF8.self)
        #expect(
            metrics.contains(#"baton_http_requests_total{route="/health",method="GET",status="200"} 3"#), "\(metrics)")
        #expect(metrics.contains(#"baton_http_request_duration_seconds_count{route="/health",method="GET"} 3"#))
        // The API's port does not serve the metrics.
        let (_, onAPI) = try await URLSession.shared.data(from: try #require(URL(string: running.url + "/metrics")))
        #expect((onAPI as? HTTPURLResponse)?.statusCode == 404)
        #expect(running.stop() == 0)
        let lines = try String(contentsOf: errorLog, encoding: .utf8).split(separator: "\n")
        #expect(!lines.isEmpty)
        var traced = 0
        for line in lines {
            let object = try #require(
                try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not JSON: \(line)")
            #expect(object["level"] is String && object["message"] is String && object["timestamp"] is String)
            if object["message"] as? String == "GET /health 200" {
                #expect(object["trace_id"] as? String == trace)
                #expect(object["parent_span_id"] as? String == "b7ad6b7169203331")
                traced += 1
            }
        }
        #expect(traced == 3)
    }

    @Test func metricsPortMustDifferFromTheAPIPort() async throws {
        let result = try await Self.server(["serve", "--port", "8123", "--metrics-port", "8123"])
        #expect(result.status != 0)
        #expect(result.error.contains("--metrics-port must differ from --port"), "\(result.error)")
        let format = try await Self.server(["serve", "--log-format", "xml"])
        #expect(format.status != 0)
        #expect(format.error.contains("xml"), "\(format.error)")
        let pool = try await Self.server(["serve", "--database-connections", "0"])
        #expect(pool.status != 0)
        #expect(pool.error.contains("--database-connections must be between 1 and 1000"), "\(pool.error)")
        let changes = try await Self.server(["serve", "--changes-per-user", "0"])
        #expect(changes.status != 0)
        #expect(changes.error.contains("--changes-per-user must be between 1 and 10000"), "\(changes.error)")
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

    /// The retention and the backup bound's way out, as an operator runs them: `audit prune` (and its bad
    /// `--days`), `backups delete` of an id that is not there.
    @Test func theAuditIsPrunedAndBackupsDeletedFromTheCommandLine() async throws {
        let dataDir = Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        _ = try await Self.server(["migrate", "--data-dir", dataDir])
        let pruned = try await Self.server(["audit", "prune", "--data-dir", dataDir])
        #expect(pruned.status == 0, "\(pruned.error)")
        #expect(pruned.output.hasPrefix("Deleted 0 audit entries."), "\(pruned.output)")
        let tooFew = try await Self.server(["audit", "prune", "--days", "3", "--data-dir", dataDir])
        #expect(tooFew.status != 0)
        #expect(tooFew.error.contains("--days must be 7 or more, not 3."), "\(tooFew.error)")
        let missing = try await Self.server(["backups", "delete", "41", "--data-dir", dataDir])
        #expect(missing.status == 1)
        #expect(missing.error == "Error: No kept backup 41.\n", "\(missing.error)")
        let retention = try await Self.server(["settings", "set", "audit.retention-days", "3", "--data-dir", dataDir])
        #expect(retention.status == 1 && retention.error.contains("audit.retention-days"), "\(retention.error)")
    }

    @Test func devicesAreListedRevokedAndOrderedWipedFromTheCommandLine() async throws {
        let server = try await LiveServer.start()
        try await server.addUser("alice", displayName: "Alice", password: "blue-harbour-1234")
        let deviceKey = DeviceKeys.key(for: "tablet-7")
        let signing = P256.Signing.PrivateKey()
        let keyID = Data(SHA256.hash(data: signing.publicKey.x963Representation)).base64URLEncoded
        let proof = try deviceKey.signature(
            for: DeviceRegistry.joinMessage(device: "tablet-7", user: "alice", keyID: keyID))
        _ = try await server.server.devices.register(
            device: "tablet-7", user: "alice", publicKey: signing.publicKey,
            proof: .init(deviceKey: deviceKey.publicKey, signature: proof))
        await server.stop()
        server.server.close()
        defer { try? FileManager.default.removeItem(at: server.directory) }
        let dataDir = server.directory.path

        let listed = try await Self.server(["devices", "list", "--data-dir", dataDir])
        #expect(listed.status == 0)
        #expect(listed.output.hasPrefix("tablet-7  last seen never  app ?  users: alice\n"), "\(listed.output)")
        let revoked = try await Self.server(["devices", "revoke", "tablet-7", "--data-dir", dataDir])
        #expect(revoked.output == "Revoked tablet-7.\n")
        let twice = try await Self.server(["devices", "revoke", "tablet-7", "--data-dir", dataDir])
        #expect(twice.output == "tablet-7 was revoked already.\n")
        let wipe = try await Self.server(["devices", "wipe", "tablet-7", "--data-dir", dataDir])
        #expect(wipe.output == "Ordered tablet-7 to wipe itself at its next contact.\n")
        let after = try await Self.server(["devices", "list", "--data-dir", dataDir])
        #expect(after.output.contains("users: (alice)  [revoked "), "\(after.output)")
        #expect(after.output.contains(", wipe ordered "))
        let unknown = try await Self.server(["devices", "wipe", "no-such-tablet", "--data-dir", dataDir])
        #expect(unknown.status == 1)
        #expect(unknown.error == "Error: There is no device 'no-such-tablet'.\n")
        let audit = try await Self.server(["devices", "list", "--search", "nothing-like-it", "--data-dir", dataDir])
        #expect(audit.output == "No devices.\n")
    }

    /// Adds alice (and optionally seed data) to a fresh data directory, serves it, and runs an interop script.
    static func interopAgainstFreshServer(_ script: String, seed: Bool, settings: [(String, String)] = [])
        async throws
    {
        let dataDir = temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDir) }
        for (key, value) in settings {
            #expect(try await server(["settings", "set", key, value, "--data-dir", dataDir]).status == 0)
        }
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
        // Sign-in through a browser is the admin's choice; the script exercises it too.
        try await Self.interopAgainstFreshServer(
            "oauth_interop", seed: false, settings: [("sign-in.methods", "password,device")])
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
