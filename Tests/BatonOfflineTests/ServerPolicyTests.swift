import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSecureStore
import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Synchronization
import Testing

/// The server's policy reaching a device, and the lifecycle gaps of the issue "The server's policy reaches every
/// device": each test failed before (no refresh, no invalidation, no withdrawal, no wipe), against a live server.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ServerPolicyTests {
    /// A tablet (``TestTablet``, the store following the sessions) with the offline store's handover plugged in;
    /// the test scripts the people's answers.
    struct Tablet {
        let base: TestTablet
        let transport: RecordingTransport

        var manager: OnboardingSessionManager { base.manager }
        var presenter: ScriptedPresenter { base.presenter }
        var store: OfflineStore { base.store }
        var directory: URL { base.directory }
    }

    func tablet(
        _ server: LiveServer, appVersion: String? = nil, clock: TestClock? = nil,
        idManager: (any OnboardingIDManaging)? = nil, _ answers: [ScriptedPresenter.Answer] = []
    ) async throws -> Tablet {
        let transport = RecordingTransport()
        let base = try TestTablet(
            server: server.url, users: [], definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")],
            storeStep: true, transport: transport, idManager: idManager
        ) { configuration, store in
            configuration.appVersion = appVersion
            if let clock { configuration.now = clock.closure }
            configuration.removalGuard = { user in try await store.requireNoPendingChanges(of: user.serverUserID ?? "")
            }
            let step = OfflineStoreStep(store: store)
            configuration.handOverPendingChanges = { handover throws(FlowsError) in try await step.handOver(handover) }
        }
        await base.presenter.append(answers)
        return Tablet(base: base, transport: transport)
    }

    func server() async throws -> LiveServer {
        let server = try await LiveServer.start()
        // A supervisor: her corrections of others' final checks are accepted.
        try await server.addUser("alice", displayName: "Alice", role: .supervisor, password: "blue-harbour-1234")
        try await server.addUser("bob", displayName: "Bob", password: "green-meadow-5678")
        try await server.addUser("ada", displayName: "Ada", password: "red-lantern-9999")
        _ = try await server.server.seed(aircraft: 2, checks: 3)
        return server
    }

    static let alice: [ScriptedPresenter.Answer] = [
        .credentials("alice", "blue-harbour-1234"), .newPasscode("alice-pass-1", confirmation: "alice-pass-1"),
    ]
    static let bob: [ScriptedPresenter.Answer] = [
        .credentials("bob", "green-meadow-5678"), .newPasscode("bob-pass-12", confirmation: "bob-pass-12"),
    ]

    /// Alice's correction of the first check, recorded on the device.
    func correction(_ tablet: Tablet, _ remark: String) async throws {
        let id = try #require(try await tablet.store.read("PreflightChecks?$top=1").first?.id)
        try await tablet.store.update(id, values: ["Remarks": .string(remark)])
    }

    /// The remarks of the first check as the device has them (kept, uploaded or not).
    func remark(_ tablet: Tablet) async throws -> String? {
        guard case .string(let text)? = try await tablet.store.read("PreflightChecks?$top=1").first?.values["Remarks"]
        else { return nil }
        return text
    }

    @Test func aPolicyTightenedWhileLockedAsksForANewPasscodeAtUnlockAndKeepsTheData() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        _ = try await device.manager.open()
        try await correction(device, "before the policy changed")
        await device.manager.lock()
        _ = try await server.server.settings.set("passcode.min-length", to: "14")

        await device.presenter.append([
            .passcode("alice-pass-1"), .newPasscode("short-but-1", confirmation: "short-but-1"),
            .newPasscode("alice-longer-pass-1", confirmation: "alice-longer-pass-1"),
        ])
        let session = try await device.manager.unlock()
        let transcript = await device.presenter.transcript
        #expect(transcript.contains { $0.hasPrefix("newPasscode: The server's passcode policy changed") })
        #expect(transcript.contains { $0.hasPrefix("newPasscode: ") && $0.contains("14") })
        #expect(session.settings.passcode.minLength == 14)
        #expect(try await remark(device) == "before the policy changed")

        // The old passcode no longer opens the store; the new one does, and asks for nothing more.
        await device.manager.lock()
        await device.presenter.append([.passcode("alice-pass-1"), .passcode("alice-longer-pass-1")])
        _ = try await device.manager.unlock()
        #expect(await device.presenter.remaining == 0)
        #expect(try await remark(device) == "before the policy changed")
    }

    @Test func aRefreshThatFindsNothingChangedIsOne304AndANewLockTimeoutAppliesAtOnce() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let clock = TestClock()
        let device = try await tablet(server, clock: clock, Self.alice)
        _ = try await device.manager.open()
        device.transport.reset()
        let unchanged = try await device.manager.contactServer()
        #expect(unchanged.reachable && !unchanged.settingsChanged)
        #expect(device.transport.statuses(path: "/settings") == [304])

        _ = try await server.server.settings.set("passcode.lock-timeout-seconds", to: "30")
        clock.advance(by: 31)
        #expect(await device.manager.lockIfInactive() == false)  // the device does not know yet: 300 s
        #expect(try await device.manager.contactServerIfDue() == nil)  // not due for 15 minutes
        let changed = try await device.manager.contactServer()
        #expect(changed.settingsChanged)
        #expect(device.transport.statuses(path: "/settings").last == 200)
        clock.advance(by: 31)
        #expect(await device.manager.lockIfInactive())

        // The server decides how often an open session asks.
        await device.presenter.append([.passcode("alice-pass-1")])
        _ = try await device.manager.unlock()
        _ = try await server.server.settings.set("devices.settings-refresh-seconds", to: "60")
        #expect(try await device.manager.contactServer().settingsChanged)
        clock.advance(by: 20)
        #expect(try await device.manager.contactServerIfDue() == nil)
        clock.advance(by: 41)
        #expect(try await device.manager.contactServerIfDue()?.reachable == true)
    }

    /// An unlock (or a switch) asks the server for its settings once: the restore flow's settings step already
    /// did when it could, so the session manager's contact afterwards asks only what the step did not (the
    /// device's status). Each switch at a stand is the tablet's and the server's work, and its wait.
    @Test func anUnlockAsksTheServerForItsSettingsOnce() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        _ = try await device.manager.open()
        await device.manager.lock()
        device.transport.reset()
        await device.presenter.append([.passcode("alice-pass-1")])
        _ = try await device.manager.unlock()
        #expect(device.transport.statuses(path: "/settings") == [304])
        #expect(device.transport.statuses(path: "/health").count == 1)
        #expect(device.transport.statuses(pathEndingWith: "/status").count == 1)
        // Asked on its own, the contact still asks for everything.
        device.transport.reset()
        _ = try await device.manager.contactServer()
        #expect(device.transport.statuses(path: "/settings") == [304])
    }

    @Test func offlineTheServerIsAskedAgainAfterAMinuteNotOnEveryCall() async throws {
        let server = try await server()
        let clock = TestClock()
        let device = try await tablet(server, clock: clock, Self.alice)
        _ = try await device.manager.open()
        await server.stop()
        defer { Task { await server.shutDown() } }
        clock.advance(by: 901)
        #expect(try await device.manager.contactServerIfDue()?.reachable == false)
        clock.advance(by: 30)
        #expect(try await device.manager.contactServerIfDue() == nil)
        clock.advance(by: 31)
        #expect(try await device.manager.contactServerIfDue()?.reachable == false)
        // The last known settings hold.
        #expect(await device.manager.session?.settings.passcode.lockTimeoutSeconds == 300)
    }

    @Test func onBehalfSwitchedOffWhileTheDeviceWasOfflineKeepsChangesWaitingForTheirAuthor() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice + Self.bob)
        _ = try await device.manager.open()
        try await correction(device, "alice's, for later")
        let bob = try await device.manager.addUser()
        #expect(bob.settings.sharedDevices.uploadPendingChangesOfPreviousUser)
        _ = try await server.server.settings.set("shared-devices.upload-pending-changes-of-previous-user", to: "false")

        // A device that has not heard yet uploads as it was told: the server's refusal makes the change wait.
        let stale = try await device.store.upload(using: bob.authorized, allowOnBehalf: true)
        #expect(stale.archived.isEmpty)
        #expect(stale.waiting.map(\.author) == ["alice"])
        #expect(try await device.store.archivedEntries().isEmpty)

        // A sync asks the server first, and then does not even try.
        try await device.manager.contactServer()
        let current = try #require(await device.manager.session)
        #expect(current.settings.sharedDevices.uploadPendingChangesOfPreviousUser == false)
        let report = try await device.store.upload(
            using: current.authorized, allowOnBehalf: current.settings.sharedDevices.uploadPendingChangesOfPreviousUser)
        #expect(report.archived.isEmpty && report.uploaded.isEmpty)
        #expect(try await device.store.pendingEntries().map(\.author) == ["alice"])
    }

    @Test func aUserDeletedWithPendingChangesReachesTheServerAndLeavesTheDevice() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice + Self.bob)
        let alice = try await device.manager.open()
        try await correction(device, "alice's last change")
        _ = try await device.manager.addUser()
        try await server.server.users.delete("alice")

        let report = try await device.manager.contactServer()
        #expect(report.removedUsers.map(\.serverUserID) == ["alice"])
        #expect(report.handover.backedUp == 1)
        #expect(await device.manager.users.allUsers.map(\.serverUserID) == ["bob"])
        #expect(!FileManager.default.fileExists(atPath: DeviceStorage.path(device.directory, alice.user.onboardingID)))
        #expect(try await device.store.pendingEntries().isEmpty)
        #expect(try await device.store.archivedEntries().isEmpty)
        let backups = try await server.server.devices.discardedChanges()
        #expect(backups.map(\.author) == ["alice"])
        #expect(backups.first?.count == 1)
        // The backup holds alice's change, under the device's store key.
        let plain = try await server.server.devices.openDiscardedChanges(try #require(backups.first?.id))
        #expect(String(decoding: plain, as: UTF8.self).contains("\"author\":\"alice\""))
    }

    @Test func aUserDisabledWhileSignedInIsToldApartAndRemoved() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        _ = try await device.manager.open()
        try await correction(device, "alice before she was disabled")
        try await server.server.users.disable("alice")

        let error = await #expect(throws: FlowsError.self) { try await device.manager.contactServer() }
        #expect(error?.code == .userWithdrawn)
        #expect(error?.serverUserID == "alice")
        #expect(await device.manager.state == .closed)
        #expect(await device.manager.users.allUsers.isEmpty)
        #expect(try await server.server.devices.discardedChanges().map(\.author) == ["alice"])
    }

    @Test func aRevokedDeviceWipesItselfAtItsNextContactAndItsBackupsAreOnTheServer() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice + Self.bob)
        _ = try await device.manager.open()
        try await correction(device, "alice, pending on a stolen tablet")
        let bob = try await device.manager.addUser()
        try await correction(device, "bob's, pending too")
        await device.manager.lock()
        #expect(try await server.server.devices.revoke(device: bob.deviceID))

        await device.presenter.append([.pick("Bob"), .passcode("bob-pass-12")])
        let error = await #expect(throws: FlowsError.self) { try await device.manager.open() }
        #expect(error?.code == .deviceWiped)
        #expect(await device.manager.state == .closed)
        #expect(await device.manager.users.allUsers.isEmpty)
        let left = try FileManager.default.contentsOfDirectory(atPath: device.directory.path)
        #expect(!left.contains { $0.hasPrefix("offline.sqlite") }, "\(left)")
        #expect(!left.contains("backups"))
        let backups = try await server.server.devices.discardedChanges()
        #expect(Set(backups.map(\.author)) == ["alice", "bob"])
        #expect(backups.allSatisfy { $0.uploader == "device:\(bob.deviceID)" })
        let summary = try #require(try await server.server.devices.summaries(search: bob.deviceID).first)
        #expect(summary.wipedAt != nil)
        #expect(summary.users.allSatisfy { !$0.active })
    }

    @Test func aWipeOrderHandsOverEveryChangeAndTheDeviceCanServeAgain() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        let alice = try await device.manager.open()
        try await correction(device, "uploaded before the wipe")
        try await server.server.devices.orderWipe(device: alice.deviceID)
        let error = await #expect(throws: FlowsError.self) { try await device.manager.contactServer() }
        #expect(error?.code == .deviceWiped)
        // Not revoked: the change went up as an ordinary upload, nothing needed a backup.
        #expect(try await server.server.devices.discardedChanges().isEmpty)
        #expect(try await server.server.devices.status(device: alice.deviceID)?.wipeOrdered == false)
        // Onboarding again on the same tablet works (the wipe order is settled), and a new order stands again.
        await device.presenter.append(Self.alice)
        _ = try await device.manager.open()
        _ = try await device.manager.contactServer()
        #expect(await device.manager.state == .open)
        try await server.server.devices.orderWipe(device: alice.deviceID)
        let again = await #expect(throws: FlowsError.self) { try await device.manager.contactServer() }
        #expect(again?.code == .deviceWiped)
    }

    @Test func anInvalidatedSessionsHandlesRefuseToWork() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        let session = try await device.manager.open()
        #expect(try await session.secureStore.value(ServerUser.self, forKey: SecureStoreKey.serverUser) != nil)
        await device.manager.lock()
        #expect(!session.isValid)
        let read = await #expect(throws: SecureStoreError.self) {
            try await session.secureStore.value(ServerUser.self, forKey: SecureStoreKey.serverUser)
        }
        #expect(read?.code == .sessionInvalidated)
        let send = await #expect(throws: BatonClientError.self) {
            try await session.authorized.send(ClientRequest(url: server.url.appendingPathComponent("me")))
        }
        #expect(send?.code == .sessionInvalidated)
        let key = #expect(throws: FlowsError.self) { try session.signingKey() }
        #expect(key?.code == .sessionInvalidated)
        #expect(session.storeKey == nil)
        // The offline store it opened is closed too.
        await #expect(throws: OfflineError.self) { try await device.store.read("PreflightChecks") }
    }

    @Test func anInactiveAppVersionBlocksUnlockAndKeepsPendingChanges() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, appVersion: "1.0", Self.alice)
        _ = try await device.manager.open()
        try await correction(device, "kept through the block")
        await device.manager.lock()
        _ = try await server.server.settings.set("app-versions.inactive", to: "0.9,1.0")
        await device.presenter.append([.passcode("alice-pass-1")])
        let error = await #expect(throws: FlowsError.self) { try await device.manager.unlock() }
        #expect(error?.code == .appVersionInactive)
        #expect(error?.message.contains("(1.0)") == true)
        #expect(await device.manager.users.activeUsers.count == 1)

        // After the update (here: the version allowed again) the change is still there and uploads.
        _ = try await server.server.settings.set("app-versions.inactive", to: "")
        await device.presenter.append([.passcode("alice-pass-1")])
        let session = try await device.manager.unlock()
        #expect(session.syncReport?.upload.uploadedByAuthor == ["alice": 1])
    }

    @Test func forgotPasscodeAtTheUnlockPromptSignsInAgainAndKeepsTheData() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        _ = try await device.manager.open()
        try await correction(device, "kept through the reset")
        await device.manager.lock()
        await device.presenter.append([
            .forgotPasscode, .credentials("alice", "blue-harbour-1234"),
            .newPasscode("alice-new-pass-2", confirmation: "alice-new-pass-2"),
        ])
        let session = try await device.manager.unlock()
        #expect(session.user.serverUserID == "alice")
        #expect(try await remark(device) == "kept through the reset")
        await device.manager.lock()
        await device.presenter.append([.passcode("alice-new-pass-2")])
        _ = try await device.manager.unlock()
        #expect(await device.presenter.remaining == 0)
    }

    @Test func changingThePasscodeAsksForTheCurrentOneAndKeepsTheData() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        _ = try await device.manager.open()
        try await correction(device, "kept through the change")
        await device.presenter.append([
            .passcode("not-my-pass-1"), .passcode("alice-pass-1"),
            .newPasscode("alice-changed-3", confirmation: "alice-changed-3"),
        ])
        try await device.manager.changePasscode()
        #expect(await device.presenter.transcript.contains { $0.hasPrefix("passcode(Alice): The passcode is wrong") })
        await device.manager.lock()
        await device.presenter.append([.passcode("alice-changed-3")])
        _ = try await device.manager.unlock()
        #expect(try await remark(device) == "kept through the change")
    }

    @Test func userMismatchNamesTheAccountThatSignedIn() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice + Self.bob)
        let alice = try await device.manager.open()
        let bob = try await device.manager.addUser()
        // Bob resets his passcode but alice signs in: the error names alice and her user on this device.
        await device.presenter.append([.credentials("alice", "blue-harbour-1234")])
        let onDevice = await #expect(throws: FlowsError.self) { try await device.manager.resetPasscode() }
        #expect(onDevice?.code == .userMismatch)
        #expect(onDevice?.serverUserID == "alice")
        #expect(onDevice?.onboardingID == alice.user.onboardingID)
        // An account not on the device: named, with no user to restore (onboard it).
        await device.presenter.append([.credentials("ada", "red-lantern-9999")])
        let elsewhere = await #expect(throws: FlowsError.self) {
            try await device.manager.resetPasscode(for: bob.user.onboardingID)
        }
        #expect(elsewhere?.serverUserID == "ada")
        #expect(elsewhere?.onboardingID == nil)
    }

    @Test func userAddedIsHeardOnlyAfterASuccessfulOnboarding() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        let events = Mutex<[String]>([])
        await device.manager.users.addObserver { event in
            if case .userAdded(let user) = event { events.withLock { $0.append(user.serverUserID ?? "?") } }
        }
        _ = try await device.manager.open()
        #expect(events.withLock { $0 } == ["alice"])
        // A second onboarding of alice is refused: nobody new was added, so nobody is announced.
        await device.presenter.append([.credentials("alice", "blue-harbour-1234")])
        let duplicate = await #expect(throws: FlowsError.self) { try await device.manager.addUser() }
        #expect(duplicate?.code == .userAlreadyExists)
        // A failed one (cancelled at the passcode) neither.
        await device.presenter.append([.passcode("alice-pass-1"), .credentials("bob", "green-meadow-5678"), .cancel])
        _ = try? await device.manager.open()
        _ = try? await device.manager.addUser()
        #expect(events.withLock { $0 } == ["alice"])
    }

    @Test func aCustomOnboardingIDManagerChoosesAndHearsStoreAndRemove() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let kiosk = KioskIDManager()
        let device = try await tablet(server, idManager: kiosk, Self.alice)
        let alice = try await device.manager.open()
        #expect(kiosk.stored.withLock { $0 } == [alice.user.onboardingID])
        await device.manager.close()
        // The kiosk reopens its last user without a user list.
        await device.presenter.append([.passcode("alice-pass-1")])
        _ = try await device.manager.open()
        #expect(await !device.presenter.transcript.contains { $0.hasPrefix("pickUser") })
        await device.presenter.append(Self.alice)
        _ = try await device.manager.removeUser()
        #expect(kiosk.removed.withLock { $0 } == [alice.user.onboardingID])
    }

    @Test func multiUserSwitchedOffStopsAddingButStrandsNobody() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice + Self.bob)
        let alice = try await device.manager.open()
        _ = try await device.manager.addUser()
        _ = try await server.server.settings.set("shared-devices.multi-user", to: "false")
        try await device.manager.contactServer()
        let refused = await #expect(throws: FlowsError.self) { try await device.manager.addUser() }
        #expect(refused?.code == .multiUserNotAllowed)
        await device.presenter.append([.passcode("alice-pass-1")])
        let back = try await device.manager.switchUser(to: alice.user.onboardingID)
        #expect(back.user.serverUserID == "alice")
    }

    @Test func aSettingsDocumentStoredBeforeTheDevicesSectionStillReads() throws {
        let older =
            #"{"appVersions":{"inactive":["0.9"]},"passcode":{"lockTimeoutSeconds":60,"minLength":10,"#
            + #""requireDigit":true,"requireLetter":false,"requireSymbol":false,"retryLimit":5},"#
            + #""sharedDevices":{"multiUser":true,"uploadPendingChangesOfPreviousUser":false,"#
            + #""whenUploadNotAllowed":"wait-for-author"}}"#
        let settings = try JSONDecoder().decode(ServerSettings.self, from: Data(older.utf8))
        #expect(settings.devices.settingsRefreshSeconds == 900)
        #expect(settings.passcode.minLength == 10 && settings.appVersions.inactive == ["0.9"])
        #expect(!settings.sharedDevices.uploadPendingChangesOfPreviousUser)
        var changed = settings
        #expect(throws: ServerError.self) { try changed.set("devices.settings-refresh-seconds", to: "5") }
        try changed.set("devices.settings-refresh-seconds", to: "600")
        #expect(changed.lines.contains("devices.settings-refresh-seconds = 600"))
    }

    @Test func aDeviceProofMustBeTheDevicesOwnAndFresh() async throws {
        let server = try await server()
        defer { Task { await server.shutDown() } }
        let device = try await tablet(server, Self.alice)
        let alice = try await device.manager.open()
        let configuration = try #require(alice.info[.serverConfiguration])
        let client = BatonClient(serverURL: server.url)
        let own = try P256.Signing.PrivateKey(rawRepresentation: try #require(alice.info[.deviceKey]))
        #expect(
            try await client.deviceStatus(configuration, deviceID: alice.deviceID, as: .deviceKey(own)).revoked == false
        )
        // Another key, another device's id, or a stale time: one refusal for all.
        for (id, key) in [(alice.deviceID, P256.Signing.PrivateKey()), ("some-other-device", own)] {
            let refused = await #expect(throws: BatonClientError.self) {
                try await client.deviceStatus(configuration, deviceID: id, as: .deviceKey(key))
            }
            #expect(refused?.serverCode == "InvalidDeviceProof")
        }
        let root = server.url.absoluteString.trimmingSuffix("/")
        func proven(_ method: String, _ action: String, at time: Int64) throws -> ClientRequest {
            let path = "/devices/\(alice.deviceID)/\(action)"
            let signature = try own.signature(
                for: DeviceRequestProof.message(
                    method: method, path: path, device: alice.deviceID, time: time,
                    bodySHA256: SHA256.hash(data: Data()).lowercaseHex))
            return ClientRequest(
                method: method, url: try #require(URL(string: root + path)),
                headers: [
                    (
                        "Baton-Device-Proof",
                        DeviceRequestProof.header(time: time, signature: Array(signature.rawRepresentation))
                    )
                ])
        }
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        #expect(try await client.send(try proven("GET", "status", at: now - 600_000), token: nil).status == 401)
        // Each proof once: the same header again is a replay.
        let fresh = try proven("GET", "status", at: now + 1000)
        #expect(try await client.send(fresh, token: nil).status == 200)
        #expect(try await client.send(fresh, token: nil).status == 401)
        // A wipe is reported by the device alone, and only one it was told to do.
        #expect(try await client.send(try proven("POST", "wiped", at: now + 2000), token: nil).status == 409)
        let byUser = try await client.send(
            ClientRequest(method: "POST", url: try #require(URL(string: root + "/devices/\(alice.deviceID)/wiped"))),
            token: try await alice.authorized.accessToken())
        #expect(byUser.status == 403)
        #expect(try await server.server.devices.summaries(search: alice.deviceID).first?.wipedAt == nil)
        // A proof, even a valid one, is no key to anything else: the store key needs a user's token.
        let storeKey = try await client.send(try proven("GET", "store-key", at: now + 3000), token: nil)
        #expect(storeKey.status == 401)
    }
}

