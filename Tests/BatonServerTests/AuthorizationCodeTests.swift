import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct AuthorizationCodeTests {
    static let verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk-extra-chars"
    static var challenge: String {
        Data(SHA256.hash(data: Data(verifier.utf8))).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
    static let redirect = "http://127.0.0.1:53682/callback"
    static var authorization: [(String, String)] {
        [
            ("response_type", "code"), ("client_id", "baton-web"), ("redirect_uri", redirect), ("state", "xyz<&>"),
            ("code_challenge", challenge), ("code_challenge_method", "S256"),
        ]
    }

    /// Signs in on the login page and returns the code from the redirect.
    static func code(_ client: any TestClientProtocol, password: String = "correct-horse-battery") async throws
        -> String
    {
        let location = try await client.execute(
            uri: "/oauth/authorize", method: .post, headers: formHeaders,
            body: formBody(authorization + [("username", "alice"), ("password", password)])
        ) { response in
            #expect(response.status == .found)
            return response.headers[.location] ?? ""
        }
        let items = URLComponents(string: location)?.queryItems ?? []
        #expect(location.hasPrefix(redirect + "?"))
        #expect(items.first { $0.name == "state" }?.value == "xyz<&>")
        return try #require(items.first { $0.name == "code" }?.value)
    }

    static func exchange(_ client: any TestClientProtocol, code: String, verifier: String? = verifier) async throws
        -> (HTTPResponse.Status, [String: Any])
    {
        var parameters = [
            ("grant_type", "authorization_code"), ("client_id", "baton-web"), ("code", code),
            ("redirect_uri", redirect),
        ]
        if let verifier { parameters.append(("code_verifier", verifier)) }
        return try await client.token(parameters)
    }

    @Test(arguments: StorageBackend.allCases) func loginPageEscapesWhatItEchoes(backend: StorageBackend) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.test { client in
            let query = Self.authorization.map {
                "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
            }
            .joined(separator: "&")
            let (status, page, headers) = try await client.execute(uri: "/oauth/authorize?" + query, method: .get) {
                ($0.status, String(buffer: $0.body), $0.headers)
            }
            #expect(status == .ok)
            #expect(headers[.contentType] == "text/html; charset=utf-8")
            #expect(page.contains("<form method=\"post\" action=\"/oauth/authorize\">"))
            #expect(page.contains("value=\"xyz&lt;&amp;&gt;\""))
            #expect(!page.contains("xyz<&>"))
        }
    }

    @Test(arguments: StorageBackend.allCases) func codeFlowWithPKCEIssuesTokens(backend: StorageBackend) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let code = try await Self.code(client)
            let (status, body) = try await Self.exchange(client, code: code)
            #expect(status == .ok)
            let access = try #require(body["access_token"] as? String)
            let (meStatus, me, _) = try await client.get("/me", token: access)
            #expect(meStatus == .ok)
            #expect(me["name"] as? String == "alice")
        }
    }

    @Test(arguments: StorageBackend.allCases) func reusedCodeIsRefusedAndRevokesItsTokens(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let code = try await Self.code(client)
            let (_, first) = try await Self.exchange(client, code: code)
            let refresh = try #require(first["refresh_token"] as? String)
            let (status, body) = try await Self.exchange(client, code: code)
            #expect(status == .badRequest)
            #expect(
                body["error_description"] as? String
                    == "The authorization code was already used; tokens issued from it are revoked.")
            let (refreshStatus, _) = try await client.token([
                ("grant_type", "refresh_token"), ("client_id", "baton-web"), ("refresh_token", refresh),
            ])
            #expect(refreshStatus == .badRequest)
        }
    }

    @Test(arguments: StorageBackend.allCases) func verifierIsRequiredAndChecked(backend: StorageBackend) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let (missingStatus, missing) = try await Self.exchange(
                client, code: try await Self.code(client), verifier: nil)
            #expect(missingStatus == .badRequest)
            #expect(missing["error"] as? String == "invalid_request")
            let wrongVerifier = String(repeating: "a", count: 50)
            let (wrongStatus, wrong) = try await Self.exchange(
                client, code: try await Self.code(client), verifier: wrongVerifier)
            #expect(wrongStatus == .badRequest)
            #expect(wrong["error_description"] as? String == "code_verifier does not match the code challenge.")
        }
    }

    @Test(arguments: StorageBackend.allCases) func codesExpireAfterAMinute(backend: StorageBackend) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let code = try await Self.code(client)
            server.clock.advance(by: 61)
            let (status, body) = try await Self.exchange(client, code: code)
            #expect(status == .badRequest)
            #expect(body["error_description"] as? String == "The authorization code has expired.")
        }
    }

    @Test(arguments: StorageBackend.allCases) func badAuthorizationRequestsAreShownNotRedirected(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.test { client in
            for (name, value) in [
                ("redirect_uri", "https://evil.example/cb"), ("client_id", "baton-device"),
                ("code_challenge_method", "plain"),
            ] {
                let parameters = Self.authorization.map { $0.0 == name ? (name, value) : $0 }
                let query = parameters.map {
                    "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
                }
                .joined(separator: "&")
                let (status, location) = try await client.execute(uri: "/oauth/authorize?" + query, method: .get) {
                    ($0.status, $0.headers[.location])
                }
                #expect(status == .badRequest, "\(name)")
                #expect(location == nil)
            }
        }
    }

    @Test(arguments: StorageBackend.allCases) func wrongPasswordShowsThePageAgain(backend: StorageBackend) async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let (status, page) = try await client.execute(
                uri: "/oauth/authorize", method: .post, headers: formHeaders,
                body: formBody(Self.authorization + [("username", "alice"), ("password", "not-the-password")])
            ) { ($0.status, String(buffer: $0.body)) }
            #expect(status == .unauthorized)
            #expect(page.contains("The user name or password is wrong, or the user is disabled."))
            #expect(!page.contains("not-the-password"))
        }
    }
}
