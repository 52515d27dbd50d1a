import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonServer
import BatonTestSupport
import BatonTesting
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The airline's identity provider from end to end: a person signs in to the cockpit and, on a tablet, through
/// the provider in Debian's Chromium (Selenium, the provider's own login page); the provider then withdraws the
/// tablet's person over SCIM, and at its next contact the tablet hands over their pending change and removes them.
// 25 minutes: the limit counts the wait for the interactive slot, which the terminal app's handover holds for up to
// 10 minutes within the whole suite; this test alone took 15 s where it waited 663 s in one run (2026-11-28).
@Suite(.serverSlot, .timeLimit(.minutes(25)), .interactiveSlot, .serialized) struct IdentityProviderHandoverTests {
    /// Runs `Interop/idp_browser.py` (Selenium) and requires it to pass.
    static func browser(_ arguments: [String], expecting user: String) async throws {
        let script = TestPython.packageRoot.appendingPathComponent("Tests/BatonServerTests/Interop/idp_browser.py")
        let (status, output) = try await offThePool { () -> (Int32, String) in
            let process = Process()
            process.executableURL = TestPython.executable
            process.arguments = [script.path] + arguments
            process.environment = ProcessInfo.processInfo.environment.merging(["BATON_EXPECTED_USER": user]) { $1 }
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try process.runAlone()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return (process.terminationStatus, String(decoding: data, as: UTF8.self))
        }
        // Required, not expected: a failed approval must stop the tablet's flow at once, not leave it polling
        // until its code expires.
        try #require(status == 0 && output.contains("browser checks passed"), "\(output.suffix(3_000))")
    }

    @Test func aPersonSignsInThroughTheProviderAndItsWithdrawalReachesTheTablet() async throws {
        for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            try #require(
                FileManager.default.isExecutableFile(atPath: program), "\(program) is missing: run scripts/test.")
        }
        let missing = try await offThePool { TestPython.missing(["selenium", "oidc_provider_mock"]) }
        try #require(missing == nil, "\(missing ?? "")")
        // Devices sign in through a browser only; nobody has a Baton password.
        let server = try await LiveServer.start(settings: ["sign-in.methods": "device"])
        defer { Task { await server.shutDown() } }
        _ = try await server.server.seed(aircraft: 2, checks: 3)
        let provider = try await OpenIDProviderProcess(
            people: [
                ["sub": "s-alice", "preferred_username": "alice", "name": "Alice Admin", "groups": ["gs-admins"]],
                ["sub": "s-bob", "preferred_username": "bob", "name": "Bob B.", "groups": ["gs-sup"]],
            ],
            redirectURIs: ["\(server.url.absoluteString)/oauth/idp/corp/callback"])
        defer { provider.stop() }
        var corp = IdentityProvider(
            name: "corp", displayName: "Corp ID", issuer: provider.issuer, clientID: provider.clientID)
        corp.roleMap = try IdentityProvider.roleMap(parsing: "gs-staff=ground-staff,gs-sup=supervisor,gs-admins=admin")
        try await server.server.identityProviders.add(corp, clientSecret: try provider.clientSecret)
        let shots =
            ProcessInfo.processInfo.environment["BATON_COCKPIT_SCREENSHOTS"]
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("baton-idp-\(UUID())").path
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)

        // Alice, an admin at the provider, opens the cockpit.
        try await Self.browser(["cockpit", server.url.absoluteString, "s-alice", shots], expecting: "alice")

        // Bob takes a tablet: it shows a code, he allows it on his phone through the provider.
        let device = try await ServerPolicyTests().tablet(
            server,
            [
                .approveElsewhere { prompt in
                    try await Self.browser(
                        ["device", prompt.verificationURIComplete ?? prompt.verificationURI, "s-bob", shots],
                        expecting: "bob")
                },
                .newPasscode("bob-pass-12", confirmation: "bob-pass-12"),
            ])
        let session = try await device.manager.open()
        #expect(session.user.serverUserID == "bob")
        #expect(try await server.server.users.user(named: "bob")?.identityProvider == "corp")
        // He records a change; before it goes up, the provider withdraws him over SCIM.
        try await ServerPolicyTests().correction(device, "bob's check before he left the company")
        let token = try await server.server.identityProviders.createSCIMToken(for: "corp")
        var request = URLRequest(url: server.url.appendingPathComponent("scim/v2/Users/bob"))
        request.httpMethod = "PATCH"
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        request.setValue("application/scim+json", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(
            #"{"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"replace","value":{"active":false}}]}"#
                .utf8)
        let (_, answer) = try await URLSession.shared.data(for: request)
        #expect((answer as? HTTPURLResponse)?.statusCode == 200)

        // At its next contact the tablet hands bob's change over and removes him: nothing is lost.
        let error = await #expect(throws: FlowsError.self) { try await device.manager.contactServer() }
        #expect(error?.code == .userWithdrawn && error?.serverUserID == "bob")
        #expect(await device.manager.users.allUsers.isEmpty)
        let backups = try await server.server.devices.discardedChanges()
        #expect(backups.map(\.author) == ["bob"])
        let plain = try await server.server.devices.openDiscardedChanges(try #require(backups.first?.id))
        let remark = Data(#"{"Remarks":"bob's check before he left the company"}"#.utf8).base64EncodedString()
        #expect(String(decoding: plain, as: UTF8.self).contains(#""author":"bob""#))
        #expect(String(decoding: plain, as: UTF8.self).contains(remark))
        let audit = try await server.server.audit.entries(limit: 200)
        #expect(audit.contains { $0.actor == "scim:corp" && $0.action == "user-disabled" && $0.subject == "bob" })
        #expect(audit.contains { $0.action == "device-sign-in-allowed" && ($0.detail ?? "").contains("through corp") })
    }
}
