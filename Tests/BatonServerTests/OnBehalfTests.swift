import BatonOData
import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

/// The shift handover on the server: Bob uploads the change Alice signed offline.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct OnBehalfTests {
    static let firstSent = "Sun, 06 Nov 1994 08:49:37 GMT"

    /// The headers and body of a change Alice recorded on `device` at `createdAt`, signed with `key`.
    static func signedChange(
        _ id: String, requestID: String, key: P256.Signing.PrivateKey, createdAt: String, device: String = "tablet-7",
        method: String = "POST", url: String = "PreflightChecks", body: String? = nil, author: String = "alice",
        ifMatch: String? = nil, firstSent: String
    ) throws -> (headers: [(String, String)], body: String) {
        let body = body ?? Fixtures.check(id, fuel: "6100.5")
        let message = [
            "baton-change-v2", requestID, method, url,
            SHA256.hash(data: Data(body.utf8)).map { String(format: "%02x", $0) }.joined(), createdAt, device, author,
            ifMatch ?? "",
        ].joined(separator: "\n")
        let signature = try key.signature(for: Data(message.utf8)).rawRepresentation.base64EncodedString()
        var headers = [
            ("Repeatability-Request-ID", requestID), ("Repeatability-First-Sent", firstSent),
            ("Baton-Author", author),
            ("Baton-Author-Signature", signature), ("Baton-Device", device), ("Baton-Created-At", createdAt),
        ]
        if let ifMatch { headers += [("Baton-If-Match", ifMatch), ("If-Match", ifMatch)] }
        return (headers, body)
    }

    /// Registers the token's user on `device` with `key`, approved by the device key.
    static func register(
        _ client: any TestClientProtocol, _ token: String, device: String = "tablet-7", key: P256.Signing.PrivateKey
    ) async throws -> HTTPResponse.Status {
        try await client.execute(
            uri: "/devices/\(device)/registration", method: .put,
            headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
            body: ByteBuffer(
                string: DeviceKeys.body(
                    device: device, token: token, publicKey: key.publicKey.x963Representation.base64EncodedString()))
        ) { $0.status }
    }

    /// A world where alice registered tablet-7 with `key`, and bob is signed in.
    static func handover(
        backend: StorageBackend = .sqlite, allowed: Bool = true,
        _ body:
            @Sendable (TestServer, any TestClientProtocol, String, P256.Signing.PrivateKey, String) async throws -> Void
    ) async throws {
        try await Fixtures.world(backend: backend) { server, client, alice, _ in
            try await server.addUser("bob")
            if !allowed {
                _ = try await server.server.settings.set(
                    "shared-devices.upload-pending-changes-of-previous-user", to: "false")
            }
            let key = P256.Signing.PrivateKey()
            #expect(try await Self.register(client, alice, key: key) == .ok)
            let bob = try await client.signIn("bob").access
            // Bob is a user of tablet-7 too: only its users upload its queue.
            #expect(try await Self.register(client, bob, key: P256.Signing.PrivateKey()) == .ok)
            try await body(server, client, bob, key, Self.now(server))
        }
    }

    static func now(_ server: TestServer, plus seconds: TimeInterval = 60) -> String {
        ODataDateTimeOffset(server.clock.current.withLock { $0 }.addingTimeInterval(seconds)).description
    }

    /// An hour passes and Alice registers tablet-7 again, with a new key.
    static func reRegisterAnHourLater(_ server: TestServer, _ client: any TestClientProtocol) async throws {
        server.clock.advance(by: 3600)
        let alice = try await client.signIn("alice").access
        #expect(try await Self.register(client, alice, key: P256.Signing.PrivateKey()) == .ok)
    }

    static func firstSent(_ server: TestServer) -> String {
        Repeatability.formatIMFFixdate(server.clock.current.withLock { $0 })
    }

    @Test(arguments: StorageBackend.allCases) func bobUploadsAlicesSignedChangeOnceAttributedToHer(
        backend: StorageBackend
    ) async throws {
        try await Self.handover(backend: backend) { server, client, bob, key, createdAt in
            let change = try Self.signedChange(
                Fixtures.id(1), requestID: "r-1", key: key, createdAt: createdAt, firstSent: Self.firstSent(server))
            let first = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(first.status == .created, "\(first.text)")
            #expect(first.json["CheckedBy"] as? String == "alice")
            #expect(first.json["UploadedBy"] as? String == "bob")
            #expect(first.headers[.repeatabilityResultForTests] == "accepted")
            // The network drops the answer; Bob's device retries. Same answer, nothing applied twice.
            let replay = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(replay.status == .created)
            #expect(replay.text == first.text)
            #expect(replay.headers[.repeatabilityResultForTests] == "accepted")
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: bob).text == "1")
            let audit = try await server.server.audit.entries()
            #expect(
                audit.contains {
                    $0.action == "entity-created" && $0.actor == "alice" && $0.detail == "uploaded by bob"
                })
            #expect(audit.filter { $0.action == "entity-created" && $0.actor == "alice" }.count == 1)
        }
    }

    @Test(arguments: StorageBackend.allCases) func sameRequestIDForADifferentRequestIsRejected(backend: StorageBackend)
        async throws
    {
        try await Self.handover(backend: backend) { server, client, bob, key, createdAt in
            let change = try Self.signedChange(
                Fixtures.id(1), requestID: "r-1", key: key, createdAt: createdAt, firstSent: Self.firstSent(server))
            _ = try await client.odata(.post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            let other = try Self.signedChange(
                Fixtures.id(2), requestID: "r-1", key: key, createdAt: createdAt, firstSent: Self.firstSent(server))
            let reply = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: other.headers, body: other.body)
            #expect(reply.status == .conflict)
            #expect(reply.headers[.repeatabilityResultForTests] == "rejected")
            #expect(
                reply.error
                    == "Repeatability-Request-ID 'r-1' was already used for a different request; use a new id for a new request."
            )
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: bob).text == "1")
        }
    }

    @Test(arguments: StorageBackend.allCases) func requestsFirstSentBeforeTheRetentionWindowAreRefused(
        backend: StorageBackend
    ) async throws {
        try await Self.handover(backend: backend) { server, client, bob, key, createdAt in
            let change = try Self.signedChange(
                Fixtures.id(1), requestID: "r-old", key: key, createdAt: createdAt, firstSent: Self.firstSent)
            let reply = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(reply.status == .preconditionFailed)
            #expect(reply.headers[.repeatabilityResultForTests] == "rejected")
        }
    }

    @Test(
        arguments: ["disallowed", "wrong key", "tampered body", "disabled author", "no signature", "key replaced"],
        StorageBackend.allCases) func refusedUploadsNameTheReasonAndApplyNothing(
            _ scenario: String, backend: StorageBackend
        ) async throws
    {
        try await Self.handover(backend: backend, allowed: scenario != "disallowed") {
            server, client, bob, key, createdAt in
            var signingKey = key
            if scenario == "wrong key" { signingKey = P256.Signing.PrivateKey() }
            var change = try Self.signedChange(
                Fixtures.id(1), requestID: "r-\(scenario.replacingOccurrences(of: " ", with: "-"))", key: signingKey,
                createdAt: createdAt, firstSent: Self.firstSent(server))
            var expected = ""
            switch scenario {
            case "disallowed":
                expected =
                    "This server does not accept changes uploaded on behalf of another user (setting shared-devices.upload-pending-changes-of-previous-user is false); 'alice' must upload them."
            case "wrong key", "tampered body":
                if scenario == "tampered body" {
                    change.body = change.body.replacingOccurrences(of: "6100.5", with: "9100.5")
                }
                expected =
                    "The signature does not verify with any key registered for 'alice' on device 'tablet-7' at \(createdAt)."
            case "disabled author":
                try await server.server.users.disable("alice")
                expected = "'alice' is disabled or unknown; changes signed by them are not accepted."
            case "no signature":
                change.headers.removeAll { $0.0 == "Baton-Author-Signature" }
                expected =
                    "A change uploaded on behalf of 'alice' needs Baton-Author-Signature, Baton-Device, Baton-Created-At and Repeatability-Request-ID."
            default:
                // Alice re-registered with a new key an hour before this change was created: her old key no longer counts.
                try await Self.reRegisterAnHourLater(server, client)
                server.clock.advance(by: 1800)
                let later = Self.now(server, plus: 0)
                change = try Self.signedChange(
                    Fixtures.id(1), requestID: "r-late", key: key, createdAt: later, firstSent: Self.firstSent(server))
                expected =
                    "The signature does not verify with any key registered for 'alice' on device 'tablet-7' at \(later)."
            }
            let bobToken = try await client.signIn("bob").access
            let reply = try await client.odata(
                .post, "PreflightChecks", token: bobToken, headers: change.headers, body: change.body)
            #expect(reply.status == .forbidden)
            #expect(reply.error == expected)
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: bobToken).text == "0")
        }
    }

    @Test(arguments: StorageBackend.allCases) func changesSignedBeforeAReRegistrationStillVerify(
        backend: StorageBackend
    ) async throws {
        try await Self.handover(backend: backend) { server, client, bob, key, createdAt in
            let change = try Self.signedChange(
                Fixtures.id(1), requestID: "r-early", key: key, createdAt: createdAt, firstSent: Self.firstSent(server))
            try await Self.reRegisterAnHourLater(server, client)
            #expect(try await server.server.devices.signingKeys(device: "tablet-7", user: "alice").count == 2)
            let fresh = try await client.signIn("bob").access
            let reply = try await client.odata(
                .post, "PreflightChecks", token: fresh, headers: change.headers, body: change.body)
            #expect(reply.status == .created, "\(reply.text)")
            #expect(reply.json["CheckedBy"] as? String == "alice")
            _ = bob
        }
    }

    @Test(arguments: StorageBackend.allCases) func onBehalfChangesInsideABatch(backend: StorageBackend) async throws {
        try await Self.handover(backend: backend) { server, client, bob, key, createdAt in
            let change = try Self.signedChange(
                Fixtures.id(1), requestID: "r-b", key: key, createdAt: createdAt, firstSent: Self.firstSent(server))
            let headers = JSONValue.object(change.headers.map { ($0.0, .string($0.1)) }).serialized
            let batch =
                #"{"requests":[{"id":"1","atomicityGroup":"g","method":"POST","url":"PreflightChecks","headers":\#(headers),"body":\#(change.body)}]}"#
            for _ in 0..<2 {
                let reply = try await client.odata(.post, "$batch", token: bob, body: batch)
                let response = (reply.json["responses"] as? [[String: Any]])?.first
                #expect(response?["status"] as? Int == 201)
                #expect((response?["body"] as? [String: Any])?["CheckedBy"] as? String == "alice")
            }
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: bob).text == "1")
        }
    }
}

extension HTTPField.Name {
    static let repeatabilityResultForTests = HTTPField.Name("Repeatability-Result") ?? .accept
}
