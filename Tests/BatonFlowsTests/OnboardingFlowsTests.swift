import BatonClient
import BatonFlows
import BatonSecureStore
import BatonTestSupport
import BatonTesting
import Foundation
import Synchronization
import Testing

@testable import BatonServer

/// Every flow path, end to end against a live baton-server on loopback.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct OnboardingFlowsTests {
    @Test func firstOnboardingThenRestoreAfterRestart() async throws {
        try await withServer(settings: ["passcode.min-length": "6"]) { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "1234ab"))
            let session = try await device.manager.open()
            #expect(session.user.displayName == "Alice")
            #expect(session.user.serverUserID == "alice")
            #expect(session.user.status == .success)
            #expect(session.settings.passcode.minLength == 6)
            #expect(session.storeKey?.count == 32)
            // The server knows the device and the user's signing key.
            let keys = try await server.server.devices.signingKeys(device: session.deviceID, user: "alice")
            #expect(keys.count == 1)
            #expect(try session.signingKey().publicKey.x963Representation == keys.first?.publicKey.x963Representation)
            let me = try await session.authorized.send(
                ClientRequest(url: try #require(URL(string: server.url.absoluteString + "/me"))))
            #expect(me.status == 200)

            // Restart: only the passcode is asked (picker first in multi-user mode).
            let again = try device.restarted(server: server, [.pick("Alice"), .passcode("1234ab")])
            let restored = try await again.manager.open()
            #expect(restored.user.onboardingID == session.user.onboardingID)
            #expect(restored.storeKey == session.storeKey)
            #expect(await again.presenter.transcript == ["pickUser(Alice)", "passcode(Alice)"])
            let progress = await again.presenter.progressReports
            #expect(progress.first?.step == "passcode")
            #expect(progress.last?.fraction == 1)
            #expect(zip(progress, progress.dropFirst()).allSatisfy { $0.fraction < $1.fraction })
        }
    }

    @Test func passcodeRulesAreNamedAndTheConfirmationMustMatch() async throws {
        try await withServer(settings: ["passcode.min-length": "8", "passcode.require-digit": "true"]) { server in
            let device = try Device.make(
                server: server,
                [
                    .credentials("alice", Passwords.alice), .newPasscode("short1", confirmation: "short1"),
                    .newPasscode("longenough", confirmation: "longenough"),
                    .newPasscode("longenough1", confirmation: "longenough2"),
                    .newPasscode("longenough1", confirmation: "longenough1"),
                ])
            _ = try await device.manager.open()
            let transcript = await device.presenter.transcript
            #expect(transcript.count == 5)
            #expect(transcript[2].contains("8"))
            #expect(transcript[3].lowercased().contains("digit"))
            #expect(transcript[4].contains("differ"))
        }
    }

    @Test func aServerWithoutPasscodeRuleStillGetsOneInMultiUserMode() async throws {
        try await withServer(settings: ["passcode.min-length": "0", "passcode.require-digit": "false"]) { server in
            let device = try Device.make(
                server: server,
                [.credentials("alice", Passwords.alice), .newPasscode("abc", confirmation: "abc")]
                    + [.newPasscode("abcdefgh", confirmation: "abcdefgh")])
            _ = try await device.manager.open()
            #expect(await device.presenter.transcript.last?.contains("8") == true)
        }
    }

    @Test func wrongPasswordIsAskedAgainWithTheReason() async throws {
        try await withServer { server in
            let device = try Device.make(
                server: server,
                [.credentials("alice", "not-her-password-1")]
                    + onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            let transcript = await device.presenter.transcript
            #expect(transcript[1].hasPrefix("credentials: "))
            #expect(!transcript[1].contains("not-her-password"))
        }
    }

    @Test func lockUnlockAndInactivityLock() async throws {
        try await withServer(settings: ["passcode.lock-timeout-seconds": "60"]) { server in
            let clock = TestClock()
            let device = try Device.make(
                server: server, clock: clock, onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            await device.manager.lock()
            #expect(await device.manager.state == .locked)
            #expect(await device.manager.session == nil)
            await device.presenter.append([.passcode("12345678")])
            _ = try await device.manager.unlock()
            #expect(await device.manager.state == .open)

            clock.advance(by: 59)
            #expect(await device.manager.lockIfInactive() == false)
            await device.manager.recordActivity()
            clock.advance(by: 59)
            #expect(await device.manager.lockIfInactive() == false)
            clock.advance(by: 1)
            #expect(await device.manager.lockIfInactive() == true)
            #expect(await device.manager.state == .locked)
        }
    }

    @Test func wrongPasscodesUpToTheLimitWipeTheUser() async throws {
        try await withServer(settings: ["passcode.retry-limit": "3"]) { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let session = try await device.manager.open()
            let file = device.directory.appendingPathComponent(
                "users/\(session.user.onboardingID.uuidString.lowercased()).securestore")
            #expect(FileManager.default.fileExists(atPath: file.path))
            await device.manager.lock()
            await device.presenter.append([.passcode("00000000"), .passcode("11111111"), .passcode("22222222")])
            let error = await #expect(throws: FlowsError.self) { try await device.manager.unlock() }
            #expect(error?.code == .wiped)
            let transcript = await device.presenter.transcript
            #expect(transcript.suffix(2).allSatisfy { $0.contains("attempt") })
            #expect(!FileManager.default.fileExists(atPath: file.path))
            #expect(await device.manager.users.allUsers.isEmpty)
            #expect(await device.manager.state == .closed)
            // The next open onboards again.
            await device.presenter.append(onboarding("alice", Passwords.alice, passcode: "12345678"))
            #expect(try await device.manager.open().user.serverUserID == "alice")
        }
    }

    /// A tablet whose only user was wiped by the retry limit, offline, is not bricked: the device's slip, signed
    /// when alice joined, ends her registration on the server once she has been quiet there for an hour (the slip
    /// lies in the tablet's files, where a thief finds it too), and bob, the next first user, re-keys the tablet.
    @Test func aTabletWhoseLastUserWasWipedTakesANewFirstUser() async throws {
        let ahead = Mutex<TimeInterval>(0)
        let server = try await LiveServer.start(
            settings: ["passcode.retry-limit": "2"],
            clock: ServerClock { Date().addingTimeInterval(ahead.withLock { $0 }) })
        defer { Task { await server.shutDown() } }
        try await server.addUser("alice", displayName: "Alice", password: Passwords.alice)
        try await server.addUser("bob", displayName: "Bob", password: Passwords.bob)
        let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
        let alice = try await device.manager.open()
        #expect(try await server.server.devices.isRegistered(device: alice.deviceID, user: "alice"))
        await device.manager.lock()
        await device.presenter.append([.passcode("00000000"), .passcode("11111111")])
        let error = await #expect(throws: FlowsError.self) { try await device.manager.unlock() }
        #expect(error?.code == .wiped)
        #expect(try await server.server.devices.isRegistered(device: alice.deviceID, user: "alice"))
        let slips = DepartureSlips(storage: try DeviceStorage(directory: device.directory))
        #expect(try slips.departed().count == 1)
        // Within the hour, the server does not take the tablet's word for it: bob is told why, nothing is lost.
        await device.presenter.append(onboarding("bob", Passwords.bob, passcode: "87654321"))
        let early = await #expect(throws: FlowsError.self) { try await device.manager.open() }
        #expect(early?.message.contains("less than an hour ago") == true, "\(String(describing: early))")
        #expect(early?.message.hasPrefix("Cannot register this device: 'alice' was on device") == true)
        #expect(try slips.departed().count == 1)
        ahead.withLock { $0 = 3_700 }
        await device.presenter.append(onboarding("bob", Passwords.bob, passcode: "87654321"))
        let bob = try await device.manager.open()
        #expect(bob.user.serverUserID == "bob" && bob.deviceID == alice.deviceID)
        #expect(try await !server.server.devices.isRegistered(device: alice.deviceID, user: "alice"))
        #expect(try await server.server.devices.isRegistered(device: alice.deviceID, user: "bob"))
        #expect(try slips.departed().isEmpty)
    }

    @Test func resetPasscodeNeedsTheSameAccountAndReplacesEverything() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let before = try await device.manager.open()
            let beforeStoreKey = try #require(before.storeKey)
            let oldKey = try before.signingKey().publicKey.x963Representation
            // Bob cannot reset Alice's passcode.
            await device.presenter.append([.credentials("bob", Passwords.bob)])
            let mismatch = await #expect(throws: FlowsError.self) { try await device.manager.resetPasscode() }
            #expect(mismatch?.code == .userMismatch)
            // Her store is untouched: the old passcode still opens it.
            #expect(await device.manager.state == .locked)
            await device.presenter.append([.passcode("12345678")])
            _ = try await device.manager.unlock()

            await device.presenter.append(onboarding("alice", Passwords.alice, passcode: "87654321"))
            let after = try await device.manager.resetPasscode()
            #expect(after.user.onboardingID == before.user.onboardingID)
            #expect(try after.signingKey().publicKey.x963Representation != oldKey)
            let keys = try await server.server.devices.signingKeys(device: after.deviceID, user: "alice")
            #expect(keys.last?.publicKey.x963Representation == (try after.signingKey().publicKey.x963Representation))
            #expect(after.storeKey == beforeStoreKey)
            let url = device.directory.appendingPathComponent(
                "users/\(after.user.onboardingID.uuidString.lowercased()).securestore")
            #expect(throws: SecureStoreError.self) { try SecureStore.open(at: url, passcode: "12345678") }
            _ = try SecureStore.open(at: url, passcode: "87654321")
        }
    }

    @Test func cancellingAPasscodeResetKeepsTheOldStore() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            await device.manager.lock()
            await device.presenter.append([.credentials("alice", Passwords.alice), .cancel])
            let cancelled = await #expect(throws: FlowsError.self) { try await device.manager.resetPasscode() }
            #expect(cancelled?.code == .cancelled)
            #expect(await device.manager.state == .locked)
            await device.presenter.append([.passcode("12345678")])
            #expect(try await device.manager.unlock().user.serverUserID == "alice")
        }
    }

    @Test func addUserDuplicateUserAndEvents() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let events = Mutex<[String]>([])
            await device.manager.users.addObserver { event in
                let text: String
                switch event {
                case .userAdded(let user): text = "added \(user.onboardingID)"
                case .userSwitched(_, let to): text = "switched \(to.displayName)"
                case .userRemoved(let user): text = "removed \(user.displayName)"
                }
                events.withLock { $0.append(text) }
            }
            let alice = try await device.manager.open()
            await device.presenter.append(onboarding("bob", Passwords.bob, passcode: "bobcode12"))
            let bob = try await device.manager.addUser()
            #expect(bob.user.displayName == "Bob")
            #expect(await device.manager.users.activeUsers.count == 2)

            // Someone onboards as Alice again: refused, and Alice is offered for the next open.
            await device.presenter.append([.credentials("alice", Passwords.alice)])
            let duplicate = await #expect(throws: FlowsError.self) { try await device.manager.addUser() }
            #expect(duplicate?.code == .userAlreadyExists)
            #expect(duplicate?.onboardingID == alice.user.onboardingID)
            #expect(await device.manager.users.activeUsers.count == 2)
            await device.presenter.append([.passcode("12345678")])
            let restored = try await device.manager.open()
            #expect(restored.user.onboardingID == alice.user.onboardingID)
            let log = events.withLock { $0 }
            #expect(log.contains("switched Alice"))
            #expect(log.contains("switched Bob"))
            // Only onboardings that succeeded are announced: Alice and Bob, not the refused duplicate (whose entry
            // came and went unannounced).
            #expect(log.filter { $0.hasPrefix("added") }.count == 2)
            #expect(log.filter { $0.hasPrefix("removed") }.isEmpty)
        }
    }

    @Test func switchingUsersWorksWithTheServerStopped() async throws {
        let server = try await LiveServer.start()
        try await server.addUser("alice", displayName: "Alice", password: Passwords.alice)
        try await server.addUser("bob", displayName: "Bob", password: Passwords.bob)
        let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
        let alice = try await device.manager.open()
        await device.presenter.append(onboarding("bob", Passwords.bob, passcode: "bobcode12"))
        let bob = try await device.manager.addUser()
        let bobStoreKey = try #require(bob.storeKey)
        await server.shutDown()
        #expect(await device.manager.client.isReachable() == false)

        await device.presenter.append([.pick("Alice"), .passcode("12345678")])
        let back = try await device.manager.switchUser()
        #expect(back.user.onboardingID == alice.user.onboardingID)
        #expect(back.storeKey == bobStoreKey)
        await device.presenter.append([.passcode("bobcode12")])
        #expect(try await device.manager.switchUser(to: bob.user.onboardingID).user.displayName == "Bob")
        // Onboarding a new user needs the server, and says so.
        await device.presenter.append([.credentials("carol", "whatever-123")])
        let offline = await #expect(throws: FlowsError.self) { try await device.manager.addUser() }
        #expect(offline?.code == .offline)
        #expect(await device.manager.users.activeUsers.count == 2)
    }

    @Test func removingUsers() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let alice = try await device.manager.open()
            await device.presenter.append(onboarding("bob", Passwords.bob, passcode: "bobcode12"))
            let bob = try await device.manager.addUser()

            // Bob is no admin: he cannot remove Alice.
            let refused = await #expect(throws: FlowsError.self) {
                try await device.manager.removeUser(alice.user.onboardingID)
            }
            #expect(refused?.code == .notAllowed)

            // Bob removes himself: his store is gone, the device unregistered, and Alice restores.
            await device.presenter.append([.pick("Alice"), .passcode("12345678")])
            let next = try await device.manager.removeUser()
            #expect(next?.user.onboardingID == alice.user.onboardingID)
            #expect(
                !FileManager.default.fileExists(
                    atPath: device.directory.appendingPathComponent(
                        "users/\(bob.user.onboardingID.uuidString.lowercased()).securestore"
                    ).path))
            await #expect(throws: (any Error).self) {
                try await server.server.devices.storeKey(device: bob.deviceID, user: "bob")
            }

            // An admin removes Alice.
            await device.presenter.append(onboarding("ada", Passwords.admin, passcode: "adacode12"))
            let ada = try await device.manager.addUser()
            #expect(
                try await device.manager.removeUser(alice.user.onboardingID)?.user.onboardingID == ada.user.onboardingID
            )
            #expect(await device.manager.users.activeUsers.map(\.displayName) == ["Ada Admin"])

            // The last user removes herself: onboarding starts.
            await device.presenter.append(onboarding("bob", Passwords.bob, passcode: "bobcode12"))
            let fresh = try await device.manager.removeUser()
            #expect(fresh?.user.displayName == "Bob")
            #expect(await device.manager.users.activeUsers.count == 1)
        }
    }

    @Test func removalGuardKeepsTheUser() async throws {
        try await withServer { server in
            struct PendingChanges: Error {}
            let device = try Device.make(
                server: server, configure: { $0.removalGuard = { _ in throw PendingChanges() } },
                onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            await #expect(throws: PendingChanges.self) { try await device.manager.removeUser() }
            #expect(await device.manager.users.activeUsers.count == 1)
            #expect(await device.manager.state == .open)
        }
    }

    @Test func singleUserDeviceMovesToMultiUserKeepingItsUser() async throws {
        try await withServer { server in
            let single = try Device.make(
                server: server, mode: .singleUser, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let alice = try await single.manager.open()
            let refused = await #expect(throws: FlowsError.self) { try await single.manager.addUser() }
            #expect(refused?.code == .multiUserNotAllowed)
            // Restart in single-user mode: restore without a picker.
            let again = try single.restarted(server: server, mode: .singleUser, [.passcode("12345678")])
            #expect(try await again.manager.open().user.onboardingID == alice.user.onboardingID)
            // The app is updated to multi-user mode: Alice and her data stay.
            let multi = try single.restarted(
                server: server, mode: .multiUser,
                [.pick("Alice"), .passcode("12345678")] + onboarding("bob", Passwords.bob, passcode: "bobcode12"))
            let restored = try await multi.manager.open()
            #expect(restored.user.onboardingID == alice.user.onboardingID)
            #expect(restored.storeKey == alice.storeKey)
            _ = try await multi.manager.addUser()
            #expect(await multi.manager.users.activeUsers.count == 2)
        }
    }

    @Test func aFailingStepRunsEveryStepsReset() async throws {
        try await withServer { server in
            let log = StepLog()
            let provider = StandardFlowProvider(appSteps: [
                RecordingStep(name: "first app step", log: log), FailingStep(),
                RecordingStep(name: "never reached", log: log),
            ])
            let device = try Device.make(
                server: server, flowProvider: provider, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let error = await #expect(throws: FlowsError.self) { try await device.manager.open() }
            #expect(error?.message.contains("checklist download") == true)
            #expect(log.entries == ["onboard first app step", "reset never reached", "reset first app step"])
            // Nothing is left behind: no user, no secure store, no registration.
            #expect(await device.manager.users.allUsers.isEmpty)
            let stores = try FileManager.default.contentsOfDirectory(
                atPath: device.directory.appendingPathComponent("users").path)
            #expect(stores.isEmpty)
            let deviceID = try String(
                contentsOf: device.directory.appendingPathComponent("device.id"), encoding: .utf8)
            await #expect(throws: (any Error).self) {
                try await server.server.devices.storeKey(device: deviceID, user: "alice")
            }
        }
    }

    @Test func anErrorHandlerCanRetryAStep() async throws {
        try await withServer { server in
            let log = StepLog()
            struct RetryOnce: OnboardingErrorHandling {
                func disposition(
                    for error: any Error, in step: any OnboardingStep, flow: OnboardingFlowType, attempt: Int
                ) async -> OnboardingErrorDisposition { attempt < 2 ? .retry : .stop }
            }
            let provider = StandardFlowProvider(appSteps: [FlakyStep(log: log)])
            let device = try Device.make(
                server: server, flowProvider: provider, configure: { $0.errorHandler = RetryOnce() },
                onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            #expect(log.entries == ["flaky 1", "flaky 2"])
        }
    }

    @Test func usersCannotOpenEachOthersStores() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let alice = try await device.manager.open()
            await device.presenter.append(onboarding("bob", Passwords.bob, passcode: "bobcode12"))
            let bob = try await device.manager.addUser()
            func url(_ session: OnboardingSession) -> URL {
                device.directory.appendingPathComponent(
                    "users/\(session.user.onboardingID.uuidString.lowercased()).securestore")
            }
            #expect(throws: SecureStoreError.self) { try SecureStore.open(at: url(alice), passcode: "bobcode12") }
            #expect(throws: SecureStoreError.self) { try SecureStore.open(at: url(bob), passcode: "12345678") }
            // Neither the registry nor any other file names a user or holds a token in plain text. (Bob's name is
            // looked for as a JSON string's start: three bytes alone turn up in 100 KB of ciphertext now and then.)
            let token = await alice.authorized.tokens.accessToken
            for name in try FileManager.default.subpathsOfDirectory(atPath: device.directory.path) {
                let data = (try? Data(contentsOf: device.directory.appendingPathComponent(name))) ?? Data()
                for marker in ["Alice", "alice", "\"Bob", "\"bob", token] {
                    #expect(data.range(of: Data(marker.utf8)) == nil, "\(marker) in \(name)")
                }
            }
        }
    }

    @Test func multiUserModeNeedsAuthentication() async throws {
        struct NoSignIn: OnboardingFlowProvider {
            func flow(for type: OnboardingFlowType) -> OnboardingFlow {
                OnboardingFlow(type: type, steps: [PasscodeStep()])
            }
        }
        try await withServer { server in
            let error = #expect(throws: FlowsError.self) {
                try Device.make(server: server, mode: .multiUser, flowProvider: NoSignIn())
            }
            #expect(error?.code == .multiUserNeedsAuthentication)
            _ = try Device.make(server: server, mode: .singleUser, flowProvider: NoSignIn())
        }
    }

    @Test func signOutRevokesOnTheServerAndKeepsLocalData() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let session = try await device.manager.open()
            let token = await session.authorized.tokens.accessToken
            try await device.manager.signOut()
            #expect(await device.manager.state == .closed)
            let me = try await device.manager.client.send(
                ClientRequest(url: try #require(URL(string: server.url.absoluteString + "/me"))), token: token)
            #expect(me.status == 401)
            #expect(await device.manager.users.activeUsers.count == 1)
            // The next sign-in with network asks for the password again, as the same account, and works online.
            await device.presenter.append([
                .pick("Alice"), .passcode("12345678"), .credentials("alice", Passwords.alice),
            ])
            let again = try await device.manager.open()
            let transcript = await device.presenter.transcript
            #expect(transcript.suffix(2).first?.hasPrefix("passcode") == true)
            #expect(transcript.last == "credentials")
            let fresh = await again.authorized.tokens.accessToken
            #expect(fresh != token)
            let meAgain = try await device.manager.client.send(
                ClientRequest(url: try #require(URL(string: server.url.absoluteString + "/me"))), token: fresh)
            #expect(meAgain.status == 200)
            // The new sign-in is known to be on this device (the server ends it with the device, and counts it as
            // alice's presence there).
            let linked = try await server.server.database.storage.read { db in
                try await db.fetchOne(
                    "SELECT COUNT(*) FROM deviceTokenFamilies WHERE device = ?", again.deviceID)?[0].integer ?? 0
            }
            #expect(linked == 2)
            // Signed in again, the following restore needs only the passcode.
            await device.manager.lock()
            await device.presenter.append([.passcode("12345678")])
            _ = try await device.manager.unlock()
            #expect(await device.presenter.remaining == 0)
        }
    }

    @Test func aSignedOutUserStillOpensTheirWorkOffline() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            try await device.manager.signOut()
            await server.stop()
            await device.presenter.append([.pick("Alice"), .passcode("12345678")])
            let offline = try await device.manager.open()
            #expect(offline.user.serverUserID == "alice")
            #expect(await device.presenter.remaining == 0)
        }
    }
}

