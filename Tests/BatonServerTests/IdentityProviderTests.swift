import BatonOData
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import JWTKit
import NIOCore
import Testing

@testable import BatonServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Sign-in through the airline's identity provider (OpenID Connect) and provisioning over SCIM 2.0, against a real
/// OpenID Provider from PyPI (`oidc-provider-mock`, started by `Interop/oidc_provider.py`) and a real SCIM client and
/// conformance checker (`scim2-client`, `scim2-tester`), on both engines.
@Suite(.serverSlot, .timeLimit(.minutes(10)), .serialized) struct IdentityProviderTests {
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
        let server = try await LiveServer.start(
            settings: ["sign-in.methods": "password,device"], database: try await backend.freshDatabase())
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
        #expect(await refusal(try token(["aud": ["baton", "other"]]))?.contains("azp") == true)
        #expect(await refusal(try token(["azp": "other"]))?.contains("azp") == true)
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

/// What the review of the change found, each a test first: a provider's name reused with another issuer, the
/// provider demoting the last admin, SCIM bodies as providers send them (and as an attacker would), an admin's
/// withdrawal that SCIM must not lift, an unverified e-mail, plain-HTTP endpoints, a provider that is away, and a
/// provider's host in the pages' policy.
struct IdentityProviderEdgeTests {
    static func provider(_ name: String = "corp", issuer: String = "https://id.example") -> IdentityProvider {
        var provider = IdentityProvider(name: name, displayName: "Corp ID", issuer: issuer, clientID: "baton")
        provider.roleMap = ["staff": .groundStaff, "admins": .admin]
        return provider
    }

    /// A group maps to a role only when it is spelled with the same code points: the Ohm sign is not an Omega,
    /// though Swift's `==` calls them equal.
    @Test func groupsMapToRolesByTheirCodePoints() {
        var provider = Self.provider()
        provider.roleMap = ["\u{03A9}-admins": .admin, "staff": .groundStaff]
        #expect(provider.role(forGroups: ["\u{03A9}-admins", "staff"]) == .admin)
        #expect(provider.role(forGroups: ["\u{2126}-admins", "staff"]) == .groundStaff)
        #expect(provider.role(forGroups: ["\u{2126}-admins"]) == nil)
    }

    static func claims(_ sub: String, _ name: String, groups: [String] = ["staff"], more: [String: JSONValue] = [:])
        -> IDTokenClaims
    {
        IDTokenClaims(
            subject: sub,
            claims: more.merging(
                ["preferred_username": .string(name), "groups": .array(groups.map(JSONValue.string))]) { $1 })
    }

    static func scim(
        _ client: any TestClientProtocol, _ method: HTTPRequest.Method, _ uri: String, token: String,
        body: String? = nil
    ) async throws -> (status: HTTPResponse.Status, body: String) {
        var headers: HTTPFields = [.authorization: "Bearer \(token)", .contentType: "application/scim+json"]
        headers[.accept] = "application/scim+json"
        return try await client.execute(
            uri: uri, method: method, headers: headers, body: body.map { ByteBuffer(string: $0) }
        ) { response in (response.status, String(buffer: response.body)) }
    }

    @Test(arguments: StorageBackend.allCases) func aProviderNameAddedAgainWithAnotherIssuerVouchesForNobody(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let providers = server.server.identityProviders
        try await providers.add(Self.provider(), clientSecret: "s")
        guard
            case .signedIn(let alice, true, _) = try await server.server.users.signIn(
                through: Self.provider(), claims: Self.claims("sub-1", "alice"))
        else { throw TestFailure("alice was not created") }
        #expect(alice.identityProvider == "corp")
        try await providers.remove("corp")
        // Someone registers "corp" again for another issuer: its sub-1 is not alice, and its SCIM token sees nobody.
        let impostor = Self.provider(issuer: "https://evil.example")
        try await providers.add(impostor, clientSecret: "s")
        guard
            case .refused(let reason) = try await server.server.users.signIn(
                through: impostor, claims: Self.claims("sub-1", "alice"))
        else { throw TestFailure("another issuer's sub-1 signed in as alice") }
        #expect(reason.contains("already has a user named 'alice'"))
        let token = try await providers.createSCIMToken(for: "corp")
        try await server.test { client in
            let read = try await Self.scim(client, .get, "/scim/v2/Users/alice", token: token)
            let deleted = try await Self.scim(client, .delete, "/scim/v2/Users/alice", token: token)
            #expect(read.status == .notFound && deleted.status == .notFound)
        }
        // The same name with the same issuer again: alice is theirs again.
        try await providers.remove("corp")
        try await providers.add(Self.provider(), clientSecret: "s")
        guard
            case .signedIn(let again, false, _) = try await server.server.users.signIn(
                through: Self.provider(), claims: Self.claims("sub-1", "alice"))
        else { throw TestFailure("alice was not recognised") }
        #expect(again.name == "alice")
        // The same issuer under another name: its sub-1 is alice's at that issuer, so no second user is made for it
        // (a refusal with the reason, not an error).
        try await providers.remove("corp")
        let renamed = Self.provider("corp2")
        try await providers.add(renamed, clientSecret: "s")
        guard
            case .refused(let clash) = try await server.server.users.signIn(
                through: renamed, claims: Self.claims("sub-1", "alice2"))
        else { throw TestFailure("a second user was bound to alice's sub") }
        #expect(clash.contains("Another Baton user is bound"))
    }

    @Test func theProviderCannotTakeTheAdminRoleFromTheLastAdminAndAnUnverifiedEmailNamesNobody() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.server.identityProviders.add(Self.provider(), clientSecret: "s")
        guard
            case .signedIn(let ada, _, _) = try await server.server.users.signIn(
                through: Self.provider(), claims: Self.claims("sub-ada", "ada", groups: ["admins"]))
        else { throw TestFailure("ada was not created") }
        #expect(ada.role == .admin)
        // Ada is the only admin: the provider now puts her in staff only. The sign-in is refused with the reason,
        // as a page (not an error that escapes the sign-in), and she stays admin.
        guard
            case .refused(let reason) = try await server.server.users.signIn(
                through: Self.provider(), claims: Self.claims("sub-ada", "ada"))
        else { throw TestFailure("the last admin was demoted") }
        #expect(reason.contains("last enabled admin"))
        #expect(try await server.server.users.user(named: "ada")?.role == .admin)
        // With another admin, the provider's groups rule: Ben, admin, holds a cockpit session; the provider moves
        // him to staff, and at his next sign-in he is ground staff and the session is gone.
        _ = try await server.server.users.signIn(
            through: Self.provider(), claims: Self.claims("sub-ben", "ben", groups: ["admins"]))
        let cookie = try await server.server.cockpitSessions.open(for: "ben")
        #expect(try await server.server.cockpitSessions.session(cookie: cookie) != nil)
        guard
            case .signedIn(let ben, false, .groundStaff) = try await server.server.users.signIn(
                through: Self.provider(), claims: Self.claims("sub-ben", "ben"))
        else { throw TestFailure("ben's role did not follow his groups") }
        #expect(ben.role == .groundStaff)
        #expect(try await server.server.cockpitSessions.session(cookie: cookie) == nil)

        var byEmail = Self.provider("mail", issuer: "https://mail.example")
        byEmail.nameClaim = .email
        try await server.server.identityProviders.add(byEmail, clientSecret: "s")
        for verified in [JSONValue.bool(false), .string("false"), nil] {
            var more: [String: JSONValue] = ["email": .string("ada@corp.example")]
            more["email_verified"] = verified
            let unverified = Self.claims("sub-x", "x", more: more)
            guard case .refused(let why) = try await server.server.users.signIn(through: byEmail, claims: unverified)
            else { throw TestFailure("an unverified address became a user name") }
            #expect(why.contains("not verified"))
        }
        #expect(try await server.server.users.user(named: "ada@corp.example") == nil)
        let vouched = Self.claims(
            "sub-y", "y", more: ["email": .string("ada@corp.example"), "email_verified": .bool(true)])
        guard case .signedIn(let ada, true, _) = try await server.server.users.signIn(through: byEmail, claims: vouched)
        else { throw TestFailure("a verified address did not become the user name") }
        #expect(ada.name == "ada@corp.example")
    }

    @Test(arguments: StorageBackend.allCases) func scimTakesProvidersBodiesAndRefusesWhatItMustNot(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.server.identityProviders.add(Self.provider(), clientSecret: "s")
        let token = try await server.server.identityProviders.createSCIMToken(for: "corp")
        try await server.test { client in
            // As Entra ID sends a user: names, e-mails and the enterprise extension Baton does not keep.
            let entra = """
                {"schemas":["urn:ietf:params:scim:schemas:core:2.0:User",
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User"],"userName":"dana","active":true,
                "displayName":"Dana D.","name":{"givenName":"Dana"},"emails":[{"value":"dana@corp.example"}],
                "urn:ietf:params:scim:schemas:extension:enterprise:2.0:User":{"department":"Ramp"}}
                """
            #expect(try await Self.scim(client, .post, "/scim/v2/Users", token: token, body: entra).status == .created)
            let patch = """
                {"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[
                {"op":"replace","path":"name.familyName","value":"D."},
                {"op":"Replace","path":"urn:ietf:params:scim:schemas:core:2.0:User:displayName","value":"Dana Doe"}]}
                """
            let patched = try await Self.scim(client, .patch, "/scim/v2/Users/dana", token: token, body: patch)
            #expect(patched.status == .ok && patched.body.contains(#""displayName":"Dana Doe""#), "\(patched)")
            // Not a boolean, a duplicate member, a display name with a bidi override: refused, nothing applied.
            for body in [
                #"{"schemas":["urn:ietf:params:scim:schemas:core:2.0:User"],"userName":"dana","active":1}"#,
                #"{"schemas":["urn:ietf:params:scim:schemas:core:2.0:User"],"userName":"dana","active":true,"active":false}"#,
                #"{"schemas":["urn:ietf:params:scim:schemas:core:2.0:User"],"userName":"dana","displayName":"Dana\u202Eeod"}"#,
            ] {
                let answer = try await Self.scim(client, .put, "/scim/v2/Users/dana", token: token, body: body)
                #expect(answer.status == .badRequest, "\(body): \(answer)")
            }
            #expect(
                try await server.server.users.user(named: "dana").map { !$0.disabled && $0.displayName == "Dana Doe" }
                    == true)
            // A PUT that leaves `active` out re-enables nobody (and withdraws nobody).
            let put = #"{"schemas":["urn:ietf:params:scim:schemas:core:2.0:User"],"userName":"dana"}"#
            #expect(try await Self.scim(client, .put, "/scim/v2/Users/dana", token: token, body: put).status == .ok)
            #expect(try await server.server.users.user(named: "dana")?.disabled == false)
        }
        // An admin withdraws dana (a stolen tablet): the provider's next sync cannot lift it; its own withdrawal it can.
        try await server.server.users.disable("dana")
        let activate = """
            {"schemas":["urn:ietf:params:scim:api:messages:2.0:PatchOp"],"Operations":[{"op":"replace","path":"active","value":true}]}
            """
        let deactivate = activate.replacingOccurrences(of: "true", with: "\"False\"")
        try await server.test { client in
            let refused = try await Self.scim(client, .patch, "/scim/v2/Users/dana", token: token, body: activate)
            #expect(refused.status == .conflict && refused.body.contains("administrator"), "\(refused)")
            #expect(try await server.server.users.user(named: "dana")?.disabled == true)
            // Nor by deleting her (she would come back as a new user at her next sign-in).
            let deleted = try await Self.scim(client, .delete, "/scim/v2/Users/dana", token: token)
            #expect(deleted.status == .conflict, "\(deleted)")
            #expect(try await server.server.users.user(named: "dana") != nil)
            // A user disabled before Baton recorded who did it counts as an admin's withdrawal.
            try await server.server.database.storage.write { db in
                try await db.execute("UPDATE users SET disabledBy = NULL WHERE name = ?", "dana")
            }
            let unknown = try await Self.scim(client, .patch, "/scim/v2/Users/dana", token: token, body: activate)
            #expect(unknown.status == .conflict, "\(unknown)")
            try await server.server.users.enable("dana")
            #expect(
                try await Self.scim(client, .patch, "/scim/v2/Users/dana", token: token, body: deactivate).status == .ok
            )
            #expect(try await server.server.users.user(named: "dana")?.disabled == true)
            #expect(
                try await Self.scim(client, .patch, "/scim/v2/Users/dana", token: token, body: activate).status == .ok)
            #expect(try await server.server.users.user(named: "dana")?.disabled == false)
        }
    }

    @Test func aPasswordForAProvidersUserIsCountedLikeAWrongOne() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.server.identityProviders.add(Self.provider(), clientSecret: "s")
        _ = try await server.server.users.signIn(through: Self.provider(), claims: Self.claims("sub-1", "alice"))
        try await server.test { client in
            let (status, body) = try await client.form(
                "/oauth/token",
                [("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"), ("password", "x")])
            #expect(status == .badRequest && (body["error_description"] as? String)?.contains("'corp'") == true)
        }
        let audit = try await server.server.audit.entries(limit: 20)
        #expect(audit.contains { $0.action == "sign-in-failed" && $0.subject == "alice" })
    }

    @Test func providersNeverPointBatonAtPlainHTTPOrWidenThePagesPolicy() async throws {
        let https = Self.provider()
        #expect(OpenIDRelyingParty.isAcceptable(endpoint: "https://id.example/token", of: https))
        #expect(!OpenIDRelyingParty.isAcceptable(endpoint: "http://127.0.0.1:8080/admin/", of: https))
        #expect(!OpenIDRelyingParty.isAcceptable(endpoint: "http://intranet.example/token", of: https))
        #expect(!OpenIDRelyingParty.isAcceptable(endpoint: "https://user:pw@id.example/token", of: https))
        let local = Self.provider(issuer: "http://localhost:9400")
        #expect(OpenIDRelyingParty.isAcceptable(endpoint: "http://localhost:9400/token", of: local))

        // A provider that is away is asked again only after half a minute (nothing listens on port 1).
        let clock = TestClock()
        let party = OpenIDRelyingParty(clock: clock.serverClock)
        let away = Self.provider(issuer: "http://127.0.0.1:1")
        await #expect(throws: OpenIDError.self) { try await party.metadata(for: away) }
        let again = await #expect(throws: OpenIDError.self) { try await party.metadata(for: away) }
        #expect(again?.description.contains("a moment ago") == true)
        clock.advance(by: 31)
        let later = await #expect(throws: OpenIDError.self) { try await party.metadata(for: away) }
        #expect(later?.description.contains("cannot be reached") == true)

        // A provider whose host is a wildcard never puts `*` into the sign-in pages' form-action.
        let server = try await TestServer()
        defer { server.remove() }
        try await server.server.identityProviders.add(
            Self.provider(issuer: "https://*.evil.example"), clientSecret: "s")
        try await server.test { client in
            let policy = try await client.execute(uri: "/oauth/device", method: .get) { response in
                response.headers[.contentSecurityPolicy] ?? ""
            }
            #expect(policy.contains("form-action 'self'") && !policy.contains("*"), "\(policy)")
        }
    }
}
