import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonTesting
import Foundation

/// The shift handover (docs/ARCHITECTURE.md), played on real components: an embedded baton-server on 127.0.0.1, a
/// shared device with real secure stores and the offline store, the network cut by stopping the server.
/// The people's answers (credentials, passcodes, user picks) come from a script.
struct HandoverDemo {
    var failures = 0
    let directory: URL

    mutating func expect(_ condition: Bool, _ what: String) {
        print(condition ? "  ✓ \(what)" : "  ✗ \(what)")
        if !condition { failures += 1 }
    }

    mutating func play() async throws {
        print("Baton demo — the shift handover, on real components\n")
        let alicePassword = "blue-harbour-" + UUID().uuidString.prefix(6)
        let bobPassword = "green-meadow-" + UUID().uuidString.prefix(6)
        var server = try await LiveServer.start(directory: directory.appendingPathComponent("server"))
        defer { let running = server; Task { await running.stop() } }
        try await server.addUser("alice", displayName: "Alice", password: alicePassword)
        try await server.addUser("bob", displayName: "Bob", password: bobPassword)
        let seeded = try await server.server.seed(aircraft: 6, checks: 12)
        let client = BatonClient(serverURL: server.url)
        print("1. baton-server on \(server.url.absoluteString) with users alice and bob, \(seeded.aircraft) aircraft")
        let reachable = await client.isReachable(timeout: .seconds(10))
        expect(reachable, "the server answers")

        let deviceDirectory = directory.appendingPathComponent("device")
        let deviceID = try DeviceStorage(directory: deviceDirectory).deviceID()
        let store = try OfflineStore(
            url: deviceDirectory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: deviceID,
            definingQueries: [
                DefiningQuery(name: "aircraft", url: "Aircraft"), DefiningQuery(name: "checks", url: "PreflightChecks"),
            ])
        let presenter = ScriptedPresenter([
            .credentials("alice", alicePassword), .newPasscode("alice-2468", confirmation: "alice-2468"),
            .credentials("bob", bobPassword), .newPasscode("bob-13579", confirmation: "bob-13579"),
        ])
        let sessions = try OnboardingSessionManager(
            serverURL: server.url, directory: deviceDirectory, configuration: FlowsConfiguration(mode: .multiUser),
            presenter: presenter, flowProvider: StandardFlowProvider(appSteps: [OfflineStoreStep(store: store)]))

        print("\n2. Alice onboards on the shared tablet: sign-in, passcode, device registration, store key, download")
        let alice = try await sessions.open()
        let keys = try await server.server.devices.signingKeys(device: deviceID, user: "alice")
        expect(keys.count == 1, "the server has alice's signing key for this tablet")
        let aircraft = try await store.read("Aircraft?$orderby=TailNumber")
        let checks = try await store.count("PreflightChecks")
        expect(
            aircraft.count == seeded.aircraft && checks == seeded.checks,
            "the tablet downloaded \(aircraft.count) aircraft and \(checks) checks")

        print("\n3. Bob is added to the same tablet (no one signs out)")
        let bob = try await sessions.addUser()
        let users = await sessions.users.activeUsers.map(\.displayName)
        expect(users == ["Alice", "Bob"], "two users on the tablet: Alice, Bob")

        print("\n4. The network is cut: the server stops")
        await server.stop()
        let cut = await !client.isReachable()
        expect(cut, "the server cannot be reached")

        print("\n5. Alice switches back (passcode only, no network) and records a pre-flight check")
        await presenter.append([.pick("Alice"), .passcode("alice-2468")])
        let aliceAgain = try await sessions.switchUser()
        expect(aliceAgain.user.onboardingID == alice.user.onboardingID, "alice's session is open again, offline")
        guard case .string(let tail)? = aircraft.first?.values["TailNumber"] else {
            throw DemoFailure("No aircraft to check.")
        }
        let aliceCheck = try await store.create(
            in: "PreflightChecks",
            values: [
                "ID": .guid(UUID()), "TailNumber": .string(tail), "FuelKg": .decimal(5200),
                "TyrePressureMainPsi": .decimal(200.5), "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15),
                "Status": .string("final"), "Remarks": .string("Fuel sample clear"),
            ])
        let local = try await store.read(aliceCheck).first
        expect(
            local?.pending == true && local?.values["CheckedBy"] == .string("alice"),
            "\(tail) FuelKg 5200 is on the tablet, pending, CheckedBy alice")
        print("   Alice locks the tablet at the end of her shift.")
        await sessions.lock()
        await store.close()

        print("\n6. Bob signs in with no network and records his own check")
        await presenter.append([.pick("Bob"), .passcode("bob-13579")])
        let bobSession = try await sessions.switchUser()
        expect(bobSession.user.onboardingID == bob.user.onboardingID, "bob's session is open, offline")
        let seen = try await store.read(aliceCheck).first?.pending == true
        expect(seen, "bob sees alice's check, not yet on the server")
        let bobCheck = try await store.create(
            in: "PreflightChecks",
            values: [
                "ID": .guid(UUID()), "TailNumber": .string(tail), "FuelKg": .decimal(6100),
                "TyrePressureMainPsi": .decimal(201), "TyrePressureNosePsi": .decimal(61), "OilQuarts": .decimal(14.5),
                "Status": .string("final"),
            ])
        let pending = try await store.pendingCounts()
        expect(pending == ["alice": 1, "bob": 1], "pending on the tablet: 1 change by alice, 1 by bob")

        let marker = "Fuel sample clear"
        var plaintext = false
        for name in (try? FileManager.default.subpathsOfDirectory(atPath: deviceDirectory.path)) ?? [] {
            let data = (try? Data(contentsOf: deviceDirectory.appendingPathComponent(name))) ?? Data()
            if data.range(of: Data(marker.utf8)) != nil || data.range(of: Data(tail.utf8)) != nil { plaintext = true }
        }
        expect(!plaintext, "no file on the tablet holds \"\(marker)\" or \(tail) in plain text (AES-256-GCM pages)")

        print("\n7. The network comes back and Bob syncs")
        server = try await server.restarted()
        let report = try await store.upload(
            using: bobSession.authorized,
            allowOnBehalf: bobSession.settings.sharedDevices.uploadPendingChangesOfPreviousUser)
        expect(
            report.isComplete && report.uploadedByAuthor == ["alice": 1, "bob": 1],
            "uploaded 2 changes: 1 bob's, 1 alice's on her behalf")
        for (id, fuel, author) in [(aliceCheck, "5200", "alice"), (bobCheck, "6100", "bob")] {
            let response = try await bobSession.authorized.send(
                ClientRequest(url: try url(server.url.absoluteString + "/odata/" + id)))
            let json = try JSONValue(parsing: response.body)
            let checkedBy = json["CheckedBy"]?.stringValue ?? "?"
            let uploadedBy = json["UploadedBy"]?.stringValue ?? "?"
            let fuelKg = json["FuelKg"].map { $0.serialized } ?? "?"
            expect(
                response.status == 200 && fuelKg == fuel && checkedBy == author && uploadedBy == "bob",
                "server: PreflightCheck \(tail) FuelKg \(fuelKg), CheckedBy \(checkedBy), UploadedBy \(uploadedBy)")
        }
        let left = try await store.pendingEntries()
        expect(left.isEmpty, "nothing is left pending on the tablet")
        let downloaded = try await store.download(using: bobSession.authorized)
        expect(downloaded.pages > 0, "bob's download brings the tablet up to date (\(downloaded.updated) updates)")
    }

    func url(_ text: String) throws -> URL {
        guard let url = URL(string: text) else { throw DemoFailure("Not a URL: \(text)") }
        return url
    }
}

struct DemoFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
