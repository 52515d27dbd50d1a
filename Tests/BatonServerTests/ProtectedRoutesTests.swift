import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import BatonServer

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ProtectedRoutesTests {
    @Test(arguments: StorageBackend.allCases) func missingOrBadTokensGet401WithAChallenge(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let (status, body, headers) = try await client.get("/settings", token: nil)
            #expect(status == .unauthorized)
            #expect(headers[.wwwAuthenticate] == "Bearer realm=\"baton\"")
            #expect((body["error"] as? [String: Any])?["code"] as? String == "Unauthorized")
            let tokens = try await client.signIn("alice")
            var tampered = Array(tokens.access)
            tampered[tampered.count - 5] = tampered[tampered.count - 5] == "A" ? "B" : "A"
            let (tamperedStatus, _, tamperedHeaders) = try await client.get("/settings", token: String(tampered))
            #expect(tamperedStatus == .unauthorized)
            #expect(tamperedHeaders[.wwwAuthenticate]?.contains("error=\"invalid_token\"") == true)
            let (basicStatus, _, _) = try await client.get(
                "/settings", token: nil, headers: [.authorization: "Basic YWxpY2U6eA=="])
            #expect(basicStatus == .unauthorized)
        }
    }

    /// A header read without the subscript's join reads what the subscript reads: none, one field as it is, several
    /// joined (cookies with `; `), whatever the other fields and the name's case.
    @Test func aHeaderReadWithoutJoiningIsTheSubscriptsValue() {
        let other = HTTPField.Name("X-Other")!
        let cases: [[HTTPField]] = [
            [],
            [HTTPField(name: other, value: "x")],
            [HTTPField(name: .authorization, value: "Bearer " + String(repeating: "a", count: 900))],
            [HTTPField(name: other, value: "x"), HTTPField(name: HTTPField.Name("AUTHORIZATION")!, value: "Bearer b")],
            [
                HTTPField(name: .authorization, value: "Bearer a"), HTTPField(name: other, value: "x"),
                HTTPField(name: .authorization, value: "Bearer b"),
            ],
            [HTTPField(name: .authorization, value: ""), HTTPField(name: .authorization, value: "")],
            [HTTPField(name: .cookie, value: "a=1"), HTTPField(name: .cookie, value: "b=2")],
        ]
        for fields in cases {
            var headers = HTTPFields()
            headers.append(contentsOf: fields)
            for name in [HTTPField.Name.authorization, .cookie, other] {
                #expect(headers.value(name) == headers[name], "\(fields) \(name)")
            }
        }
    }

    @Test func theBearerSchemeIsSplitByByteAndComparedWithoutASCIICaseOnly() {
        #expect(BearerAuthenticationMiddleware.bearerToken("Bearer abc") == "abc")
        #expect(BearerAuthenticationMiddleware.bearerToken("bEaReR abc") == "abc")
        #expect(BearerAuthenticationMiddleware.bearerToken("Bearer  abc") == " abc")
        // A combining mark after the space no longer hides it: the token is what follows, and is refused as a token.
        #expect(BearerAuthenticationMiddleware.bearerToken("Bearer \u{301}abc") == "\u{301}abc")
        for refused in [
            "Bearer", "Bearer ", "Basic abc", "Bearer\u{301} abc", "B\u{435}arer abc", "BEARER\u{0} abc", " Bearer abc",
            "Bearerabc", "",
        ] {
            #expect(BearerAuthenticationMiddleware.bearerToken(refused) == nil, "\(Array(refused.utf8))")
        }
    }

    @Test func anyCaseOfTheSchemeIsAcceptedAndAMarkedSpaceIsRefusedNotCrashed() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let tokens = try await client.signIn("alice")
            let (status, _, _) = try await client.get(
                "/me", token: nil, headers: [.authorization: "bEaReR \(tokens.access)"])
            #expect(status == .ok)
            for value in ["Bearer \u{301}\(tokens.access)", "Bearer\u{301} \(tokens.access)"] {
                let (refused, body, headers) = try await client.get(
                    "/me", token: nil, headers: [.authorization: value])
                #expect(refused == .unauthorized)
                #expect(headers[.wwwAuthenticate]?.hasPrefix("Bearer realm=\"baton\"") == true)
                #expect((body["error"] as? [String: Any])?["code"] as? String == "Unauthorized")
            }
        }
    }

    @Test(arguments: StorageBackend.allCases) func accessTokensExpireAfterFifteenMinutes(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let tokens = try await client.signIn("alice")
            server.clock.advance(by: 899)
            #expect(try await client.get("/me", token: tokens.access).0 == .ok)
            server.clock.advance(by: 2)
            let (status, body, _) = try await client.get("/me", token: tokens.access)
            #expect(status == .unauthorized)
            #expect(
                (body["error"] as? [String: Any])?["message"] as? String == "The access token has expired; refresh it.")
        }
    }

    @Test(arguments: StorageBackend.allCases) func disabledAndDeletedUsersLoseAccessAtOnce(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.addUser("bob")
        try await server.test { client in
            let alice = try await client.signIn("alice")
            let bob = try await client.signIn("bob")
            try await server.server.users.disable("alice")
            try await server.server.users.delete("bob")
            for tokens in [alice, bob] {
                #expect(try await client.get("/me", token: tokens.access).0 == .unauthorized)
                let (status, _) = try await client.token([
                    ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", tokens.refresh),
                ])
                #expect(status == .badRequest)
            }
            let (status, _) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "correct-horse-battery"),
            ])
            #expect(status == .badRequest)
        }
    }

    @Test(arguments: StorageBackend.allCases) func settingsExchangeAppliesThePolicyAndRefusesInactiveAppVersions(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        _ = try await server.server.settings.set("shared-devices.upload-pending-changes-of-previous-user", to: "false")
        _ = try await server.server.settings.set("passcode.min-length", to: "0")
        _ = try await server.server.settings.set("app-versions.inactive", to: "1.0.0, 1.1.0")
        try await server.test { client in
            let tokens = try await client.signIn("alice")
            let (status, body, _) = try await client.get(
                "/settings", token: tokens.access, headers: [.batonAppVersionForTests: "2.0.0"])
            #expect(status == .ok)
            let shared = body["sharedDevices"] as? [String: Any]
            #expect(shared?["uploadPendingChangesOfPreviousUser"] as? Bool == false)
            #expect(shared?["whenUploadNotAllowed"] as? String == "wait-for-author")
            // "No passcode" is not allowed in multi-user mode: the fallback applies.
            #expect((body["passcode"] as? [String: Any])?["minLength"] as? Int == 8)
            let (oldStatus, old, _) = try await client.get(
                "/settings", token: tokens.access, headers: [.batonAppVersionForTests: "1.1.0"])
            #expect(oldStatus == .forbidden)
            #expect(
                (old["error"] as? [String: Any])?["message"] as? String
                    == "App version 1.1.0 is no longer allowed on this server. Update the app.")
        }
    }

    @Test(arguments: [
        (
            "passcode.colour", "blue",
            "Unknown setting 'passcode.colour'. Known settings: shared-devices.multi-user, shared-devices.upload-pending-changes-of-previous-user, passcode.min-length, passcode.require-digit, passcode.require-letter, passcode.require-symbol, passcode.retry-limit, passcode.lock-timeout-seconds, app-versions.inactive, devices.settings-refresh-seconds, sign-in.methods, sign-in.local-passwords, telemetry.usage, telemetry.logs-with-sync, devices.max-per-user, backups.max-per-device, backups.max-mib-per-device, audit.retention-days."
        ),
        ("passcode.retry-limit", "0", "Setting 'passcode.retry-limit' takes an integer from 1 to 100, not '0'."),
        ("shared-devices.multi-user", "maybe", "Setting 'shared-devices.multi-user' takes true or false, not 'maybe'."),
    ])
    func badSettingsAreRefusedAndNothingChanges(key: String, value: String, message: String) async throws {
        let server = try await TestServer()
        defer { server.remove() }
        let before = try await server.server.settings.current()
        await #expect {
            try await server.server.settings.set(key, to: value)
        } throws: { ($0 as? ServerError)?.message == message }
        #expect(try await server.server.settings.current() == before)
    }

    static func publicKey(_ key: P256.Signing.PrivateKey = .init()) -> String {
        key.publicKey.x963Representation.base64EncodedString()
    }

    static func register(_ client: any TestClientProtocol, device: String, token: String, key: String) async throws
        -> (HTTPResponse.Status, [String: Any])
    {
        try await client.execute(
            uri: "/devices/\(device)/registration", method: .put,
            headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
            body: ByteBuffer(string: DeviceKeys.body(device: device, token: token, publicKey: key))
        ) { ($0.status, TestClient.Response.object($0.body)) }
    }

    @Test(arguments: StorageBackend.allCases) func storeKeysGoOnlyToUsersRegisteredOnTheDevice(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.addUser("bob")
        let storeKey = try await server.test { client in
            let alice = try await client.signIn("alice")
            let bob = try await client.signIn("bob")
            #expect(
                try await Self.register(client, device: "tablet-7", token: alice.access, key: Self.publicKey()).0 == .ok
            )
            #expect(
                try await Self.register(client, device: "tablet-9", token: bob.access, key: Self.publicKey()).0 == .ok)
            let (status, body, headers) = try await client.get("/devices/tablet-7/store-key", token: alice.access)
            #expect(status == .ok)
            #expect(headers[.cacheControl] == "no-store")
            let key = try #require(Data(base64Encoded: body["key"] as? String ?? ""))
            #expect(key.count == 32)
            // Bob is on another device: no key for tablet-7, nor for a device that does not exist.
            #expect(try await client.get("/devices/tablet-7/store-key", token: bob.access).0 == .forbidden)
            #expect(try await client.get("/devices/ghost/store-key", token: bob.access).0 == .forbidden)
            // Once Bob registers on tablet-7 he gets the same key; after unregistering, none.
            #expect(
                try await Self.register(client, device: "tablet-7", token: bob.access, key: Self.publicKey()).0 == .ok)
            let (_, bobs, _) = try await client.get("/devices/tablet-7/store-key", token: bob.access)
            #expect(bobs["key"] as? String == body["key"] as? String)
            let deleted = try await client.execute(
                uri: "/devices/tablet-7/registration", method: .delete,
                headers: [.authorization: "Bearer \(bob.access)"]
            ) { $0.status }
            #expect(deleted == .noContent)
            #expect(try await client.get("/devices/tablet-7/store-key", token: bob.access).0 == .forbidden)
            return key
        }
        // The key is sealed at rest: neither the database nor its WAL holds it in the clear.
        for file in ["server.sqlite", "server.sqlite-wal"] {
            let bytes = (try? Data(contentsOf: server.directory.appendingPathComponent(file))) ?? Data()
            #expect(bytes.range(of: storeKey) == nil, "\(file) holds the store key in the clear")
        }
    }

    @Test(arguments: StorageBackend.allCases) func discardedChangesAreKeptOnlyFromTheDevicesOwnStore(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.addUser("bob")
        try await server.test { client in
            let alice = try await client.signIn("alice")
            let bob = try await client.signIn("bob")
            #expect(
                try await Self.register(client, device: "tablet-7", token: alice.access, key: Self.publicKey()).0 == .ok
            )
            let (_, body, _) = try await client.get("/devices/tablet-7/store-key", token: alice.access)
            let key = SymmetricKey(data: try #require(Data(base64Encoded: body["key"] as? String ?? "")))
            let changes = Data(#"[{"author":"alice","body":"eyJSZW1hcmtzIjoibGVmdCB0eXJlIn0="}]"#.utf8)
            let sealed = try #require(
                try AES.GCM.seal(changes, using: key, authenticating: Data("baton-discarded-v1".utf8)).combined)
            func send(_ token: String, _ backup: Data, count: Int = 1) async throws -> HTTPResponse.Status {
                try await client.execute(
                    uri: "/devices/tablet-7/discarded-changes", method: .post,
                    headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                    body: ByteBuffer(
                        string: #"{"author":"alice","count":\#(count),"backup":"\#(backup.base64EncodedString())"}"#)
                ) { $0.status }
            }
            #expect(try await send(alice.access, sealed) == .created)
            // Not registered on the device; sealed with another key; no changes: refused, nothing kept.
            #expect(try await send(bob.access, sealed) == .forbidden)
            let foreign = try #require(
                try AES.GCM.seal(
                    changes, using: SymmetricKey(size: .bits256), authenticating: Data("baton-discarded-v1".utf8)
                )
                .combined)
            #expect(try await send(alice.access, foreign) == .badRequest)
            #expect(try await send(alice.access, sealed, count: 0) == .badRequest)
        }
        let kept = try await server.server.devices.discardedChanges()
        #expect(kept.count == 1)
        #expect(kept.first?.author == "alice" && kept.first?.uploader == "alice" && kept.first?.count == 1)
        let opened = try await server.server.devices.openDiscardedChanges(try #require(kept.first?.id))
        #expect(opened == Data(#"[{"author":"alice","body":"eyJSZW1hcmtzIjoibGVmdCB0eXJlIn0="}]"#.utf8))
        let audit = try await server.server.audit.entries()
        #expect(audit.contains { $0.action == "changes-discarded" && $0.subject == "alice" })
    }

    @Test(arguments: StorageBackend.allCases) func reRegistrationKeepsTheKeyHistory(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        let first = P256.Signing.PrivateKey()
        let second = P256.Signing.PrivateKey()
        try await server.test { client in
            let morning = try await client.signIn("alice")
            #expect(
                try await Self.register(client, device: "tablet-7", token: morning.access, key: Self.publicKey(first)).0
                    == .ok)
            server.clock.advance(by: 3600)
            let later = try await client.signIn("alice")
            #expect(
                try await Self.register(client, device: "tablet-7", token: later.access, key: Self.publicKey(second)).0
                    == .ok)
        }
        let history = try await server.server.devices.signingKeys(device: "tablet-7", user: "alice")
        #expect(history.count == 2)
        #expect(history[0].publicKey.rawRepresentation == first.publicKey.rawRepresentation)
        #expect(history[0].replacedAt == history[1].registeredAt)
        #expect(history[1].replacedAt == nil)
        // A change Alice signed with her first key still verifies against the history.
        let change = Data("PATCH PreflightChecks(1)".utf8)
        let signature = try first.signature(for: change)
        #expect(history.contains { $0.publicKey.isValidSignature(signature, for: change) })
    }

    @Test(arguments: [
        (
            "tablet 7", #"{"publicKey":"AAAA"}"#,
            "Device id is not valid: use 1 to 128 letters, digits, '.', '_', '-' or ':'."
        ),
        (
            "tablet-7", #"{"publicKey":"bm90IGEga2V5"}"#,
            "publicKey is not a P-256 public key (X9.63, raw or DER SubjectPublicKeyInfo)."
        ),
        (
            "tablet-7", #"{"key":"x"}"#,
            "The body must be {\"publicKey\": \"<base64 P-256 public key>\", \"deviceKey\": …, \"deviceProof\": …}."
        ),
    ])
    func badRegistrationsAreRefused(device: String, body: String, message: String) async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let alice = try await client.signIn("alice")
            let encoded = device.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? device
            let (status, response) = try await client.execute(
                uri: "/devices/\(encoded)/registration", method: .put,
                headers: [.authorization: "Bearer \(alice.access)", .contentType: "application/json"],
                body: ByteBuffer(string: body)
            ) { ($0.status, TestClient.Response.object($0.body)) }
            #expect(status == .badRequest)
            #expect((response["error"] as? [String: Any])?["message"] as? String == message)
        }
    }

    @Test(arguments: StorageBackend.allCases) func auditLogRecordsWhoWhenAndWhereButNoSecrets(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            _ = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "wrong-wrong-wrong"),
            ])
            let tokens = try await client.signIn("alice")
            _ = try await Self.register(client, device: "tablet-7", token: tokens.access, key: Self.publicKey())
        }
        let entries = try await server.server.audit.entries()
        #expect(Set(entries.map(\.action)).isSuperset(of: ["sign-in-failed", "sign-in", "device-registered"]))
        #expect(entries.allSatisfy { $0.address != nil })
        let text = entries.map { "\($0)" }.joined()
        #expect(!text.contains("correct-horse-battery"))
        #expect(!text.contains("wrong-wrong-wrong"))
    }

    @Test(arguments: StorageBackend.allCases) func unknownRoutesAndMethodsAnswerODataErrors(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.test { client in
            let (status, body, _) = try await client.get("/no/such/route", token: nil)
            #expect(status == .notFound)
            #expect((body["error"] as? [String: Any])?["code"] as? String == "NotFound")
            let (health, healthBody, _) = try await client.get("/health", token: nil)
            #expect(health == .ok)
            #expect(healthBody["status"] as? String == "ok")
        }
    }
}

extension HTTPField.Name {
    static let batonAppVersionForTests = HTTPField.Name("Baton-App-Version") ?? .accept
}
