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
    @Test func restoreSyncsAndRemovalWaitsForPendingChanges() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        // A supervisor: the seeded checks she corrects are final and someone else's.
        try await server.addUser("alice", displayName: "Alice", role: .supervisor, password: "blue-harbour-1234")
        try await server.addUser("bob", displayName: "Bob", password: "green-meadow-5678")
        _ = try await server.server.seed(aircraft: 2, checks: 5)
        let tablet = try TestTablet(
            server: server.url,
            users: [
                TestTablet.User("alice", password: "blue-harbour-1234", passcode: "alice-pass-1"),
                TestTablet.User("bob", password: "green-meadow-5678", passcode: "bob-pass-12"),
            ],
            definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")], storeStep: true
        ) { configuration, store in
            configuration.removalGuard = { user in try await store.requireNoPendingChanges(of: user.serverUserID ?? "")
            }
        }
        defer { Task { await tablet.remove() } }
        let (manager, presenter, store, directory) = (tablet.manager, tablet.presenter, tablet.store, tablet.directory)
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
