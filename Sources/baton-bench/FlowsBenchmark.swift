import BatonClient
import BatonFlows
import BatonOData
import BatonSecureStore
import BatonTesting
import Foundation

/// `baton-bench --flows`: unlock (passcode -> secure store open, session usable) and a user switch (lock
/// user A -> user B usable), with OWASP scrypt parameters, against a live server on loopback — next to the
/// key derivation alone, so the report shows what everything except the KDF costs (target: under 20 ms).
struct FlowsBenchmark {
    let repetitions: Int

    func run() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        try await server.addUser("alice", displayName: "Alice", password: "blue-harbour-1234")
        try await server.addUser("bob", displayName: "Bob", password: "green-meadow-5678")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-flows-bench-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let presenter = ScriptedPresenter([
            .credentials("alice", "blue-harbour-1234"), .newPasscode("12345678", confirmation: "12345678"),
            .credentials("bob", "green-meadow-5678"), .newPasscode("87654321", confirmation: "87654321"),
        ])
        let manager = try OnboardingSessionManager(
            serverURL: server.url, directory: directory, configuration: FlowsConfiguration(mode: .multiUser),
            presenter: presenter)
        let alice = try await manager.open()
        let bob = try await manager.addUser()
        let kdf = KeyDerivation.recommended()

        var unlock: [Duration] = []
        var switching: [Duration] = []
        var derivation: [Duration] = []
        let clock = ContinuousClock()
        for index in 0..<repetitions {
            derivation.append(try clock.measure { _ = try kdf.deriveKey(from: "12345678") })
            // Unlock: the session is locked; the passcode opens the store and the session is usable.
            await manager.lock()
            await presenter.append([.passcode(index.isMultiple(of: 2) ? "87654321" : "12345678")])
            unlock.append(try await clock.measure { _ = try await manager.unlock() })
            // Switch: lock the current user, the other one is usable.
            let other = (await manager.session?.user.onboardingID == alice.user.onboardingID) ? bob : alice
            await presenter.append([
                .passcode(other.user.onboardingID == alice.user.onboardingID ? "12345678" : "87654321")
            ])
            switching.append(try await clock.measure { _ = try await manager.switchUser(to: other.user.onboardingID) })
        }
        // A settings refresh that finds nothing changed: one conditional request, answered 304.
        var refresh: [Duration] = []
        var contact: [Duration] = []
        var unchanged = 0
        let session = try await manager.open()
        guard let configuration = session.info[.serverConfiguration] else {
            throw ProfileError("The session has no server configuration.")
        }
        let etag = await manager.users.lastKnownSettings?.etag
        for _ in 0..<max(repetitions * 10, 50) {
            let token = try await session.authorized.accessToken()
            var answer = SettingsAnswer.changed(ClientSettings(), etag: nil)
            refresh.append(
                try await clock.measure {
                    answer = try await manager.client.settings(configuration, token: token, etag: etag)
                })
            if answer == .unchanged { unchanged += 1 }
            // The whole contact: reachability, the 304, the device's status.
            contact.append(try await clock.measure { _ = try await manager.contactServer() })
        }
        // Unlock with no refresh due: the server is gone, the last known settings hold.
        await server.shutDown()
        var offlineUnlock: [Duration] = []
        for _ in 0..<repetitions {
            await manager.lock()
            let current = await manager.lockedUser == alice.user.onboardingID ? "12345678" : "87654321"
            await presenter.append([.passcode(current)])
            offlineUnlock.append(try await clock.measure { _ = try await manager.unlock() })
        }
        func median(_ values: [Duration]) -> Double {
            let sorted = values.sorted()
            let middle = sorted[sorted.count / 2]
            return Double(middle.components.seconds) * 1000 + Double(middle.components.attoseconds) / 1e15
        }
        let kdfMs = median(derivation)
        print("Flows, \(repetitions) repetitions, medians (scrypt N=2^17 r=8 p=1):\n")
        print(String(format: "key derivation alone      %8.1f ms", kdfMs))
        for (name, values) in [("unlock", unlock), ("switch user", switching)] {
            let total = median(values)
            print(
                name.padding(toLength: 25, withPad: " ", startingAt: 0)
                    + String(
                        format: " %8.1f ms   KDF share %5.1f%%   everything else %6.1f ms", total, kdfMs / total * 100,
                        max(0, total - kdfMs)))
        }
        let offline = median(offlineUnlock)
        print(
            "unlock, server gone".padding(toLength: 25, withPad: " ", startingAt: 0)
                + String(
                    format: " %8.1f ms   KDF share %5.1f%%   everything else %6.1f ms", offline, kdfMs / offline * 100,
                    max(0, offline - kdfMs)))
        print(
            String(
                format: "\nsettings refresh, unchanged %6.2f ms  (%d of %d answered 304)", median(refresh), unchanged,
                refresh.count))
        print(String(format: "contact (304 + device status) %5.2f ms", median(contact)))
        print("\nTargets: everything except the KDF under 20 ms; an unchanged refresh one 304 in at most 5 ms.")
    }
}
