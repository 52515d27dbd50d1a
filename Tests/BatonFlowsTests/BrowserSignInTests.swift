import BatonClient
import BatonFlows
import BatonSecureStore
import BatonTestSupport
import BatonTesting
import Foundation
import Testing

/// Sign-in through a browser elsewhere (RFC 8628) as a step of BatonFlows: the app shows a code, the person
/// signs in on the server's page (here: the scripted presenter posts the page's form over HTTP, as a browser
/// would), and the flow carries on with the tokens.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct BrowserSignInTests {
    /// Polls without waiting the server's interval (the first poll after the approval already succeeds).
    static func quick(_ configuration: inout FlowsConfiguration) {
        configuration.pollDelay = { _ in try await Task.sleep(for: .milliseconds(10)) }
    }

    @Test func aPersonSignsInOnThePageAndTheDeviceOnboardsThem() async throws {
        try await withServer(settings: ["sign-in.methods": "password,device"]) { server in
            let device = try Device.make(
                server: server, configure: Self.quick,
                [
                    .signInMethod(.browser), .approveInBrowser("alice", Passwords.alice),
                    .newPasscode("12345678", confirmation: "12345678"),
                ])
            let session = try await device.manager.open()
            #expect(session.user.serverUserID == "alice")
            let transcript = await device.presenter.transcript
            #expect(transcript.contains("signInMethod(password,browser)"))
            #expect(transcript.contains { $0.hasPrefix("deviceCode(") && $0.count == "deviceCode(BDFH-KLMN)".count })
            #expect(transcript.contains("page: HTTP 200"))
            // The tokens work: the device registered and fetched its store key with them.
            #expect(session.storeKey?.count == 32)
        }
    }

    @Test func aDenialOnThePageStopsTheOnboarding() async throws {
        try await withServer(settings: ["sign-in.methods": "password,device"]) { server in
            let device = try Device.make(
                server: server, configure: Self.quick, [.signInMethod(.browser), .denyInBrowser])
            let error = await #expect(throws: FlowsError.self) { try await device.manager.open() }
            #expect(error?.code == .cancelled)
            #expect(error?.message == "The sign-in was denied on the page.")
            #expect(await device.manager.users.allUsers.isEmpty)
        }
    }

    @Test func whenTheServerAllowsOnlyBrowsersNoPasswordIsAsked() async throws {
        try await withServer(settings: ["sign-in.methods": "device"]) { server in
            let device = try Device.make(
                server: server, configure: Self.quick,
                [.approveInBrowser("bob", Passwords.bob), .newPasscode("12345678", confirmation: "12345678")])
            #expect(try await device.manager.open().user.serverUserID == "bob")
            #expect(await !device.presenter.transcript.contains { $0.hasPrefix("credentials") })
            // A passcode reset signs in the same way; another account is refused and named.
            await device.presenter.append([.approveInBrowser("alice", Passwords.alice)])
            let mismatch = await #expect(throws: FlowsError.self) { try await device.manager.resetPasscode() }
            #expect(mismatch?.code == .userMismatch && mismatch?.serverUserID == "alice")
        }
    }

    @Test func byDefaultDevicesSignInWithAPasswordAndAreNotAskedHow() async throws {
        try await withServer { server in
            let device = try Device.make(server: server, onboarding("alice", Passwords.alice, passcode: "12345678"))
            _ = try await device.manager.open()
            #expect(await !device.presenter.transcript.contains { $0.hasPrefix("signInMethod") })
        }
    }
}
