import BatonServer
import BatonTestSupport
import BatonTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

/// The device authorization grant (RFC 8628): every answer of the token endpoint while the device polls, the
/// verification page, and the server setting that decides which sign-in methods devices may use.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DeviceAuthorizationTests {
    static let grant = "urn:ietf:params:oauth:grant-type:device_code"

    @Test(arguments: StorageBackend.allCases) func theDevicePollsWhileThePersonApprovesInABrowser(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        _ = try await server.addUser("alice")
        _ = try await server.server.settings.set("sign-in.methods", to: "password,device")
        try await server.test { client in
            let (_, metadata, _) = try await client.get("/.well-known/oauth-authorization-server", token: nil)
            #expect(
                metadata["device_authorization_endpoint"] as? String == TestServer.issuer
                    + "/oauth/device_authorization")
            #expect((metadata["grant_types_supported"] as? [String])?.contains(Self.grant) == true)

            let started = try await client.start()
            let deviceCode = try #require(started["device_code"] as? String)
            let userCode = try #require(started["user_code"] as? String)
            #expect(userCode.count == 9 && userCode.dropFirst(4).first == "-")
            #expect(started["verification_uri"] as? String == TestServer.issuer + "/oauth/device")
            #expect(
                started["verification_uri_complete"] as? String == TestServer.issuer + "/oauth/device?user_code="
                    + userCode)
            #expect(started["expires_in"] as? Int == 600 && started["interval"] as? Int == 5)

            #expect(try await client.poll(deviceCode) == "authorization_pending")
            // Faster than the interval: slow_down, and the interval grows by 5 s.
            server.clock.advance(by: 2)
            #expect(try await client.poll(deviceCode) == "slow_down")
            server.clock.advance(by: 6)
            #expect(try await client.poll(deviceCode) == "slow_down")  // 6 s after, the interval is now 10 s
            server.clock.advance(by: 16)  // the interval is now 15 s
            #expect(try await client.poll(deviceCode) == "authorization_pending")

            // The page, filled in from the complete URI; a wrong password, a wrong code, then the approval.
            let page = try await client.page("/oauth/device?user_code=" + userCode)
            #expect(page.status == .ok && page.text.contains("value=\"\(userCode)\""))
            let wrong = try await client.approve(userCode, password: "not-the-password")
            #expect(wrong.status == .unauthorized && wrong.text.contains("wrong"))
            let notACode = try await client.approve("AEIOU-123", password: "correct-horse-battery")
            #expect(notACode.status == .badRequest)
            let approved = try await client.approve(userCode.lowercased(), password: "correct-horse-battery")
            #expect(approved.status == .ok && approved.text.contains("Signed in as alice"))
            // The page's HTML escapes what it echoes.
            let hostile = try await client.page("/oauth/device?user_code=%3Cscript%3E")
            #expect(!hostile.text.contains("<script>"))

            server.clock.advance(by: 16)
            let (status, tokens) = try await client.token([
                ("grant_type", Self.grant), ("client_id", "baton-device"), ("device_code", deviceCode),
            ])
            #expect(status == .ok && tokens["access_token"] is String && tokens["refresh_token"] is String)
            server.clock.advance(by: 16)
            #expect(try await client.poll(deviceCode) == "invalid_grant")  // used once
            // Approving a used code again changes nothing.
            #expect(try await client.approve(userCode, password: "correct-horse-battery").status == .badRequest)
        }
    }

    @Test func deniedExpiredUnknownAndForeignCodesAreRefused() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        _ = try await server.addUser("alice")
        _ = try await server.server.settings.set("sign-in.methods", to: "device,password")
        try await server.test { client in
            let denied = try await client.start()
            let (status, _) = try await client.form(
                "/oauth/device", [("user_code", denied["user_code"] as? String ?? ""), ("action", "deny")])
            #expect(status == .ok)
            #expect(try await client.poll(denied["device_code"] as? String ?? "") == "access_denied")

            let expiring = try await client.start()
            server.clock.advance(by: 601)
            #expect(try await client.poll(expiring["device_code"] as? String ?? "") == "expired_token")
            #expect(
                try await client.approve(expiring["user_code"] as? String ?? "", password: "correct-horse-battery")
                    .status == .badRequest)

            #expect(try await client.poll("no-such-code") == "invalid_grant")
            let started = try await client.start()
            let (_, foreign) = try await client.token([
                ("grant_type", Self.grant), ("client_id", "baton-web"),
                ("device_code", started["device_code"] as? String ?? ""),
            ])
            #expect(foreign["error"] as? String == "unauthorized_client")
            let (webStart, webBody) = try await client.form("/oauth/device_authorization", [("client_id", "baton-web")])
            #expect(webStart == .unauthorized && webBody["error"] as? String == "invalid_client")

            // Guessing codes, with a good password or none (deny), is slowed down like guessing passwords.
            var statuses: [HTTPResponse.Status] = []
            for guess in 0..<12 {
                let code = "BBBB-" + String(repeating: "CDFG".map(String.init)[guess % 4], count: 4)
                let answer =
                    guess.isMultiple(of: 2)
                    ? try await client.approve(code, password: "correct-horse-battery").status
                    : try await client.form("/oauth/device", [("user_code", code), ("action", "deny")]).0
                statuses.append(answer)
            }
            #expect(statuses.first == .badRequest)
            #expect(statuses.contains(.tooManyRequests), "\(statuses)")
            // A real code from that address waits too.
            let waiting = try await client.start()
            let blocked = try await client.approve(
                waiting["user_code"] as? String ?? "", password: "correct-horse-battery")
            #expect(blocked.status == .tooManyRequests && blocked.text.contains("Try again in"))
        }
    }

    @Test func theServerDecidesWhichSignInMethodsDevicesMayUse() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        _ = try await server.addUser("alice")
        _ = try await server.server.settings.set("sign-in.methods", to: "device")
        try await server.test { client in
            let (status, body) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "correct-horse-battery"),
            ])
            #expect(status == .badRequest && body["error"] as? String == "unauthorized_client")
            #expect(try await client.start()["device_code"] is String)
        }
        _ = try await server.server.settings.set("sign-in.methods", to: "password")
        try await server.test { client in
            let (status, body) = try await client.form("/oauth/device_authorization", [("client_id", "baton-device")])
            #expect(status == .badRequest && body["error"] as? String == "unauthorized_client")
            _ = try await client.signIn("alice")
        }
        await #expect(throws: ServerError.self) { try await server.server.settings.set("sign-in.methods", to: "") }
        await #expect(throws: ServerError.self) { try await server.server.settings.set("sign-in.methods", to: "magic") }
    }
}

