import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import JWTKit
import Testing

@testable import BatonServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sign-in through the airline's identity provider (OpenID Connect) and provisioning over SCIM 2.0, against a real
/// OpenID Provider from PyPI (`oidc-provider-mock`, started by `Interop/oidc_provider.py`) and a real SCIM client and
/// conformance checker (`scim2-client`, `scim2-tester`), on both engines.
@Suite(.serverSlot, .serialized) struct IdentityProviderTests {
    static let people: [[String: any Sendable]] = [
        ["sub": "s-alice", "preferred_username": "alice", "name": "Alice Admin", "groups": ["gs-admins", "gs-staff"]],
        ["sub": "s-bob", "preferred_username": "bob", "groups": ["gs-staff"]],
        // Claims the name of the local admin.
        ["sub": "s-mallory", "preferred_username": "root", "groups": ["gs-admins"]],
        ["sub": "s-nogroup", "preferred_username": "nogroup", "groups": ["visitors"]],
    ]

    /// Registers the running provider as `corp`, and a second provider `other` (never reached: only its SCIM
    /// token is used).
    static func register(_ provider: OpenIDProviderProcess, on server: LiveServer) async throws {
        var corp = IdentityProvider(
            name: "corp", displayName: "Corp ID", issuer: provider.issuer, clientID: provider.clientID)
        corp.roleMap = try IdentityProvider.roleMap(parsing: "gs-staff=ground-staff,gs-sup=supervisor,gs-admins=admin")
        try await server.server.identityProviders.add(corp, clientSecret: try provider.clientSecret)
        var other = IdentityProvider(name: "other", issuer: "https://other.example", clientID: "baton")
        other.roleMap = ["staff": .groundStaff]
        try await server.server.identityProviders.add(other, clientSecret: "other-secret")
    }

    @Test(arguments: StorageBackend.allCases) func peopleSignInThroughTheProviderAndItProvisionsThem(
        backend: StorageBackend
    ) async throws {
        let missing = try await offThePool {
            TestPython.missing(["requests", "oidc_provider_mock", "scim2_client", "scim2_tester", "httpx2"])
        }
        try #require(missing == nil, "\(missing ?? "")")
        let server = try await LiveServer.start(database: try await backend.freshDatabase())
        defer { Task { await server.stop() } }
        try await server.addUser("root", displayName: "Local Root", role: .admin, password: "harbour-lantern-7391")
        let provider = try await OpenIDProviderProcess(
            people: Self.people,
            redirectURIs: ["corp", "other"].map { "\(server.url.absoluteString)/oauth/idp/\($0)/callback" })
        defer { provider.stop() }
        try await Self.register(provider, on: server)
        let corpToken = try await server.server.identityProviders.createSCIMToken(for: "corp")
        let otherToken = try await server.server.identityProviders.createSCIMToken(for: "other")
        let script = try #require(
            Bundle.module.url(forResource: "idp_checks", withExtension: "py", subdirectory: "Interop"))
        let result = try await ServerExecutableTests.run(
            TestPython.executable, [script.path, server.url.absoluteString],
            environment: ["BATON_SCIM_TOKEN": corpToken, "BATON_SCIM_TOKEN_OTHER": otherToken])
        #expect(result.status == 0, "\(result.output)\(result.error.suffix(3_000))")
        #expect(result.output.contains("identity provider checks passed"), "\(result.output)")

        // Alice was made just in time, bound to (corp, s-alice), with the role her groups give; no local password.
        let alice = try #require(try await server.server.users.user(named: "alice"))
        #expect(alice.identityProvider == "corp" && alice.subject == "s-alice" && alice.role == .admin)
        #expect(alice.displayName == "Alice Admin")
        // The local admin was not touched by the provider's "root".
        let root = try #require(try await server.server.users.user(named: "root"))
        #expect(root.identityProvider == nil && root.role == .admin)
        #expect(try await server.server.users.user(named: "carol") == nil)
        // Every SCIM change is audited with the provider as its actor.
        let audit = try await server.server.audit.entries(limit: 500)
        let scim = audit.filter { $0.actor == "scim:corp" }.map { "\($0.action) \($0.subject ?? "")" }
        #expect(scim.contains("user-added carol") && scim.contains("user-disabled carol"), "\(scim)")
        #expect(scim.contains("user-deleted carol"), "\(scim)")
        #expect(
            audit.contains {
                $0.actor == "corp (identity provider)" && $0.action == "user-added" && $0.subject == "alice"
            })
        #expect(
            audit.contains {
                $0.action == "sign-in-failed" && ($0.detail ?? "").contains("already has a user named 'root'")
            })
        // No secret of any kind in the audit log.
        let secret = try provider.clientSecret
        #expect(!audit.contains { ($0.detail ?? "").contains(secret) || ($0.detail ?? "").contains(corpToken) })
    }
}