final class StepLog: Sendable {
    let lines = Mutex<[String]>([])
    func add(_ line: String) { lines.withLock { $0.append(line) } }
    var entries: [String] { lines.withLock { $0 } }
}

struct RecordingStep: OnboardingStep {
    let name: String
    let log: StepLog
    func onboard(_ context: inout OnboardingContext) async throws { log.add("onboard \(name)") }
    func reset(_ context: inout OnboardingContext) async { log.add("reset \(name)") }
}

struct FailingStep: OnboardingStep {
    var name: String { "checklist download" }
    struct Broken: Error {}
    func onboard(_ context: inout OnboardingContext) async throws { throw Broken() }
}

struct FlakyStep: OnboardingStep {
    var name: String { "flaky" }
    let log: StepLog
    struct Flake: Error {}
    func onboard(_ context: inout OnboardingContext) async throws {
        log.add("flaky \(log.entries.count + 1)")
        if log.entries.count < 2 { throw Flake() }
    }
}

/// Joining a device needs one of its users: the device key that approves a registration lives only in their
/// secure stores, so a tablet's files and someone's password do not get its store key.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DeviceJoinTests {
    @Test func aNewUserJoinsOnlyWithTheApprovalOfAUserOfTheDevice() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let alice = try await device.manager.open()
            let aliceStoreKey = try #require(alice.storeKey)
            await device.manager.close()
            // Someone with the tablet and bob's password, but not Alice's passcode.
            let tablet = try device.restarted(
                server: server,
                [.addUser] + onboarding("bob", Passwords.bob, passcode: "bobcode12") + [
                    .passcode("not-alices"), .cancel,
                ])
            let refused = await #expect(throws: FlowsError.self) { try await tablet.manager.open() }
            #expect(refused?.code == .cancelled)
            let transcript = await tablet.presenter.transcript
            // The newcomer is named by display name, with the account beside it: a display name alone (a provider's
            // `name` claim) could be anyone's.
            #expect(
                transcript.contains(
                    "message: Bob (bob) joins this device: one of its users approves with their passcode."))
            #expect(transcript.contains { $0.hasPrefix("passcode(Alice): The passcode is wrong") })
            await #expect(throws: (any Error).self) {
                try await server.server.devices.storeKey(device: alice.deviceID, user: "bob")
            }
            // With Alice's passcode, Bob joins and gets the device's store key.
            let approved = try device.restarted(
                server: server,
                [.addUser] + onboarding("bob", Passwords.bob, passcode: "bobcode12") + [.passcode("12345678")])
            let bob = try await approved.manager.open()
            #expect(bob.storeKey == aliceStoreKey)
            // Bob, now a user of the device, approves the next one from his open session without a passcode.
            await approved.presenter.append(onboarding("ada", Passwords.admin, passcode: "adacode12"))
            let ada = try await approved.manager.addUser()
            #expect(ada.storeKey == aliceStoreKey)
        }
    }

    @Test func deletingTheUserListDoesNotMakeTheTabletNew() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            let alice = try await device.manager.open()
            await device.manager.close()
            // The thief removes the user list, so the app believes it is a fresh tablet and makes a new device key.
            try FileManager.default.removeItem(at: device.directory.appendingPathComponent("users.registry"))
            let tablet = try device.restarted(server: server, onboarding("bob", Passwords.bob, passcode: "bobcode12"))
            let refused = await #expect(throws: FlowsError.self) { try await tablet.manager.open() }
            #expect(refused?.message.contains("needs the approval of one of its users") == true)
            await #expect(throws: (any Error).self) {
                try await server.server.devices.storeKey(device: alice.deviceID, user: "bob")
            }
        }
    }
}