extension TestClientProtocol {
    /// POSTs a form and returns the status and JSON body.
    func form(_ uri: String, _ parameters: [(String, String)]) async throws -> (HTTPResponse.Status, [String: Any]) {
        try await execute(uri: uri, method: .post, headers: formHeaders, body: formBody(parameters)) { response in
            (response.status, Self.object(response.body))
        }
    }

    func start() async throws -> [String: Any] {
        let (status, body) = try await form(
            "/oauth/device_authorization", [("client_id", "baton-device"), ("scope", "odata settings devices")])
        guard status == .ok else { throw TestFailure("device authorization: \(status) \(body)") }
        return body
    }

    /// Asks for a device code as a client at `address` (through a trusted proxy's `X-Forwarded-For`).
    func startDeviceAuthorization(from address: String) async throws -> (
        status: HTTPResponse.Status, body: [String: Any], retryAfter: Int?
    ) {
        var headers = formHeaders
        headers[try #require(HTTPField.Name("X-Forwarded-For"))] = address
        return try await execute(
            uri: "/oauth/device_authorization", method: .post, headers: headers,
            body: formBody([("client_id", "baton-device")])
        ) { response in
            (response.status, Self.object(response.body), response.headers[.retryAfter].flatMap { Int($0) })
        }
    }

    /// One poll; the OAuth error code, or "ok".
    func poll(_ deviceCode: String) async throws -> String {
        let (status, body) = try await token([
            ("grant_type", DeviceAuthorizationTests.grant), ("client_id", "baton-device"), ("device_code", deviceCode),
        ])
        return status == .ok ? "ok" : body["error"] as? String ?? "\(status)"
    }

    func page(_ uri: String) async throws -> (status: HTTPResponse.Status, text: String) {
        try await execute(uri: uri, method: .get) { response in
            (response.status, String(buffer: response.body))
        }
    }

    func approve(_ userCode: String, password: String) async throws -> (status: HTTPResponse.Status, text: String) {
        try await execute(
            uri: "/oauth/device", method: .post, headers: formHeaders,
            body: formBody([
                ("user_code", userCode), ("username", "alice"), ("password", password), ("action", "approve"),
            ])
        ) { response in (response.status, String(buffer: response.body)) }
    }
}