/// The ID token checks of OpenID Connect Core 1.0 §3.1.3.7, each attack a token Baton must refuse: signed here with
/// an ES256 key the test holds, published as that provider's JWKS in the relying party's cache.
struct IDTokenValidationTests {
    let key = P256.Signing.PrivateKey()
    let now = Date(timeIntervalSince1970: 1_795_000_000)
    let provider: IdentityProvider = {
        var provider = IdentityProvider(name: "corp", issuer: "https://id.example", clientID: "baton")
        provider.roleMap = ["staff": .groundStaff]
        return provider
    }()

    var jwk: JWK {
        let point = key.publicKey.x963Representation.dropFirst()
        return JWK.ecdsa(
            .es256, identifier: JWKIdentifier(string: "k1"), x: Data(point.prefix(32)).base64URLEncoded,
            y: Data(point.suffix(32)).base64URLEncoded, curve: .p256)
    }

    /// A relying party whose cache holds the provider's metadata and keys (fetched "now").
    func party() -> OpenIDRelyingParty {
        let party = OpenIDRelyingParty(clock: ServerClock { now })
        let metadata = ProviderMetadata(
            issuer: "https://id.example", authorizationEndpoint: "https://id.example/authorize",
            tokenEndpoint: "https://id.example/token", jwksURI: "https://id.example/jwks", signingAlgorithms: ["ES256"])
        party.cache.withLock {
            $0["corp"] = .init(metadata: metadata, fetchedAt: now, jwks: JWKS(keys: [jwk]), jwksFetchedAt: now)
        }
        return party
    }

    var claims: [String: Any] {
        [
            "iss": "https://id.example", "sub": "s-alice", "aud": "baton", "nonce": "n-1",
            "exp": now.timeIntervalSince1970 + 300, "iat": now.timeIntervalSince1970, "preferred_username": "alice",
        ]
    }

    func token(header: [String: Any] = ["alg": "ES256", "kid": "k1"], _ changes: [String: Any?] = [:]) throws
        -> String
    {
        var body = claims
        for (name, value) in changes { body[name] = value }
        let signingInput =
            Data(try JSONSerialization.data(withJSONObject: header)).base64URLEncoded + "."
            + Data(try JSONSerialization.data(withJSONObject: body)).base64URLEncoded
        let signature = try key.signature(for: Data(signingInput.utf8)).rawRepresentation
        return signingInput + "." + signature.base64URLEncoded
    }

    func refusal(_ token: String, nonce: String = "n-1") async -> String? {
        do {
            _ = try await party().validate(token, provider: provider, nonce: nonce)
            return nil
        } catch {
            return error.description
        }
    }

    @Test func aGoodTokenNamesItsPerson() async throws {
        let claims = try await party().validate(try token(), provider: provider, nonce: "n-1")
        #expect(claims.subject == "s-alice" && claims.string("preferred_username") == "alice")
    }

    @Test func tokensThatAreNotTheProvidersAreRefused() async throws {
        #expect(await refusal(try token(), nonce: "n-other")?.contains("nonce") == true)
        #expect(await refusal(try token(["aud": "someone-else"]))?.contains("another client") == true)
        #expect(await refusal(try token(["aud": ["baton", "other"]]))?.contains("presenter") == true)
        #expect(await refusal(try token(["aud": ["baton", "other"], "azp": "baton"])) == nil)
        #expect(await refusal(try token(["iss": "https://evil.example"]))?.contains("someone else") == true)
        #expect(await refusal(try token(["exp": now.timeIntervalSince1970 - 600]))?.contains("expired") == true)
        #expect(await refusal(try token(["iat": now.timeIntervalSince1970 + 600]))?.contains("future") == true)
        #expect(await refusal(try token(["nonce": nil]))?.contains("nonce") == true)
        #expect(await refusal(try token(["sub": nil]))?.contains("subject") == true)
    }

