import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSecureStore
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

/// The offline store inside the onboarding lifecycle: opened per user, synced on restore, and the
/// pending-changes rule on user removal.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct OfflineStepTests {
    func device(_ server: LiveServer, answers: [ScriptedPresenter.Answer]) throws -> (
        OnboardingSessionManager, ScriptedPresenter, OfflineStore, URL
    ) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-step-\(UUID())")
        let deviceID = try DeviceStorage(directory: directory).deviceID()
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: deviceID, definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")])
        var configuration = FlowsConfiguration(mode: .multiUser)
        configuration.keyDerivation = { KeyDerivation(cost: 1 << 10) }
        configuration.removalGuard = { user in try await store.requireNoPendingChanges(of: user.serverUserID ?? "") }
        let presenter = ScriptedPresenter(answers)
        let manager = try OnboardingSessionManager(
            serverURL: server.url, directory: directory, configuration: configuration, presenter: presenter,
            flowProvider: StandardFlowProvider(appSteps: [OfflineStoreStep(store: store)]))
        return (manager, presenter, store, directory)
    }

    @Test func restoreSyncsAndRemovalWaitsForPendingChanges() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        // A supervisor: the seeded checks she corrects are final and someone else's.
        try await server.addUser("alice", displayName: "Alice", role: .supervisor, password: "blue-harbour-1234")
        try await server.addUser("bob", displayName: "Bob", password: "green-meadow-5678")
        _ = try await server.server.seed(aircraft: 2, checks: 5)
        let (manager, presenter, store, directory) = try device(
            server,
            answers: [
                .credentials("alice", "blue-harbour-1234"), .newPasscode("alice-pass-1", confirmation: "alice-pass-1"),
                .credentials("bob", "green-meadow-5678"), .newPasscode("bob-pass-12", confirmation: "bob-pass-12"),
            ])
        let alice = try await manager.open()
        #expect(await store.currentUser == "alice")
        #expect(try await store.count("PreflightChecks") == 5)
        let id = try #require(try await store.read("PreflightChecks?$top=1").first?.id)
        try await store.update(id, values: ["Remarks": .string("by alice")])

        _ = try await manager.addUser()
        #expect(await store.currentUser == "bob")
        // Alice comes back: her restore uploads her change.
        await presenter.append([.passcode("alice-pass-1")])
        let back = try await manager.switchUser(to: alice.user.onboardingID)
        #expect(back.syncReport?.upload.uploadedByAuthor == ["alice": 1])
        #expect(try await store.pendingEntries().isEmpty)

        // A pending change blocks her removal until it is discarded (with an encrypted backup).
        try await store.update(id, values: ["Remarks": .string("again")])
        let refused = await #expect(throws: OfflineError.self) { try await manager.removeUser() }
        #expect(refused?.code == .pendingChanges)
        #expect(await manager.users.activeUsers.count == 2)
        let backup = directory.appendingPathComponent("alice-discarded.backup")
        let discarded = try await store.discardPendingChanges(
            of: "alice", backupTo: backup, key: SymmetricKey(data: try #require(back.storeKey)))
        #expect(discarded == 1)
        #expect(try Data(contentsOf: backup).range(of: Data("again".utf8)) == nil)
        await presenter.append([.pick("Bob"), .passcode("bob-pass-12")])
        let next = try await manager.removeUser()
        #expect(next?.user.displayName == "Bob")
        #expect(await store.currentUser == "bob")
    }
}
