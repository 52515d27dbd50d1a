import BatonClient
import BatonFlows
import BatonSecureStore
import BatonTestSupport
import BatonTesting
import Foundation
import Testing

/// The optional consent step: data consent is required to onboard, usage consent is optional, both are kept per
/// user and the usage answer can be changed.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ConsentTests {
    static let forms = [
        ConsentForm(kind: .data, title: "Data consent", text: "Your checks are stored and sent with your name."),
        ConsentForm(kind: .usage, title: "Usage data", text: "How the app is used is counted, without values."),
    ]
    static let provider = StandardFlowProvider(consentForms: forms)

    func files(in device: Device) -> [String] {
        let users = device.directory.appendingPathComponent("users")
        return (try? FileManager.default.contentsOfDirectory(atPath: users.path)) ?? []
    }

    @Test func declinedDataConsentLeavesNothingBehind() async throws {
        try await withServer { server in
            let device = try Device.make(
                server: server, flowProvider: Self.provider, [.credentials("alice", Passwords.alice), .consent(false)])
            let error = await #expect(throws: FlowsError.self) { try await device.manager.open() }
            #expect(error?.code == .consentDeclined)
            #expect(error?.message.contains("Alice did not agree to data consent") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains("nothing of theirs was kept") == true)
            // Asked before any passcode: no secure store, no user, nothing more asked.
            #expect(await device.presenter.transcript == ["credentials", "consent(data, Alice)"])
            #expect(await device.manager.users.allUsers.isEmpty)
            #expect(files(in: device).isEmpty, "\(files(in: device))")
            // The device was never registered for her: a later onboarding that agrees works.
            await device.presenter.append(
                [.credentials("alice", Passwords.alice), .consent(true), .consent(false)]
                    + [.newPasscode("12345678", confirmation: "12345678")])
            let session = try await device.manager.open()
            #expect(session.user.serverUserID == "alice")
        }
    }

    @Test func answersAreKeptPerUserAndUsageCanBeChanged() async throws {
        try await withServer { server in
            let device = try Device.make(
                server: server, flowProvider: Self.provider,
                [.credentials("alice", Passwords.alice), .consent(true), .consent(false)]
                    + [.newPasscode("12345678", confirmation: "12345678")])
            _ = try await device.manager.open()
            var consent = try #require(await device.manager.consent)
            #expect(consent.agreed(to: .data) && !consent.agreed(to: .usage))
            #expect(consent.answers == [.data: true, .usage: false])

            // Bob agrees to both; alice's answers stay hers.
            await device.presenter.append(
                [.credentials("bob", Passwords.bob), .consent(true), .consent(true)]
                    + [.newPasscode("87654321", confirmation: "87654321")])
            _ = try await device.manager.addUser()
            #expect(await device.manager.consent?.answers == [.data: true, .usage: true])
            let alice = try #require(await device.manager.users.user(serverUserID: "alice"))
            #expect(alice.consent?.answers == [.data: true, .usage: false])

            // Alice switches in: not asked again; she turns usage on.
            await device.presenter.append([.pick("Alice"), .passcode("12345678")])
            _ = try await device.manager.switchUser()
            try await device.manager.changeConsent(.usage, to: true)
            // Withdrawing data consent is leaving the device: refused with that advice.
            let refused = await #expect(throws: FlowsError.self) {
                try await device.manager.changeConsent(.data, to: false)
            }
            #expect(refused?.code == .consentDeclined && refused?.message.contains("remove yourself") == true)
            await device.manager.close()

            // After a restart the answers are there, and a passcode reset keeps them.
            let restarted = try Device.make(
                server: server, directory: device.directory, flowProvider: Self.provider,
                [.pick("Alice"), .passcode("12345678")])
            _ = try await restarted.manager.open()
            consent = try #require(await restarted.manager.consent)
            #expect(consent.answers == [.data: true, .usage: true])
            await restarted.presenter.append(
                [.credentials("alice", Passwords.alice), .newPasscode("11223344", confirmation: "11223344")])
            _ = try await restarted.manager.resetPasscode()
            #expect(await restarted.manager.consent?.answers == [.data: true, .usage: true])
            #expect(await !restarted.presenter.transcript.contains { $0.hasPrefix("consent") })
        }
    }

    @Test func anAppUpdateThatAddsConsentAsksAtTheNextUnlock() async throws {
        try await withServer { server in
            let device = try Device.make(
                server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            #expect(await device.manager.consent == nil)
            await device.manager.close()
            // The new version asks once, at the unlock; declining data consent keeps her locked out, not removed.
            let updated = try Device.make(
                server: server, directory: device.directory, flowProvider: Self.provider,
                [.pick("Alice"), .passcode("12345678"), .consent(false)])
            let error = await #expect(throws: FlowsError.self) { try await updated.manager.open() }
            let transcript = await updated.presenter.transcript
            #expect(
                error?.code == .consentDeclined && error?.message.contains("until they agree") == true,
                "\(String(describing: error)) \(transcript)")
            #expect(await updated.manager.users.user(serverUserID: "alice") != nil)
            await updated.presenter.append([.pick("Alice"), .passcode("12345678"), .consent(true), .consent(true)])
            _ = try await updated.manager.open()
            #expect(await updated.manager.consent?.answers == [.data: true, .usage: true])
        }
    }
}