    @Test func forgedSignaturesAreRefused() async throws {
        // alg none: no signature at all.
        let none =
            try token(header: ["alg": "none", "kid": "k1"]).split(separator: ".").prefix(2).joined(separator: ".") + "."
        #expect(await refusal(none)?.contains("algorithm none") == true)
        // HS256 "keyed" with the provider's public key, which anyone can fetch.
        let header = Data(try JSONSerialization.data(withJSONObject: ["alg": "HS256", "kid": "k1"])).base64URLEncoded
        let body = Data(try JSONSerialization.data(withJSONObject: claims)).base64URLEncoded
        let mac = HMAC<SHA256>.authenticationCode(
            for: Data("\(header).\(body)".utf8), using: SymmetricKey(data: Data(key.publicKey.pemRepresentation.utf8)))
        #expect(await refusal("\(header).\(body).\(Data(mac).base64URLEncoded)")?.contains("algorithm HS256") == true)
        // Signed by another key under the provider's kid, and a kid the provider does not publish.
        let stranger = IDTokenValidationTests()
        #expect(await refusal(try stranger.token())?.contains("signature") == true)
        #expect(
            await refusal(try token(header: ["alg": "ES256", "kid": "k-unknown"]))?.contains("does not publish") == true
        )
        // A changed claim breaks the signature.
        let parts = try token().split(separator: ".").map(String.init)
        let tampered = Data(try JSONSerialization.data(withJSONObject: claims.merging(["sub": "s-root"]) { $1 }))
        #expect(await refusal("\(parts[0]).\(tampered.base64URLEncoded).\(parts[2])")?.contains("signature") == true)
        #expect(await refusal("not-a-jwt")?.contains("not a signed JWT") == true)
    }

    @Test func anUnknownKeyIsFetchedAtMostOnceAMinute() async throws {
        let party = party()
        // The cached set was fetched "now": an unknown kid does not make Baton fetch again (no endpoint is reached).
        await #expect(throws: OpenIDError.self) { try await party.key(for: provider, kid: "k-new") }
        #expect(party.cache.withLock { $0["corp"]?.jwksFetchedAt } == now)
    }
}

/// `sign-in.local-passwords false`: only the providers sign people in. The pages show the providers' buttons
/// alone; a password posted anyway, and the password grant, are refused; a local-only deployment (no provider,
/// the default) keeps its password form.
struct LocalPasswordsTests {
    @Test(arguments: StorageBackend.allCases) func whenLocalPasswordsAreOffOnlyTheProvidersSignPeopleIn(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        _ = try await server.addUser("alice")
        _ = try await server.server.settings.set("sign-in.methods", to: "password,device")
        try await server.test { client in
            // A local-only deployment: the password form, no provider buttons.
            let before = try await client.page("/oauth/device")
            #expect(before.text.contains(#"name="password""#) && !before.text.contains("class=\"provider\""))
            #expect(try await client.approve("BDFH-KLMN", password: "wrong").status == .unauthorized)
        }
        var corp = IdentityProvider(name: "corp", displayName: "Corp ID", issuer: "https://id.example", clientID: "b")
        corp.roleMap = ["staff": .groundStaff]
        try await server.server.identityProviders.add(corp, clientSecret: "s3cret")
        _ = try await server.server.settings.set("sign-in.local-passwords", to: "false")
        try await server.test { client in
            let page = try await client.page("/oauth/device")
            #expect(page.text.contains("Allow: sign in with Corp ID") && !page.text.contains(#"name="password""#))
            let started = try await client.start()
            let code = try #require(started["user_code"] as? String)
            let posted = try await client.approve(code, password: "correct-horse-battery")
            #expect(posted.status == .forbidden && posted.text.contains("takes no Baton passwords"))
            let (status, body) = try await client.form(
                "/oauth/token",
                [
                    ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                    ("password", "correct-horse-battery"),
                ])
            #expect(status == .badRequest && body["error"] as? String == "unauthorized_client")
        }
        #expect(
            try await server.server.settings.current().signIn.localPasswords == false,
            "the setting is stored (and read back by every instance)")
    }
}