/// A kiosk's onboarding-id manager: always the last onboarded user, never a user list.
final class KioskIDManager: OnboardingIDManaging {
    let stored = Mutex<[UUID]>([])
    let removed = Mutex<[UUID]>([])

    func flowToStart(users: UserManager, presenter: any OnboardingPresenter) async throws(FlowsError)
        -> OnboardingDecision
    {
        if let last = stored.withLock({ $0.last }), await users.user(last)?.status == .success {
            return .restore(last)
        }
        return .onboard(UUID())
    }

    func store(_ onboardingID: UUID, users: UserManager) async { stored.withLock { $0.append(onboardingID) } }
    func remove(_ onboardingID: UUID, users: UserManager) async {
        removed.withLock { $0.append(onboardingID) }
        stored.withLock { $0.removeAll { $0 == onboardingID } }
    }
}

/// The real transport, recording each answer's path and status.
struct RecordingTransport: HTTPTransport {
    let inner = AsyncHTTPClientTransport()
    let log = Log()

    final class Log: Sendable {
        let entries = Mutex<[(path: String, status: Int)]>([])
    }

    func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
        let response = try await inner.send(request)
        log.entries.withLock { $0.append((request.url.path, response.status)) }
        return response
    }

    func reset() { log.entries.withLock { $0.removeAll() } }
    func statuses(path: String) -> [Int] { log.entries.withLock { $0.filter { $0.path == path }.map(\.status) } }
    func statuses(pathEndingWith suffix: String) -> [Int] {
        log.entries.withLock { $0.filter { $0.path.hasSuffix(suffix) }.map(\.status) }
    }
}

extension DeviceStorage {
    /// The path of a user's secure store in a device directory.
    static func path(_ directory: URL, _ onboardingID: UUID) -> String {
        (try? DeviceStorage(directory: directory).secureStoreURL(for: onboardingID).path) ?? ""
    }
}

extension String {
    func trimmingSuffix(_ suffix: String) -> String { hasSuffix(suffix) ? String(dropLast(suffix.count)) : self }
}
