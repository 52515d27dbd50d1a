import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import JWTKit
import NIOCore
import Testing

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct OAuthTests {
    @Test(arguments: StorageBackend.allCases) func metadataNamesEveryEndpoint(backend: StorageBackend) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.test { client in
            let (status, body, _) = try await client.get("/.well-known/oauth-authorization-server", token: nil)
            #expect(status == .ok)
            #expect(body["issuer"] as? String == TestServer.issuer)
            for (key, path) in [
                ("token_endpoint", "/oauth/token"), ("authorization_endpoint", "/oauth/authorize"),
                ("revocation_endpoint", "/oauth/revoke"), ("jwks_uri", "/oauth/jwks"),
            ] {
                #expect(body[key] as? String == TestServer.issuer + path)
            }
            #expect(body["code_challenge_methods_supported"] as? [String] == ["S256"])
            let (_, discovery, _) = try await client.get("/.well-known/baton-configuration", token: nil)
            #expect(discovery["settings_endpoint"] as? String == TestServer.issuer + "/settings")
            #expect(
                discovery["device_store_key_endpoint"] as? String == TestServer.issuer + "/devices/{deviceID}/store-key"
            )
            #expect(
                discovery["oauth_authorization_server"] as? String == TestServer.issuer
                    + "/.well-known/oauth-authorization-server")
            #expect(discovery["client_id"] as? String == "baton-device")
        }
    }

    @Test(arguments: StorageBackend.allCases) func passwordGrantIssuesAShortLivedES256TokenThatVerifiesAgainstTheJWKS(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let (status, body) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "correct-horse-battery"), ("scope", "odata settings"),
            ])
            #expect(status == .ok)
            #expect(body["token_type"] as? String == "Bearer")
            #expect(body["expires_in"] as? Int == 900)
            #expect(body["scope"] as? String == "odata settings")
            let token = try #require(body["access_token"] as? String)
            let jwks = try await client.execute(uri: "/oauth/jwks", method: .get) { String(buffer: $0.body) }
            let keys = try await JWTKeyCollection().add(jwksJSON: jwks)
            struct Claims: JWTPayload {
                var sub: SubjectClaim
                var aud: AudienceClaim
                var scope: String
                var exp: ExpirationClaim
                var iat: IssuedAtClaim
                var jti: IDClaim
                func verify(using algorithm: some JWTAlgorithm) async throws {}
            }
            let claims = try await keys.verify(token, as: Claims.self)
            #expect(claims.sub.value == "alice")
            #expect(claims.aud.value == ["baton"])
            #expect(claims.scope == "odata settings")
            #expect(claims.exp.value.timeIntervalSince(claims.iat.value) == 900)
            let header = try #require(token.split(separator: ".").first)
            #expect(String(decoding: Data(base64URL: String(header)) ?? Data(), as: UTF8.self).contains("\"ES256\""))
        }
    }

    struct TokenErrorCase: Sendable, CustomStringConvertible {
        var parameters: [(String, String)]
        var status: Int
        var error: String
        var description: String { "\(error): \(parameters.map(\.0))" }
    }

    static let device = ("client_id", "baton-device")
    static let tokenErrors: [TokenErrorCase] = [
        .init(
            parameters: [("grant_type", "password"), device, ("username", "alice"), ("password", "wrong-password-1")],
            status: 400, error: "invalid_grant"),
        .init(
            parameters: [
                ("grant_type", "password"), ("client_id", "nobody"), ("username", "alice"), ("password", "x"),
            ], status: 401, error: "invalid_client"),
        // A NUL after the name is not alice (SQLite used to be handed the name as a C string, which ended there,
        // while the throttle counted the whole name: a new suffix per guess got round alice's limit).
        .init(
            parameters: [
                ("grant_type", "password"), device, ("username", "alice\u{0}x"), ("password", "correct-horse-battery"),
            ], status: 400, error: "invalid_grant"),
        .init(
            parameters: [("grant_type", "client_credentials"), device], status: 400, error: "unsupported_grant_type"),
        .init(parameters: [("grant_type", "authorization_code"), device], status: 400, error: "unauthorized_client"),
        .init(parameters: [device], status: 400, error: "invalid_request"),
        .init(
            parameters: [("grant_type", "password"), device, ("username", "alice")], status: 400,
            error: "invalid_request"),
        .init(
            parameters: [
                ("grant_type", "password"), device, ("username", "alice"), ("password", "correct-horse-battery"),
                ("scope", "admin"),
            ], status: 400, error: "invalid_scope"),
        .init(
            parameters: [("grant_type", "refresh_token"), device, ("refresh_token", "forged")], status: 400,
            error: "invalid_grant"),
        .init(
            parameters: [("grant_type", "password"), ("grant_type", "password"), device], status: 400,
            error: "invalid_request"),
    ]

    @Test(arguments: tokenErrors, StorageBackend.allCases) func tokenEndpointErrorsFollowRFC6749(
        _ errorCase: TokenErrorCase, backend: StorageBackend
    ) async throws {
        let (parameters, status, error) = (errorCase.parameters, errorCase.status, errorCase.error)
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let (code, body) = try await client.token(parameters)
            #expect(code.code == status)
            #expect(body["error"] as? String == error)
            #expect((body["error_description"] as? String)?.isEmpty == false)
            #expect(!(body["error_description"] as? String ?? "").contains("correct-horse-battery"))
        }
    }

    @Test(arguments: StorageBackend.allCases) func tokenEndpointRejectsJSONBodiesAndOversizedBodies(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.test { client in
            let wrongType = try await client.execute(
                uri: "/oauth/token", method: .post, headers: [.contentType: "application/json"],
                body: ByteBuffer(string: #"{"grant_type":"password"}"#)
            ) { ($0.status, TestClient.Response.object($0.body)) }
            #expect(wrongType.0 == .badRequest)
            #expect(wrongType.1["error"] as? String == "invalid_request")
            // The form's media type is read by byte, whole: a longer type or one glued to a mark is not the form.
            for type in ["application/x-www-form-urlencodedx", "application/x-www-form-urlencoded\u{301}"] {
                let glued = try await client.execute(
                    uri: "/oauth/token", method: .post, headers: [.contentType: type],
                    body: ByteBuffer(string: "grant_type=password")
                ) { ($0.status, TestClient.Response.object($0.body)) }
                #expect(glued.0 == .badRequest, "\(type.debugDescription)")
                #expect(
                    glued.1["error_description"] as? String == "The body must be application/x-www-form-urlencoded.")
            }
            let huge = try await client.execute(
                uri: "/oauth/token", method: .post, headers: formHeaders,
                body: ByteBuffer(string: "grant_type=" + String(repeating: "x", count: 200_000))
            ) { ($0.status, TestClient.Response.object($0.body)) }
            #expect(huge.0 == .contentTooLarge)
            #expect(
                (huge.1["error"] as? [String: Any])?["message"] as? String
                    == "The request body is larger than the server accepts (64 KiB).")
        }
    }

    @Test(arguments: StorageBackend.allCases) func refreshTokensRotateAndReuseRevokesTheFamily(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let first = try await client.signIn("alice")
            let refresh = [("grant_type", "refresh_token"), ("client_id", "baton-device")]
            let (status, rotated) = try await client.token(refresh + [("refresh_token", first.refresh)])
            #expect(status == .ok)
            let second = try #require(rotated["refresh_token"] as? String)
            #expect(second != first.refresh)
            // The used token is dead, and presenting it kills the rotated one too.
            let (reuseStatus, reuse) = try await client.token(refresh + [("refresh_token", first.refresh)])
            #expect(reuseStatus == .badRequest)
            #expect(reuse["error"] as? String == "invalid_grant")
            let (afterStatus, after) = try await client.token(refresh + [("refresh_token", second)])
            #expect(afterStatus == .badRequest)
            #expect(after["error_description"] as? String == "The refresh token was revoked.")
        }
        let actions = try await server.server.audit.entries().map(\.action)
        #expect(actions.contains("refresh-token-reuse"))
    }

    @Test(arguments: StorageBackend.allCases) func refreshTokensExpire(backend: StorageBackend) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let tokens = try await client.signIn("alice")
            server.clock.advance(by: 31 * 86_400)
            let (status, body) = try await client.token([
                ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", tokens.refresh),
            ])
            #expect(status == .badRequest)
            #expect(body["error_description"] as? String == "The refresh token has expired; sign in again.")
        }
    }

    @Test(arguments: StorageBackend.allCases) func revocationKillsRefreshAndAccessTokens(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let tokens = try await client.signIn("alice")
            for token in [tokens.refresh, tokens.access, "unknown-token"] {
                let status = try await client.execute(
                    uri: "/oauth/revoke", method: .post, headers: formHeaders,
                    body: formBody([("token", token), ("client_id", "baton-device")])
                ) { $0.status }
                #expect(status == .ok)  // RFC 7009: unknown tokens too.
            }
            let (refreshStatus, _) = try await client.token([
                ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", tokens.refresh),
            ])
            #expect(refreshStatus == .badRequest)
            let (status, body, _) = try await client.get("/me", token: tokens.access)
            #expect(status == .unauthorized)
            #expect((body["error"] as? [String: Any])?["message"] as? String == "The access token was revoked.")
        }
    }

    @Test(arguments: StorageBackend.allCases) func bruteForceIsSlowedDownWithADoublingRetryAfter(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let wrong = [
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "guess-guess-1"),
            ]
            func attempt(_ form: [(String, String)]) async throws -> (HTTPResponse.Status, String?, [String: Any]) {
                try await client.execute(uri: "/oauth/token", method: .post, headers: formHeaders, body: formBody(form))
                {
                    ($0.status, $0.headers[.retryAfter], TestClient.Response.object($0.body))
                }
            }
            for _ in 0..<5 { #expect(try await attempt(wrong).0 == .badRequest) }
            // Past five free failures each further one doubles the wait: 1 s, 2 s, 4 s, …
            for wait in [1, 2, 4, 8] {
                let throttled = try await attempt(wrong)
                #expect(throttled.0 == .tooManyRequests)
                #expect(throttled.1 == "\(wait)")
                #expect(
                    throttled.2["error_description"] as? String
                        == "Too many failed sign-ins. Try again in \(wait) seconds.")
                // Even the right password waits.
                let right = Array(wrong.dropLast()) + [("password", "correct-horse-battery")]
                #expect(try await attempt(right).0 == .tooManyRequests)
                server.clock.advance(by: TimeInterval(wait))
                #expect(try await attempt(wrong).0 == .badRequest)
            }
            server.clock.advance(by: 16)
            _ = try await client.signIn("alice")
        }
    }
}

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct AddressThrottleTests {
    @Test(arguments: StorageBackend.allCases) func manyFailuresFromOneAddressAreThrottledAcrossUserNames(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.test { client in
            for attempt in 0..<50 {
                let (status, _) = try await client.token([
                    ("grant_type", "password"), ("client_id", "baton-device"), ("username", "guess\(attempt)"),
                    ("password", "guess-guess-1"),
                ])
                #expect(status == .badRequest)
            }
            let (status, body) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "someone-new"),
                ("password", "guess-guess-1"),
            ])
            #expect(status == .tooManyRequests)
            #expect(body["error"] as? String == "too_many_attempts")
        }
    }
}

extension Data {
    init?(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }
}

extension TestClient.Response {
    static func object(_ body: ByteBuffer) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any]) ?? [:]
    }
}
