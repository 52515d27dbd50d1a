import BatonTestSupport
import BatonTesting
import Foundation
import Testing

@testable import baton

/// The interactive app driven as a person would: the built `baton` in an 80x24 pseudo-terminal (pexpect)
/// against a real `baton-server` that the script stops and restarts to cut the network.
// 25 minutes: the handover script alone took 290 s on the 2-core machine, and 462 s then 609 s (over the old 10) as
// part of the whole suite on one evening; the limit is there to end a hang, not to time the script. It counts the
// wait for the interactive slot too.
@Suite(.serverSlot, .timeLimit(.minutes(25)), .interactiveSlot) struct TerminalAppTests {
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

    static var serverBinary: URL {
        BatonExecutableTests.executable.deletingLastPathComponent().appendingPathComponent("baton-server")
    }

    /// Starts the built `baton-server` on a free port over `data`; returns the process and its URL.
    static func serve(_ data: String) async throws -> (Process, String) {
        let server = Process()
        server.executableURL = serverBinary
        server.arguments = ["serve", "--port", "0", "--data-dir", data, "--log-level", "error"]
        let output = Pipe()
        server.standardOutput = output
        server.standardError = FileHandle.nullDevice
        try server.runAlone()
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
        return (server, url)
    }

    /// Adds `users` (name, role, password) to the server data in `data` and seeds it, as an admin would.
    static func prepareServer(_ data: String, users: [(String, String, String)], aircraft: Int, checks: Int)
        async throws
    {
        for (name, role, password) in users {
            let added = try await BatonExecutableTests.run(
                ["user", "add", name, "--role", role, "--data-dir", data, "--password-stdin", "--bcrypt-cost", "4"],
                executable: serverBinary, input: password + "\n")
            #expect(added.status == 0, "\(added.error)")
        }
        let seeded = try await BatonExecutableTests.run(
            ["seed", "--aircraft", "\(aircraft)", "--checks", "\(checks)", "--data-dir", data], executable: serverBinary
        )
        #expect(seeded.status == 0, "\(seeded.error)")
    }

    @Test func checksAreCorrectedFinalizedAndDeletedFromScripts() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-edit-\(UUID())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let serverData = work.appendingPathComponent("server").path
        try await Self.prepareServer(
            serverData,
            users: [("alice", "ground-staff", "blue-harbour-1234"), ("sam", "supervisor", "grey-pebble-4321")],
            aircraft: 2, checks: 4)
        let (server, url) = try await Self.serve(serverData)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let device = work.appendingPathComponent("device").path
        func baton(_ arguments: [String], as user: String, passcode: String) async throws -> BatonExecutableTests.Result
        {
            try await BatonExecutableTests.run(
                arguments + ["--data-dir", device, "--user", user, "--passcode-stdin"], input: passcode + "\n")
        }
        let alice = try await BatonExecutableTests.run(
            [
                "users", "add", "--data-dir", device, "--server", url, "--password-stdin", "--user", "alice",
                "--consent", "data,usage",
            ],
            input: "blue-harbour-1234\nalice-2468x\n")
        #expect(alice.status == 0, "\(alice.error)")
        let aircraft = try await baton(["aircraft", "--json"], as: "alice", passcode: "alice-2468x")
        let tails = try #require(try JSONSerialization.jsonObject(with: Data(aircraft.output.utf8)) as? [[String: Any]])
        let tail = try #require(tails.first?["tailNumber"] as? String)
        let check = [
            "checks", "add", "--tail", tail, "--fuel-kg", "5200", "--main-psi", "200", "--nose-psi", "60",
            "--oil-quarts", "15", "--status", "draft", "--json",
        ]
        let draft = try await baton(check, as: "alice", passcode: "alice-2468x")
        let draftID = try #require(
            (try JSONSerialization.jsonObject(with: Data(draft.output.utf8)) as? [String: Any])?["id"] as? String)
        let second = try await baton(check, as: "alice", passcode: "alice-2468x")
        let secondID = try #require(
            (try JSONSerialization.jsonObject(with: Data(second.output.utf8)) as? [String: Any])?["id"] as? String)

        // Bad input is refused before the passcode; an unknown check is not found.
        let bad = try await baton(["checks", "edit", draftID, "--fuel-kg", "lots"], as: "alice", passcode: "x")
        #expect(bad.status == 6 && bad.error.contains("Fuel"), "\(bad.error)")
        let nothing = try await baton(["checks", "edit", draftID], as: "alice", passcode: "alice-2468x")
        #expect(nothing.status == 6 && nothing.error.contains("Nothing to change"), "\(nothing.error)")
        let unknown = try await baton(
            ["checks", "finalize", "PreflightChecks(999999)"], as: "alice", passcode: "alice-2468x")
        #expect(unknown.status == 7, "\(unknown.error)")

        let edited = try await baton(
            ["checks", "edit", draftID, "--fuel-kg", "5300", "--remarks", "Topped up"], as: "alice",
            passcode: "alice-2468x")
        #expect(edited.status == 0, "\(edited.error)")
        #expect(try await baton(["checks", "finalize", draftID], as: "alice", passcode: "alice-2468x").status == 0)
        let again = try await baton(["checks", "finalize", draftID], as: "alice", passcode: "alice-2468x")
        #expect(again.status == 6 && again.error.contains("final already"), "\(again.error)")
        #expect(try await baton(["checks", "delete", secondID], as: "alice", passcode: "alice-2468x").status == 0)
        // Ground staff set no aircraft status, and edit nobody else's check.
        let status = try await baton(
            ["aircraft", "set-status", tail, "maintenance"], as: "alice", passcode: "alice-2468x")
        #expect(status.status == 9 && status.error.contains("supervisor"), "\(status.error)")
        let others = tails.compactMap { ($0["latestCheck"] as? [String: Any])?["id"] as? String }
        if let seededID = others.first {
            let foreign = try await baton(
                ["checks", "edit", seededID, "--oil-quarts", "12"], as: "alice", passcode: "alice-2468x")
            #expect(foreign.status == 9, "\(foreign.error)")
        }

        let sync = try await baton(["sync", "--json"], as: "alice", passcode: "alice-2468x")
        #expect(sync.status == 0, "\(sync.error) \(sync.output)")
        let listed = try await baton(
            ["checks", "list", "--tail", tail, "--json", "--top", "50"], as: "alice", passcode: "alice-2468x")
        let checks = try #require(try JSONSerialization.jsonObject(with: Data(listed.output.utf8)) as? [[String: Any]])
        let mine = try #require(checks.first { $0["id"] as? String == draftID })
        #expect(mine["fuelKg"] as? String == "5300" && mine["status"] as? String == "final")
        #expect(mine["remarks"] as? String == "Topped up" && mine["onDevice"] as? Bool == false)
        #expect(!checks.contains { $0["id"] as? String == secondID })
    }

    /// The server's copy changes while the device is offline: the device's update goes to the error archive,
    /// `baton archive` shows both versions field by field, and each resolution lands on the server.
    @Test func aConflictShowsBothVersionsAndEachResolutionLands() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-conflict-\(UUID())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let serverData = work.appendingPathComponent("server").path
        try await Self.prepareServer(
            serverData,
            users: [("alice", "ground-staff", "blue-harbour-1234"), ("sam", "supervisor", "grey-pebble-4321")],
            aircraft: 1, checks: 0)
        let (server, url) = try await Self.serve(serverData)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        // Sam, a supervisor, works on the tablet at the stand; alice at the office.
        let tablet = work.appendingPathComponent("tablet").path
        let office = work.appendingPathComponent("office").path
        func baton(_ arguments: [String], on device: String, as user: String, passcode: String) async throws
            -> BatonExecutableTests.Result
        {
            try await BatonExecutableTests.run(
                arguments + ["--data-dir", device, "--user", user, "--passcode-stdin"], input: passcode + "\n")
        }
        func json(_ result: BatonExecutableTests.Result) throws -> [[String: Any]] {
            try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String: Any]])
        }
        for (device, user, secrets) in [
            (office, "alice", "blue-harbour-1234\nalice-2468x\n"), (tablet, "sam", "grey-pebble-4321\nsam-13579x\n"),
        ] {
            let added = try await BatonExecutableTests.run(
                [
                    "users", "add", "--data-dir", device, "--server", url, "--password-stdin", "--user", user,
                    "--consent", "data",
                ],
                input: secrets)
            #expect(added.status == 0, "\(added.error)")
        }
        let tail = try #require(
            try json(try await baton(["aircraft", "--json"], on: office, as: "alice", passcode: "alice-2468x")).first?[
                "tailNumber"] as? String)
        // Alice records three checks and syncs them; sam's tablet downloads them.
        var ids: [String] = []
        for _ in 0..<3 {
            let added = try await baton(
                [
                    "checks", "add", "--tail", tail, "--fuel-kg", "5200", "--main-psi", "200", "--nose-psi", "60",
                    "--oil-quarts", "15", "--json",
                ], on: office, as: "alice", passcode: "alice-2468x")
            ids.append(
                try #require(
                    (try JSONSerialization.jsonObject(with: Data(added.output.utf8)) as? [String: Any])?["id"]
                        as? String))
        }
        #expect(try await baton(["sync"], on: office, as: "alice", passcode: "alice-2468x").status == 0)
        #expect(try await baton(["sync"], on: tablet, as: "sam", passcode: "sam-13579x").status == 0)

        // Offline, sam corrects the fuel; meanwhile alice adds remarks at the office.
        for id in ids {
            let edited = try await baton(
                ["checks", "edit", id, "--fuel-kg", "5300", "--offline"], on: tablet, as: "sam",
                passcode: "sam-13579x")
            #expect(edited.status == 0, "\(edited.error)")
            let remarked = try await baton(
                ["checks", "edit", id, "--remarks", "Seal replaced"], on: office, as: "alice", passcode: "alice-2468x")
            #expect(remarked.status == 0, "\(remarked.error)")
        }
        #expect(try await baton(["sync"], on: office, as: "alice", passcode: "alice-2468x").status == 0)
        let refused = try await baton(["sync"], on: tablet, as: "sam", passcode: "sam-13579x")
        #expect(refused.status == 5, "\(refused.error) \(refused.output)")

        // Both versions, field by field.
        let shown = try await baton(["archive"], on: tablet, as: "sam", passcode: "sam-13579x")
        #expect(shown.status == 0, "\(shown.error)")
        let fuelRow = ConflictView.row("*", "FuelKg", "5200", "5300")
        #expect(shown.output.contains("ON THE SERVER") && shown.output.contains(fuelRow), "\(shown.output)")
        // The download after the refusal brought the server's version: only the fuel differs.
        #expect(shown.output.contains("11 other fields the same on both"), "\(shown.output)")
        let archive = try json(try await baton(["archive", "--json"], on: tablet, as: "sam", passcode: "sam-13579x"))
        #expect(archive.count == 3)
        #expect(Set(archive.compactMap { $0["entity"] as? String }) == Set(ids))
        for entry in archive {
            #expect(entry["status"] as? Int == 412)
            let fields = try #require(entry["fields"] as? [[String: Any]])
            let fuel = try #require(fields.first { $0["property"] as? String == "FuelKg" })
            #expect(fuel["server"] as? String == "5200" && fuel["mine"] as? String == "5300")
            #expect(fuel["changedHere"] as? Bool == true)
            let remarks = try #require(fields.first { $0["property"] as? String == "Remarks" })
            #expect(remarks["server"] as? String == "Seal replaced" && remarks["changedHere"] as? Bool == false)
        }

        // Bad resolutions are refused and change nothing.
        for (arguments, status) in [
            (["archive", "resolve", "1"], 64), (["archive", "resolve", "1", "--keep-mine", "--take-theirs"], 64),
            (["archive", "resolve", "1", "--keep-mine", "--fuel-kg", "1"], 64),
            (["archive", "resolve", "1", "--edit"], 6), (["archive", "resolve", "9", "--take-theirs"], 7),
            (["archive", "resolve", "1", "--edit", "--fuel-kg", "lots"], 6),
        ] as [([String], Int32)] {
            let result = try await baton(arguments, on: tablet, as: "sam", passcode: "sam-13579x")
            #expect(result.status == status, "\(arguments): \(result.error)")
        }
        #expect(
            try json(try await baton(["archive", "--json"], on: tablet, as: "sam", passcode: "sam-13579x")).count == 3)

        // A colleague on the tablet may not drop sam's change for the server's version.
        let joined = try await BatonExecutableTests.run(
            [
                "users", "add", "--data-dir", tablet, "--password-stdin", "--user", "alice", "--consent", "data",
                "--approver", "sam",
            ], input: "blue-harbour-1234\nalice-2468x\nsam-13579x\n")
        #expect(joined.status == 0, "\(joined.error)")
        let colleague = try await baton(
            ["archive", "resolve", "1", "--take-theirs"], on: tablet, as: "alice", passcode: "alice-2468x")
        #expect(colleague.status == 9 && colleague.error.contains("sam's change"), "\(colleague.error)")

        // Keep mine, take theirs (by request id), edit.
        let byEntity = Dictionary(uniqueKeysWithValues: archive.map { ($0["entity"] as? String ?? "", $0) })
        let resolutions: [[String]] = [
            ["--keep-mine"], ["--take-theirs"],
            ["--edit", "--fuel-kg", "5400", "--remarks", "Seal replaced, topped up"],
        ]
        for (id, resolution) in zip(ids, resolutions) {
            let requestID = try #require(byEntity[id]?["requestID"] as? String)
            let resolved = try await baton(
                ["archive", "resolve", requestID] + resolution, on: tablet, as: "sam", passcode: "sam-13579x")
            #expect(resolved.status == 0, "\(resolution): \(resolved.error)")
        }
        let empty = try await baton(["archive"], on: tablet, as: "sam", passcode: "sam-13579x")
        #expect(empty.output.contains("The error archive is empty."), "\(empty.output)")
        let synced = try await baton(["sync"], on: tablet, as: "sam", passcode: "sam-13579x")
        #expect(synced.status == 0, "\(synced.error) \(synced.output)")

        // What the server has, as alice's office device downloads it.
        #expect(try await baton(["sync"], on: office, as: "alice", passcode: "alice-2468x").status == 0)
        let listed = try json(
            try await baton(
                ["checks", "list", "--tail", tail, "--json"], on: office, as: "alice", passcode: "alice-2468x"))
        let onServer = Dictionary(uniqueKeysWithValues: listed.map { ($0["id"] as? String ?? "", $0) })
        let expected: [(fuel: String, remarks: String, by: String)] = [
            ("5300", "Seal replaced", "sam"), ("5200", "Seal replaced", "alice"),
            ("5400", "Seal replaced, topped up", "sam"),
        ]
        for (id, want) in zip(ids, expected) {
            let check = try #require(onServer[id])
            #expect(check["fuelKg"] as? String == want.fuel, "\(check)")
            #expect(check["remarks"] as? String == want.remarks, "\(check)")
            #expect(check["checkedBy"] as? String == want.by, "\(check)")
        }
    }

    /// Usage events (only of users who agreed) and the device's log reach the server — on an admin's order, by
    /// setting, and sent to support — and neither they nor the device's files hold a secret or a value.
    @Test func usageAndLogsReachTheServerAndHoldNoSecret() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-telemetry-\(UUID())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let serverData = work.appendingPathComponent("server").path
        let secrets = [
            "alice": ("blue-harbour-1234", "alice-2468x"), "bob": ("green-meadow-5678", "bob-13579x"),
        ]
        try await Self.prepareServer(
            serverData, users: secrets.map { ($0.key, "ground-staff", $0.value.0) }, aircraft: 2, checks: 2)
        func server(_ arguments: [String]) async throws -> BatonExecutableTests.Result {
            let result = try await BatonExecutableTests.run(
                arguments + ["--data-dir", serverData], executable: Self.serverBinary)
            #expect(result.status == 0, "\(arguments): \(result.error)")
            return result
        }
        let (process, url) = try await Self.serve(serverData)
        defer {
            process.terminate()
            process.waitUntilExit()
        }
        let device = work.appendingPathComponent("device").path
        func baton(_ arguments: [String], as user: String) async throws -> BatonExecutableTests.Result {
            let result = try await BatonExecutableTests.run(
                arguments + ["--data-dir", device, "--user", user, "--passcode-stdin"],
                input: (secrets[user]?.1 ?? "") + "\n")
            #expect(result.status == 0, "\(arguments): \(result.error)")
            return result
        }
        let alice = try await BatonExecutableTests.run(
            [
                "users", "add", "--data-dir", device, "--server", url, "--password-stdin", "--user", "alice",
                "--consent", "data,usage",
            ], input: "blue-harbour-1234\nalice-2468x\n")
        #expect(alice.status == 0, "\(alice.error)")
        let bob = try await BatonExecutableTests.run(
            [
                "users", "add", "--data-dir", device, "--password-stdin", "--user", "bob", "--consent", "data",
                "--approver", "alice",
            ], input: "green-meadow-5678\nbob-13579x\nalice-2468x\n")
        #expect(bob.status == 0, "\(bob.error)")
        let deviceID = try String(contentsOfFile: device + "/device.id", encoding: .utf8)
        let tail = try #require(
            (try JSONSerialization.jsonObject(
                with: Data(try await baton(["aircraft", "--json"], as: "alice").output.utf8))
                as? [[String: Any]])?.first?["tailNumber"] as? String)
        let remarks = "Hydraulic seep at strut 77"
        _ = try await baton(
            [
                "checks", "add", "--tail", tail, "--fuel-kg", "5217.5", "--main-psi", "201.5", "--nose-psi", "61",
                "--oil-quarts", "14.25", "--remarks", remarks,
            ], as: "alice")
        _ = try await baton(["sync"], as: "alice")
        // Bob did not agree to usage data: his sync is not counted. An admin asks for the log: his sync sends it.
        _ = try await server(["logs", "request", deviceID])
        #expect(try await server(["logs", "list"]).output.contains("[log requested]"))
        _ = try await baton(["sync"], as: "bob")
        #expect(try await !server(["logs", "list"]).output.contains("[log requested]"))
        // Alice sends it to support; then the server wants it with every sync.
        _ = try await baton(["logs", "send"], as: "alice")
        _ = try await server(["settings", "set", "telemetry.logs-with-sync", "true"])
        _ = try await baton(["sync"], as: "alice")

        let usage = try #require(
            try JSONSerialization.jsonObject(
                with: Data(try await server(["logs", "show", deviceID, "--usage", "--json"]).output.utf8))
                as? [[String: Any]])
        #expect(usage.compactMap { $0["name"] as? String } == ["sync", "sync"], "\(usage)")
        #expect(usage.allSatisfy { ($0["durationMs"] as? Int).map { $0 >= 0 } == true })
        let shown = try await server(["logs", "show", deviceID]).output
        let uploads = try #require(
            try JSONSerialization.jsonObject(
                with: Data(try await server(["logs", "show", deviceID, "--json"]).output.utf8))
                as? [[String: Any]])
        #expect(uploads.compactMap { $0["reason"] as? String } == ["setting", "support", "requested"], "\(shown)")
        #expect(shown.contains("info baton: sync done"), "\(shown)")

        // Without the setting, a sync's log lines stay on the device, sealed.
        _ = try await server(["settings", "set", "telemetry.logs-with-sync", "false"])
        _ = try await baton(["sync"], as: "bob")
        // No secret, token or value anywhere the server keeps them, nor readable in the device's files.
        var kept = shown + (try await server(["logs", "show", deviceID, "--usage"]).output)
        let files = try FileManager.default.subpathsOfDirectory(atPath: device + "/logs")
        #expect(!files.isEmpty)
        for file in files {
            let raw = try Data(contentsOf: URL(fileURLWithPath: device + "/logs/" + file))
            kept += String(decoding: raw, as: UTF8.self)
            #expect(raw.range(of: Data("sync done".utf8)) == nil, "\(file) is readable")
        }
        let forbidden =
            secrets.values.flatMap { [$0.0, $0.1] } + [
                remarks, "Hydraulic", "5217.5", "201.5", "14.25", "eyJ", "Bearer",
            ]
        for secret in forbidden { #expect(!kept.contains(secret), "\(secret) reached a log") }
    }

    @Test func aSecondUserJoinsFromAScriptOnlyWithAnApprover() async throws {
        let work = FileManager.default.temporaryDirectory.appendingPathComponent("baton-join-\(UUID())")
        try FileManager.default.createDirectory(at: work, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: work) }
        let serverData = work.appendingPathComponent("server").path
        let serverBinary = Self.serverBinary
        for (name, password) in [("alice", "blue-harbour-1234"), ("bob", "green-meadow-5678")] {
            let added = try await BatonExecutableTests.run(
                ["user", "add", name, "--data-dir", serverData, "--password-stdin", "--bcrypt-cost", "4"],
                executable: serverBinary, input: password + "\n")
            #expect(added.status == 0, "\(added.error)")
        }
        let (server, url) = try await Self.serve(serverData)
        defer {
            server.terminate()
            server.waitUntilExit()
        }
        let device = work.appendingPathComponent("device").path
        func add(_ arguments: [String], input: String) async throws -> BatonExecutableTests.Result {
            try await BatonExecutableTests.run(
                ["users", "add", "--data-dir", device, "--server", url, "--password-stdin"] + arguments, input: input)
        }
        // Data consent is needed: without it nothing is kept, and the error says how to give it.
        let unwilling = try await add(["--user", "alice"], input: "blue-harbour-1234\nalice-2468x\n")
        #expect(unwilling.status == 9 && unwilling.error.contains("--consent data"), "\(unwilling.error)")
        let bad = try await add(
            ["--user", "alice", "--consent", "data,ads"], input: "blue-harbour-1234\nalice-2468x\n")
        #expect(bad.status == 64 && bad.error.contains("not 'ads'"), "\(bad.error)")
        #expect(try await BatonExecutableTests.run(["users", "--data-dir", device]).output.contains("Nobody uses"))
        let alice = try await add(["--user", "alice", "--consent", "data"], input: "blue-harbour-1234\nalice-2468x\n")
        #expect(alice.status == 0, "\(alice.error)")
        let consent = try await BatonExecutableTests.run(
            ["users", "consent", "--data-dir", device, "--user", "alice", "--passcode-stdin", "--usage", "on"],
            input: "alice-2468x\n")
        #expect(consent.output == "data: agreed\nusage: agreed\n", "\(consent.output) \(consent.error)")
        // Bob's password alone does not get him onto the tablet.
        let alone = try await add(["--consent", "data", "--user", "bob"], input: "green-meadow-5678\nbob-13579x\n")
        #expect(alone.status != 0)
        #expect(alone.error.contains("Name them with --approver USER"), "\(alone.error)")
        let wrong = try await add(
            ["--consent", "data", "--user", "bob", "--approver", "alice"],
            input: "green-meadow-5678\nbob-13579x\nnot-it-123\n")
        #expect(wrong.status == 3, "\(wrong.error)")
        let approved = try await add(
            ["--consent", "data", "--user", "bob", "--approver", "alice"],
            input: "green-meadow-5678\nbob-13579x\nalice-2468x\n")
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
