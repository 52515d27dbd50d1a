import BatonOData
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import PropertyBased
import Testing

@testable import BatonServer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

#if canImport(Glibc)
    import Glibc
#endif

/// The attacks of docs/SECURITY.md, each driven over HTTP by someone who holds an ordinary account (or a stolen
/// tablet's files, or a captured request) against a real server on 127.0.0.1. Each failed before the fix.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct SecurityTests {
    /// A server with alice and bob (ground staff) and sam (supervisor), served for real on loopback.
    static func live(
        backend: StorageBackend = .sqlite, configure: @escaping (inout BatonServerConfiguration) -> Void = { _ in },
        _ body: @Sendable (TestServer, any TestClientProtocol) async throws -> Void
    ) async throws {
        let server = try await TestServer(backend: backend, configure: configure)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.addUser("bob")
        try await server.addUser("mallory")
        try await server.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        try await server.server.application().test(.live) { client in try await body(server, client) }
    }

    // MARK: Hostile queries

    /// A query built from random choices: long flat chains, deep brackets, repeated `mod`, `not` runs, long
    /// `$search`, `$orderby` and `$expand` lists — from a few terms to thousands.
    static func hostileQuery(_ choices: [Int]) -> String {
        var source = choices.makeIterator()
        func next(_ range: Int) -> Int { (source.next() ?? 0) % max(range, 1) }
        let sizes = [1, 3, 40, 199, 201, 400, 1_500, 3_000]
        let count = sizes[next(sizes.count)]
        let terms = [
            "true", "FuelKg gt 5", "FuelKg add 1 gt 0", "FuelKg mod 2 eq 0", "not true", "(true)", "null eq null",
        ]
        let operators = [" or ", " and ", " add ", " mod "]
        switch next(5) {
        case 0:
            var parts: [String] = []
            for _ in 0..<count { parts.append(terms[next(terms.count)]) }
            let op = operators[next(2)]
            let open = String(repeating: "(", count: next(120))
            let close = String(repeating: ")", count: open.count)
            return "PreflightChecks?$filter=" + open + parts.joined(separator: op) + close
        case 1:
            let first = "FuelKg" + String(repeating: operators[2 + next(2)] + "2", count: count)
            return "PreflightChecks?$filter=" + first + " gt 0"
        case 2:
            let words = ["fuel", "NOT", "OR", "AND", "(", ")", "\"tyre\""]
            return "PreflightChecks?$search=" + (0..<count).map { _ in words[next(words.count)] }.joined(separator: " ")
        case 3:
            return "PreflightChecks?$orderby=" + Array(repeating: "FuelKg desc", count: count).joined(separator: ",")
        default:
            return "Aircraft?$expand="
                + Array(repeating: "Checks($filter=true or true)", count: min(count, 600))
                .joined(separator: ",")
        }
    }

    @Test func randomHostileQueriesNeverCrashOrAnswer500() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.addUser("alice")
        _ = try await server.server.seed(aircraft: 3, checks: 20)
        try await server.test { client in
            let token = try await client.signIn("alice").access
            await propertyCheck(count: 120, input: Gen.int(in: 0...9_999).array(of: 4...8_000)) { choices in
                let query = Self.hostileQuery(choices)
                let encoded = query.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? query
                do {
                    let reply = try await client.odata(
                        .get, encoded.replacingOccurrences(of: "+", with: "%2B"), token: token)
                    #expect(reply.status.code < 500, "\(query.prefix(120)): \(reply.text.prefix(200))")
                    let batch = #"{"requests":[{"id":"1","method":"GET","url":"\#(encoded)"}]}"#
                    let batched = try await client.odata(.post, "$batch", token: token, body: batch)
                    #expect(batched.status.code < 500)
                    #expect(!batched.text.contains(#""status":500"#), "\(query.prefix(120))")
                } catch {
                    Issue.record("\(query.prefix(120)): \(error)")
                }
            }
        }
    }

    @Test func aBatchStopsRunningReadsOnceItsAnswersPassTheBudget() async throws {
        let server = try await TestServer { $0.dataService.maximumBatchResponseSize = 64 * 1024 }
        defer { server.remove() }
        try await server.addUser("alice")
        _ = try await server.server.seed(aircraft: 5, checks: 300)
        try await server.test { client in
            let token = try await client.signIn("alice").access
            let requests = (1...10).map { #"{"id":"\#($0)","method":"GET","url":"Aircraft?$expand=Checks"}"# }
            let reply = try await client.odata(
                .post, "$batch", token: token, body: #"{"requests":[\#(requests.joined(separator: ","))]}"#)
            #expect(reply.status == .ok)
            let statuses = (reply.json["responses"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? Int }
            #expect(statuses.count == 10)
            #expect(statuses.first == 200)
            #expect(statuses.last == 413)
            #expect(reply.text.contains("BatchResponseTooLarge"))
            #expect(reply.text.contains("passed 64 KiB"))
            #expect(reply.text.utf8.count < 4 * 64 * 1024)
        }
    }

    @Test func aSingleReadThatExpandsTooMuchIsALimitErrorNotAHugeAnswer() async throws {
        let server = try await TestServer { $0.dataService.maximumExpandedEntities = 100 }
        defer { server.remove() }
        try await server.addUser("alice")
        _ = try await server.server.seed(aircraft: 4, checks: 300)
        try await server.test { client in
            let token = try await client.signIn("alice").access
            // Each aircraft brings back its checks and each check its aircraft again: it grows with the data.
            for url in [
                "Aircraft?$expand=Checks", "Aircraft?$expand=Checks($expand=Aircraft($expand=Checks))",
                "PreflightChecks?$expand=Aircraft($expand=Checks)",
            ] {
                let reply = try await client.odata(.get, url, token: token)
                #expect(reply.status == .badRequest, "\(url)")
                #expect((reply.json["error"] as? [String: Any])?["code"] as? String == "LimitExceeded", "\(url)")
                #expect(reply.text.contains("expands more than 100 entities"), "\(url)")
            }
            // Within the limit, and narrowed inside $expand, the same reads answer.
            let narrowed = try await client.odata(.get, "Aircraft?$expand=Checks($top=20)", token: token)
            #expect(narrowed.status == .ok)
            let values = narrowed.json["value"] as? [[String: Any]] ?? []
            #expect(values.count == 4)
            #expect(values.allSatisfy { ($0["Checks"] as? [Any])?.count == 20 })
        }
    }

    // MARK: A stolen tablet plus any account

    @Test func anAccountThatWasNeverOnTheTabletGetsNeitherARegistrationNorItsStoreKey() async throws {
        try await Self.live { _, client in
            let alice = try await client.signIn("alice").access
            #expect(try await OnBehalfTests.register(client, alice, key: P256.Signing.PrivateKey()) == .ok)
            // The thief knows the device id (it is in a plain file on the tablet) and has mallory's password,
            // but no passcode of the tablet's users, so no device key.
            let mallory = try await client.signIn("mallory").access
            let key = P256.Signing.PrivateKey().publicKey.x963Representation.base64EncodedString()
            for body in [
                #"{"publicKey":"\#(key)"}"#,
                // A device key of their own, claiming the device anew.
                DeviceKeys.body(device: "tablet-7", token: mallory, publicKey: key, approver: .init()),
            ] {
                let (status, reply) = try await client.execute(
                    uri: "/devices/tablet-7/registration", method: .put,
                    headers: [.authorization: "Bearer \(mallory)", .contentType: "application/json"],
                    body: ByteBuffer(string: body)
                ) { ($0.status, TestClient.Response.object($0.body)) }
                #expect(status == .forbidden)
                #expect(
                    (reply["error"] as? [String: Any])?["message"] as? String
                        == "Registering on device 'tablet-7' needs the approval of one of its users (a proof signed with the device key)."
                )
            }
            #expect(try await client.get("/devices/tablet-7/store-key", token: mallory).0 == .forbidden)
            // With a user's approval (the device key from an unlocked secure store), bob joins.
            let bob = try await client.signIn("bob").access
            #expect(try await OnBehalfTests.register(client, bob, key: P256.Signing.PrivateKey()) == .ok)
            #expect(try await client.get("/devices/tablet-7/store-key", token: bob).0 == .ok)
        }
    }

    @Test func aDeviceAllItsUsersLeftGetsANewStoreKeyWithANewDeviceKey() async throws {
        try await Self.live { _, client in
            let alice = try await client.signIn("alice").access
            #expect(try await OnBehalfTests.register(client, alice, key: P256.Signing.PrivateKey()) == .ok)
            let (_, old, _) = try await client.get("/devices/tablet-7/store-key", token: alice)
            let left = try await client.execute(
                uri: "/devices/tablet-7/registration", method: .delete, headers: [.authorization: "Bearer \(alice)"]
            ) { $0.status }
            #expect(left == .noContent)
            let mallory = try await client.signIn("mallory").access
            let key = P256.Signing.PrivateKey().publicKey.x963Representation.base64EncodedString()
            let fresh = DeviceKeys.body(device: "tablet-7", token: mallory, publicKey: key, approver: .init())
            let status = try await client.execute(
                uri: "/devices/tablet-7/registration", method: .put,
                headers: [.authorization: "Bearer \(mallory)", .contentType: "application/json"],
                body: ByteBuffer(string: fresh)
            ) { $0.status }
            #expect(status == .ok)
            let (_, new, _) = try await client.get("/devices/tablet-7/store-key", token: mallory)
            #expect(new["key"] as? String != nil)
            #expect(new["key"] as? String != old["key"] as? String)
        }
    }

    // MARK: Signed changes

    /// alice's key on tablet-7, bob registered there too; `body` gets bob's token and alice's key.
    static func handover(
        configure: @escaping (inout BatonServerConfiguration) -> Void = { _ in },
        _ body: @Sendable (TestServer, any TestClientProtocol, String, P256.Signing.PrivateKey) async throws -> Void
    ) async throws {
        try await live(configure: configure) { server, client in
            let alice = try await client.signIn("alice").access
            let sam = try await client.signIn("sam").access
            #expect(try await client.odata(.post, "Aircraft", token: sam, body: Fixtures.aircraft).status == .created)
            let key = P256.Signing.PrivateKey()
            #expect(try await OnBehalfTests.register(client, alice, key: key) == .ok)
            let bob = try await client.signIn("bob").access
            #expect(try await OnBehalfTests.register(client, bob, key: P256.Signing.PrivateKey()) == .ok)
            try await body(server, client, bob, key)
        }
    }

    @Test func aGroundStaffAuthorsChangeToAircraftIsRefusedWhenASupervisorUploadsIt() async throws {
        try await Self.handover { server, client, _, key in
            let sam = try await client.signIn("sam").access
            #expect(try await OnBehalfTests.register(client, sam, key: P256.Signing.PrivateKey()) == .ok)
            let change = try OnBehalfTests.signedChange(
                "", requestID: "r-aircraft", key: key, createdAt: OnBehalfTests.now(server), method: "PATCH",
                url: "Aircraft('D-AIBL')", body: #"{"Status":"grounded"}"#, ifMatch: "*",
                firstSent: OnBehalfTests.firstSent(server))
            let reply = try await client.odata(
                .patch, "Aircraft('D-AIBL')", token: sam, headers: change.headers, body: change.body)
            #expect(reply.status == .forbidden)
            #expect(reply.error == "Only supervisors and admins change Aircraft ('alice' is ground staff).")
            let aircraft = try await client.odata(.get, "Aircraft('D-AIBL')", token: sam)
            #expect(aircraft.json["Status"] as? String == "ready")
        }
    }

    @Test func aGroundStaffAuthorsChangeToAnothersFinalCheckIsRefusedWhenASupervisorUploadsIt() async throws {
        try await Self.handover { server, client, _, key in
            let sam = try await client.signIn("sam").access
            #expect(try await OnBehalfTests.register(client, sam, key: P256.Signing.PrivateKey()) == .ok)
            // A final check sam recorded himself.
            let id = Fixtures.id(7)
            #expect(
                try await client.odata(.post, "PreflightChecks", token: sam, body: Fixtures.check(id)).status
                    == .created)
            // alice (ground staff) signs a correction of it offline; sam's sync uploads it on her behalf.
            let change = try OnBehalfTests.signedChange(
                "", requestID: "r-not-hers", key: key, createdAt: OnBehalfTests.now(server), method: "PATCH",
                url: "PreflightChecks(\(id))", body: #"{"FuelKg":1}"#, ifMatch: "*",
                firstSent: OnBehalfTests.firstSent(server))
            let reply = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: sam, headers: change.headers, body: change.body)
            #expect(reply.status == .forbidden)
            #expect((reply.json["error"] as? [String: Any])?["code"] as? String == "NotTheAuthor")
            let check = try await client.odata(.get, "PreflightChecks(\(id))", token: sam)
            #expect((check.json["FuelKg"] as? NSNumber)?.doubleValue == 5200.5)
            #expect(check.json["CheckedBy"] as? String == "sam")
        }
    }

    @Test func onlyAUserOfTheDeviceUploadsItsChangesOnAnothersBehalf() async throws {
        try await Self.handover { server, client, _, key in
            // mallory holds an account but was never a user of tablet-7; she got alice's signed request somehow.
            let mallory = try await client.signIn("mallory").access
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(8), requestID: "r-stolen", key: key, createdAt: OnBehalfTests.now(server),
                firstSent: OnBehalfTests.firstSent(server))
            let reply = try await client.odata(
                .post, "PreflightChecks", token: mallory, headers: change.headers, body: change.body)
            #expect(reply.status == .forbidden)
            #expect((reply.json["error"] as? [String: Any])?["code"] as? String == "UploaderNotOnDevice")
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: mallory).text == "0")
            // Nor does mallory's attempt spend alice's request id: the genuine upload by a user of the device works.
            let bob = try await client.signIn("bob").access
            let genuine = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(genuine.status == .created, "\(genuine.text)")
            #expect(genuine.json["CheckedBy"] as? String == "alice")
        }
    }

    @Test func aSignedChangeRefusedWith412IsNotAppliedWhenResentWithIfMatchStar() async throws {
        try await Self.handover { server, client, bob, key in
            let alice = try await client.signIn("alice").access
            let id = Fixtures.id(1)
            let created = try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(id))
            let seen = try #require(created.etag)
            // Someone changes the check after alice read it.
            let now = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: alice, headers: [("If-Match", seen)],
                body: #"{"Remarks":"moved"}"#)
            #expect(now.status == .noContent)
            let change = try OnBehalfTests.signedChange(
                id, requestID: "r-stale", key: key, createdAt: OnBehalfTests.now(server), method: "PATCH",
                url: "PreflightChecks(\(id))", body: #"{"FuelKg":1}"#, ifMatch: seen,
                firstSent: OnBehalfTests.firstSent(server))
            let stale = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: bob, headers: change.headers, body: change.body)
            #expect(stale.status == .preconditionFailed)
            let forced = change.headers.map { $0.0 == "If-Match" ? ("If-Match", "*") : $0 }
            let reply = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: bob, headers: forced, body: change.body)
            #expect(reply.status == .forbidden)
            #expect(reply.json["error"].flatMap { ($0 as? [String: Any])?["code"] as? String } == "IfMatchNotSigned")
            let read = try await client.odata(.get, "PreflightChecks(\(id))", token: bob)
            #expect(read.json["FuelKg"] as? Double == 5200.5)
        }
    }

    @Test func aQueuedChangeMayBuildOnAVersionItsOwnDeviceMadeButNoOther() async throws {
        try await Self.handover { server, client, bob, key in
            let id = Fixtures.id(1)
            let draft = Fixtures.check(id).replacingOccurrences(of: #""final""#, with: #""draft""#)
            let created = try await client.odata(.post, "PreflightChecks", token: bob, body: draft)
            let seen = try #require(created.etag)
            // On tablet-7, bob's change was queued first; alice's, signed against the version both saw, after it.
            let first = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: bob,
                headers: [
                    ("If-Match", seen), ("Baton-Device", "tablet-7"), ("Repeatability-Request-ID", "r-bob"),
                    ("Repeatability-First-Sent", OnBehalfTests.firstSent(server)),
                ], body: #"{"Remarks":"bob"}"#)
            let made = try #require(first.etag)
            func alices(_ requestID: String, sending ifMatch: String) async throws -> ODataReply {
                let change = try OnBehalfTests.signedChange(
                    id, requestID: requestID, key: key, createdAt: OnBehalfTests.now(server), method: "PATCH",
                    url: "PreflightChecks(\(id))", body: #"{"OilQuarts":14}"#, ifMatch: seen,
                    firstSent: OnBehalfTests.firstSent(server))
                let moved = change.headers.map { $0.0 == "If-Match" ? ("If-Match", ifMatch) : $0 }
                return try await client.odata(
                    .patch, "PreflightChecks(\(id))", token: bob, headers: moved, body: change.body)
            }
            // Moved onto the version tablet-7 made: applied.
            #expect(try await alices("r-moved", sending: made).status == .noContent)
            // Moved onto a version made elsewhere (no device named): refused.
            let current = try #require(try await client.odata(.get, "PreflightChecks(\(id))", token: bob).etag)
            let elsewhere = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: bob, headers: [("If-Match", current)],
                body: #"{"Remarks":"from another tablet"}"#)
            let other = try #require(elsewhere.etag)
            #expect(try await alices("r-elsewhere", sending: other).status == .forbidden)
        }
    }

    @Test func aSignedChangeReplayedAfterTheRetentionWindowIsNotAppliedAgain() async throws {
        try await Self.handover { server, client, bob, key in
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-once", key: key, createdAt: OnBehalfTests.now(server),
                firstSent: OnBehalfTests.firstSent(server))
            let first = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(first.status == .created)
            let sam = try await client.signIn("sam").access
            let deleted = try await client.odata(
                .delete, "PreflightChecks(\(Fixtures.id(1)))", token: sam, headers: [("If-Match", "*")])
            #expect(deleted.status == .noContent)
            // Eight days later — other changes have come and gone since — the same signed request comes back with
            // a fresh first-sent time.
            server.clock.advance(by: 8 * 86_400)
            let fresh = try await client.signIn("bob").access
            let later = try OnBehalfTests.signedChange(
                Fixtures.id(2), requestID: "r-later", key: key, createdAt: OnBehalfTests.now(server),
                firstSent: OnBehalfTests.firstSent(server))
            #expect(
                try await client.odata(.post, "PreflightChecks", token: fresh, headers: later.headers, body: later.body)
                    .status == .created)
            let replayed = change.headers.map {
                $0.0 == "Repeatability-First-Sent" ? ($0.0, OnBehalfTests.firstSent(server)) : $0
            }
            let reply = try await client.odata(
                .post, "PreflightChecks", token: fresh, headers: replayed, body: change.body)
            #expect(reply.status == .noContent)
            #expect(reply.headers[.repeatabilityResultForTests] == "accepted")
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: fresh).text == "1")
        }
    }

    @Test func aChangeSignedInTheFutureIsRefused() async throws {
        try await Self.handover { server, client, bob, key in
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-future", key: key, createdAt: OnBehalfTests.now(server, plus: 86_400),
                firstSent: OnBehalfTests.firstSent(server))
            let reply = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(reply.status == .forbidden)
            #expect(reply.json["error"].flatMap { ($0 as? [String: Any])?["code"] as? String } == "SignedTimeInFuture")
        }
    }

    @Test func requestIDsAreScopedSoNobodyReadsOrPreemptsAnothersResult() async throws {
        try await Self.handover { server, client, bob, key in
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-shared", key: key, createdAt: OnBehalfTests.now(server),
                firstSent: OnBehalfTests.firstSent(server))
            // Mallory learns the request id and sends her own request under it first.
            let mallory = try await client.signIn("mallory").access
            let preempt = try await client.odata(
                .post, "PreflightChecks", token: mallory,
                headers: [
                    ("Repeatability-Request-ID", "r-shared"),
                    ("Repeatability-First-Sent", OnBehalfTests.firstSent(server)),
                ], body: Fixtures.check(Fixtures.id(2)))
            #expect(preempt.status == .created)
            let genuine = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(genuine.status == .created, "\(genuine.text)")
            #expect(genuine.json["CheckedBy"] as? String == "alice")
            // Replaying alice's exact request unsigned, mallory gets no stored answer of alice's: it is hers.
            let unsigned = change.headers.filter { !$0.0.hasPrefix("Baton-") }
            let read = try await client.odata(
                .post, "PreflightChecks", token: mallory, headers: unsigned, body: change.body)
            #expect(read.status == .conflict)
            #expect(read.json["CheckedBy"] == nil)
        }
    }

    // MARK: Signing keys

    @Test func aKeyRetiredAtUnregistrationSignsNothingNew() async throws {
        try await Self.handover { server, client, bob, key in
            let alice = try await client.signIn("alice").access
            let left = try await client.execute(
                uri: "/devices/tablet-7/registration", method: .delete, headers: [.authorization: "Bearer \(alice)"]
            ) { $0.status }
            #expect(left == .noContent)
            server.clock.advance(by: 60)
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-after", key: key, createdAt: OnBehalfTests.now(server, plus: 0),
                firstSent: OnBehalfTests.firstSent(server))
            let fresh = try await client.signIn("bob").access
            let reply = try await client.odata(
                .post, "PreflightChecks", token: fresh, headers: change.headers, body: change.body)
            #expect(reply.status == .forbidden)
            _ = bob
        }
    }

    @Test func nobodyTakesOverAnotherUsersPublicKey() async throws {
        try await Self.handover { server, client, bob, key in
            let mallory = try await client.signIn("mallory").access
            #expect(try await OnBehalfTests.register(client, mallory, device: "tablet-9", key: key) == .conflict)
            #expect(try await OnBehalfTests.register(client, mallory, key: key) == .conflict)
            // alice's genuine pending change still verifies.
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-mine", key: key, createdAt: OnBehalfTests.now(server),
                firstSent: OnBehalfTests.firstSent(server))
            let reply = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(reply.status == .created)
        }
    }

    @Test func aRecreatedUserNameInheritsNoKeys() async throws {
        try await Self.handover { server, client, _, key in
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-old-alice", key: key, createdAt: OnBehalfTests.now(server),
                firstSent: OnBehalfTests.firstSent(server))
            try await server.server.users.delete("alice")
            server.clock.advance(by: 60)
            try await server.addUser("alice")
            let bob = try await client.signIn("bob").access
            let reply = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(reply.status == .forbidden)
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: bob).text == "0")
        }
    }

    // MARK: Ownership and scopes

    @Test func aFinalCheckIsChangedOnlyByItsAuthorOrASupervisor() async throws {
        try await Self.live { server, client in
            let alice = try await client.signIn("alice").access
            let bob = try await client.signIn("bob").access
            let sam = try await client.signIn("sam").access
            #expect(try await client.odata(.post, "Aircraft", token: sam, body: Fixtures.aircraft).status == .created)
            let id = Fixtures.id(1)
            let created = try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(id))
            let etag = try #require(created.etag)
            for method in [HTTPRequest.Method.patch, .delete] {
                let reply = try await client.odata(
                    method, "PreflightChecks(\(id))", token: bob, headers: [("If-Match", etag)],
                    body: method == .patch ? #"{"FuelKg":1}"# : nil)
                #expect(reply.status == .forbidden)
                #expect(
                    reply.error
                        == "PreflightChecks(\(id)) is final and was recorded by someone else; only its author or a supervisor changes it."
                )
            }
            let own = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: alice, headers: [("If-Match", etag)],
                body: #"{"Remarks":"mine"}"#)
            #expect(own.status == .noContent)
            let supervised = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: sam, headers: [("If-Match", "*")],
                body: #"{"Remarks":"checked"}"#)
            #expect(supervised.status == .noContent)
            _ = server
        }
    }

    @Test func aTokenWithoutTheODataScopeReadsNoData() async throws {
        try await Self.live { _, client in
            let (status, body) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "correct-horse-battery"), ("scope", "settings"),
            ])
            #expect(status == .ok)
            let token = try #require(body["access_token"] as? String)
            let (data, _, headers) = try await client.get("/odata/PreflightChecks", token: token)
            #expect(data == .forbidden)
            #expect(headers[.wwwAuthenticate]?.contains("insufficient_scope") == true)
            #expect(try await client.get("/settings", token: token).0 == .ok)
            #expect(try await client.get("/devices/tablet-7/store-key", token: token).0 == .forbidden)
        }
    }

    // MARK: Tokens

    @Test func accessTokensStopWithTheirRevokedFamily() async throws {
        try await Self.live { _, client in
            let first = try await client.signIn("alice")
            let refresh = [
                ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", first.refresh),
            ]
            let (rotated, body) = try await client.token(refresh)
            #expect(rotated == .ok)
            let access = try #require(body["access_token"] as? String)
            #expect(try await client.get("/me", token: access).0 == .ok)
            // The old refresh token is presented again: theft. The whole sign-in ends, access tokens included.
            #expect(try await client.token(refresh).0 == .badRequest)
            #expect(try await client.get("/me", token: access).0 == .unauthorized)
            #expect(try await client.get("/me", token: first.access).0 == .unauthorized)
        }
    }

    /// The token with its signature's `s` replaced by `n - s`: the same signature, encoded the other way.
    static func highS(_ token: String) throws -> String {
        let parts = token.split(separator: ".").map(String.init)
        var signature = Array(try #require(Data(base64URLEncoded: parts[2])))
        let order: [UInt8] = [
            0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
        ]
        var borrow = 0
        for index in stride(from: 31, through: 0, by: -1) {
            var value = Int(order[index]) - Int(signature[32 + index]) - borrow
            borrow = value < 0 ? 1 : 0
            if value < 0 { value += 256 }
            signature[32 + index] = UInt8(value)
        }
        return "\(parts[0]).\(parts[1]).\(Data(signature).base64URLEncoded)"
    }

    @Test func tokensWithAHighSSignatureOrAnUnknownKeyIDAreRefused() async throws {
        try await Self.live { _, client in
            let token = try await client.signIn("alice").access
            #expect(try await client.get("/me", token: token).0 == .ok)
            let parts = token.split(separator: ".").map(String.init)
            #expect(try await client.get("/me", token: try Self.highS(token)).0 == .unauthorized)
            let headerData = try #require(Data(base64URLEncoded: parts[0]))
            var header = try #require(try JSONSerialization.jsonObject(with: headerData) as? [String: Any])
            header["kid"] = "someone-elses-key"
            let renamed = try JSONSerialization.data(withJSONObject: header).base64URLEncoded
            #expect(try await client.get("/me", token: "\(renamed).\(parts[1]).\(parts[2])").0 == .unauthorized)
        }
    }

    // MARK: One account holder's changes

    /// One account holder cannot fill the writers' queue: each user has at most
    /// `maximumConcurrentChangesPerUser` requests that change data running on an instance, and one more answers
    /// 429 with `Retry-After` at once, changing nothing. Only one writer of entities runs at a time (across all
    /// instances on PostgreSQL); without the limit, a few hundred concurrent batches of one user made everyone's
    /// changes wait past the lock timeout. Other users' changes and the user's reads go on; the slot is given back
    /// when the change ends.
    @Test(arguments: StorageBackend.allCases) func oneUserCannotQueueMoreChangesThanTheLimit(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend) { $0.dataService.maximumConcurrentChangesPerUser = 1 }
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        // A client with a pool of connections: the requests below run at the same time.
        try await server.server.application().test(.ahc(.http)) { client in
            let alice = try await client.signIn("alice").access
            let sam = try await client.signIn("sam").access
            #expect(try await client.odata(.post, "Aircraft", token: sam, body: Fixtures.aircraft).status == .created)
            let data = server.server.data
            // The test holds the writers back until it lets go: on SQLite the one writer; on PostgreSQL, where writers
            // of entities do not wait for one another, the tables they write.
            let gate = Gate()
            defer { gate.open() }
            let holder = Task {
                switch backend {
                case .sqlite: try await data.store.write { _ in gate.hold() }
                case .postgres:
                    try await data.store.storage.write { db in
                        try await db.execute(#"LOCK TABLE "PreflightChecks", "Aircraft" IN EXCLUSIVE MODE"#)
                        try await gate.hold(pausing: { try await db.execute("SELECT pg_sleep(0.02)") })
                    }
                }
            }
            try await gate.entered()
            // sam's first change waits for the writers, holding his one slot.
            let first = Task {
                try await client.odata(.post, "PreflightChecks", token: sam, body: Fixtures.check(Fixtures.id(1)))
            }
            try await eventually { data.changes.inFlight("sam") == 1 }
            let refused = try await client.odata(
                .post, "PreflightChecks", token: sam, body: Fixtures.check(Fixtures.id(2)))
            let batch = try await client.odata(
                .post, "$batch", token: sam,
                body:
                    #"{"requests":[{"id":"1","method":"DELETE","url":"Aircraft('D-AIBL')","headers":{"If-Match":"*"}}]}"#
            )
            let reads = try await client.odata(
                .post, "$batch", token: sam, body: #"{"requests":[{"id":"1","method":"GET","url":"Aircraft"}]}"#)
            #expect(data.changes.refused == 2)
            for reply in [refused, batch] {
                #expect(reply.status == .tooManyRequests, "\(reply.text)")
                #expect(reply.headers[.retryAfter] == "1")
                #expect((reply.json["error"] as? [String: Any])?["code"] as? String == "TooManyRequests")
            }
            #expect(reads.status == .ok, "\(reads.text)")
            // Another user's change is not refused; it waits like any.
            let other = Task {
                try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(3)))
            }
            try await eventually { data.changes.inFlight("alice") == 1 }
            gate.open()
            let answered = try await other.value
            #expect(answered.status == .created, "\(answered.text)")
            #expect(try await first.value.status == .created)
            try await holder.value
            #expect(data.changes.inFlight("sam") == 0 && data.changes.refused == 2)
            // Nothing of the refused requests was applied, and the slot is free again.
            #expect(try await client.odata(.get, "PreflightChecks(\(Fixtures.id(2)))", token: sam).status == .notFound)
            #expect(try await client.odata(.get, "Aircraft('D-AIBL')", token: sam).status == .ok)
            let again = try await client.odata(
                .post, "PreflightChecks", token: sam, body: Fixtures.check(Fixtures.id(2)))
            #expect(again.status == .created, "\(again.text)")
        }
    }

    /// One user's reads hold at most a quarter of the instance's database connections: one more answers 429 with
    /// `Retry-After: 1` at once, alone or as a `$batch` of reads; the model's documents, the user's changes and
    /// other users' reads go on. (Without the bound, forty slow reads of one user took every PostgreSQL
    /// connection and others' reads answered 503.)
    @Test(arguments: StorageBackend.allCases) func oneUserCannotHoldMoreThanAQuarterOfTheConnectionsWithReads(
        backend: StorageBackend
    ) async throws {
        #expect(DataService.readsPerUser(databaseConnections: 16) == 4)
        #expect(DataService.readsPerUser(databaseConnections: 3) == 1)
        try await Self.live(backend: backend, configure: { $0.databaseConnections = 8 }) { server, client in
            let data = server.server.data
            #expect(data.reads.limit == 2)
            let alice = try await client.signIn("alice").access
            let bob = try await client.signIn("bob").access
            // alice's two slow reads, running.
            let running = (0..<2).map { _ in
                Task { try await data.reads.run(for: "alice") { try await Task.sleep(for: .seconds(60)) } }
            }
            defer { for task in running { task.cancel() } }
            try await eventually { data.reads.inFlight("alice") == 2 }
            let refused = try await client.odata(.get, "PreflightChecks", token: alice)
            let batch = try await client.odata(
                .post, "$batch", token: alice, body: #"{"requests":[{"id":"1","method":"GET","url":"Aircraft"}]}"#)
            for reply in [refused, batch] {
                #expect(reply.status == .tooManyRequests, "\(reply.text)")
                #expect(reply.headers[.retryAfter] == "1")
                #expect((reply.json["error"] as? [String: Any])?["code"] as? String == "TooManyRequests")
            }
            #expect(data.reads.refused == 2)
            #expect(try await client.odata(.get, "$metadata", token: alice).status == .ok)
            #expect(try await client.odata(.get, "PreflightChecks", token: bob).status == .ok)
            let change = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(1), tail: "D-NONE"))
            #expect(change.status != .tooManyRequests, "\(change.text)")
            for task in running { task.cancel() }
            try await eventually { data.reads.inFlight("alice") == 0 }
            #expect(try await client.odata(.get, "PreflightChecks", token: alice).status == .ok)
        }
    }

    /// On PostgreSQL, one user's reads that really wait (here for a table lock) hold only their share of the pool:
    /// the next one is refused at once, and another user's read is answered meanwhile.
    @Test func slowReadsOfOneUserLeaveTheOthersTheirConnections() async throws {
        try await Self.live(backend: .postgres, configure: { $0.databaseConnections = 8 }) { server, client in
            let data = server.server.data
            let alice = try await client.signIn("alice").access
            let bob = try await client.signIn("bob").access
            let gate = Gate()
            defer { gate.open() }
            let holder = Task {
                try await data.store.write { db in
                    try await db.execute(#"LOCK TABLE "PreflightChecks" IN ACCESS EXCLUSIVE MODE"#)
                    gate.hold()
                }
            }
            try await gate.entered()
            // Each on a connection of its own (the test client's one connection answers in turn).
            let port = try #require(client.port)
            let slow = (0..<2).map { n in
                Task {
                    var request = URLRequest(
                        url: try #require(
                            URL(string: "http://127.0.0.1:\(port)/odata/PreflightChecks?$filter=FuelKg%20gt%20\(n)")))
                    request.setValue("Bearer \(alice)", forHTTPHeaderField: "Authorization")
                    request.timeoutInterval = 60
                    let (_, response) = try await URLSession.shared.data(for: request)
                    return (response as? HTTPURLResponse)?.statusCode ?? 0
                }
            }
            try await eventually { data.reads.inFlight("alice") == 2 }
            let third = try await client.odata(.get, "PreflightChecks", token: alice)
            #expect(third.status == .tooManyRequests, "\(third.text)")
            #expect(try await client.odata(.get, "Aircraft", token: bob).status == .ok)
            gate.open()
            try await holder.value
            for task in slow { #expect(try await task.value == 200) }
        }
    }

    /// A user's slot is given back however the change ends: answered, thrown, or cancelled while it waits.
    @Test func aChangesSlotIsGivenBackHoweverItEnds() async throws {
        let slots = UserSlots(limit: 1, for: "requests that change data")
        struct Failed: Error {}
        await #expect(throws: Failed.self) { try await slots.run(for: "sam") { throw Failed() } }
        #expect(slots.inFlight("sam") == 0)
        let waiting = Task {
            try await slots.run(for: "sam") { try await Task.sleep(for: .seconds(60)) }
        }
        try await eventually { slots.inFlight("sam") == 1 }
        // A request that takes no slot runs; another user has slots of their own.
        #expect(try await slots.run(for: "sam", taking: false) { 1 } == 1)
        #expect(try await slots.run(for: "alice") { 2 } == 2)
        let refusal = await #expect(throws: ServerError.self) { try await slots.run(for: "sam") { 3 } }
        #expect(refusal?.status == .tooManyRequests)
        #expect(refusal?.headers.contains { $0.0 == .retryAfter && $0.1 == "1" } == true)
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(slots.inFlight("sam") == 0 && slots.refused == 1)
        #expect(try await slots.run(for: "sam") { 4 } == 4)
    }

    // MARK: Sign-in throttling

    /// `X-Forwarded-For` is split and trimmed by byte. Fails before: a mark that joins what follows it (U+0600) at
    /// the end of the client's part glued the proxy's `,` to it, the list read as one malformed entry, and the
    /// request counted as the proxy's own (nil), throttled and audited under the proxy's address.
    @Test func aForwardedListIsSplitByByte() {
        let trusted: Set = ["10.0.0.2"]
        let cases: [(String, String?)] = [
            ("1.2.3.4\u{0600}, 203.0.113.7", "203.0.113.7"), ("1.2.3.4\u{301},203.0.113.7, 10.0.0.2", "203.0.113.7"),
            ("203.0.113.7", "203.0.113.7"), (" 2001:DB8::1 ,\t10.0.0.2", "2001:DB8::1"), ("203.0.113.7\u{0600}", nil),
            ("203.0.113.7\r\nX-Injected: 1", nil), ("<b>", nil), ("", nil), ("10.0.0.2", nil), ("a,,", nil),
        ]
        for (header, client) in cases {
            #expect(ForwardedAddressMiddleware.client(in: header, trusted: trusted) == client, "\(Array(header.utf8))")
        }
    }

    /// Bounds on stored text count Unicode scalars, not only characters (a character may carry any number of
    /// combining marks). Fails before: a display name of one character and 300 marks was valid, and a redirect URI
    /// with a Kelvin sign was taken for the registered one with a `K`.
    @Test func boundsAndComparisonsOfStoredTextGoByScalarOrByte() throws {
        let heavy = "a" + String(repeating: "\u{301}", count: 300)
        // The premise, Swift's own: 301 scalars are one `Character`.
        try #require(heavy.count == 1)
        #expect(!User.isValidDisplayName(heavy))
        #expect(User.isValidDisplayName("a" + String(repeating: "\u{301}", count: 100)))
        #expect(User.isValidDisplayName(String(repeating: "x", count: 64)))
        #expect(!User.isValidDisplayName(String(repeating: "x", count: 65)))
        #expect(
            ("2" + String(repeating: "\u{301}", count: 10_000)).prefix(scalars: 32).unicodeScalars.count == 32
        )
        #expect("2.4.1".prefix(scalars: 32) == "2.4.1")
        let client = OAuthClient(id: "app", grants: ["authorization_code"], redirectURIs: ["https://app.example/OK"])
        #expect(client.accepts(redirectURI: "https://app.example/OK", issuer: "https://baton.example"))
        // The premise, Swift's own: `==` takes the Kelvin sign for a `K`.
        try #require("https://app.example/O\u{212A}" == "https://app.example/OK")
        #expect(!client.accepts(redirectURI: "https://app.example/O\u{212A}", issuer: "https://baton.example"))
    }

    /// The server's own errors are bounded where they are made, as ``ODataError``s are: a message past 1,024 scalars and
    /// a target past 128 keep their first and end in `…`, whatever the site quoted.
    @Test func aServerErrorIsBoundedAtItsCreation() {
        let marks = String(repeating: "\u{301}", count: 10_000)
        let error = ServerError.badRequest("No device 'd\(marks)'.", target: "d" + marks)
        #expect(error.message.unicodeScalars.count == ODataError.maximumMessageScalars + 1)
        #expect(error.message.unicodeScalars.starts(with: "No device 'd".unicodeScalars))
        #expect(error.target?.unicodeScalars.count == ODataError.maximumTargetScalars + 1)
        #expect(ServerError.badRequest("No device 'd\u{301}'.").message == "No device 'd\u{301}'.")
    }

    /// An error names text from outside by its first scalars. Fails before: cut to 64 characters, a claimed author of
    /// one character and 10,000 combining marks came back whole in the refusal's message.
    @Test func anErrorNamesOutsideTextByItsFirstScalars() async throws {
        try await Self.live { server, client in
            let mallory = try await client.signIn("mallory").access
            let heavy = "a" + String(repeating: "\u{301}", count: 10_000)
            let reply = try await client.odata(
                .patch, "Aircraft('NOPE')", token: mallory, headers: [("Baton-Author", heavy)],
                body: #"{"Status":"grounded"}"#)
            #expect(reply.status == .forbidden)
            let message = try #require(reply.error)
            #expect(message.unicodeScalars.count < 400, "\(message.unicodeScalars.count) scalars")
            // The name's first 64 scalars: the letter and 63 of its marks.
            #expect(message.unicodeScalars.filter { $0 == "\u{301}" }.count == 63)
            // So does an error naming a user or a device the server was handed: a name an administrator typed, a
            // device a route or a command named.
            func refusal(_ body: () async throws -> Void) async -> String? {
                do {
                    try await body()
                    return nil
                } catch let error as ServerError {
                    return error.message
                } catch {
                    Issue.record("Not the server's refusal: \(error)")
                    return nil
                }
            }
            let named = [
                await refusal {
                    try await server.server.users.add(
                        name: heavy, displayName: nil, role: .groundStaff, password: "correct-horse-battery-1")
                },
                await refusal { _ = try await server.server.devices.revoke(device: heavy) },
            ]
            for message in named {
                let message = try #require(message)
                #expect(message.unicodeScalars.count < 400, "\(message.unicodeScalars.count) scalars")
                #expect(message.unicodeScalars.filter { $0 == "\u{301}" }.count < 128)
            }
            // A device named in a route's path is checked before any lookup names it: unregistering from one came
            // back with the whole name in its 404, asking for its store key with it in a 403.
            let device = "/devices/a" + String(repeating: "%CC%81", count: 3_000)
            for (path, method) in [
                (device + "/registration", HTTPRequest.Method.delete), (device + "/store-key", .get),
            ] {
                let (status, body) = try await client.execute(
                    uri: path, method: method, headers: [.authorization: "Bearer \(mallory)"]
                ) { response in (response.status, String(buffer: response.body)) }
                #expect(status == .badRequest, "\(path.suffix(12))")
                #expect(body.utf8.count < 600, "\(body.utf8.count) bytes: \(body.prefix(scalars: 120))")
            }
        }
    }

    @Test func guessingFromElsewhereNeverLocksAUserOutOfTheirOwnTablet() async throws {
        try await Self.live(configure: { $0.trustedProxies = ["127.0.0.1"] }) { server, client in
            func signIn(_ password: String, from address: String) async throws -> HTTPResponse.Status {
                var headers = formHeaders
                headers[HTTPField.Name("X-Forwarded-For")!] = address
                return try await client.execute(
                    uri: "/oauth/token", method: .post, headers: headers,
                    body: formBody([
                        ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                        ("password", password),
                    ])
                ) { $0.status }
            }
            // alice's tablet signed in before: a known address.
            #expect(try await signIn("correct-horse-battery", from: "192.0.2.10") == .ok)
            // An attacker guesses from many addresses, far past every limit.
            for attempt in 0..<40 {
                let status = try await signIn("guess-\(attempt)", from: "198.51.100.\(attempt % 4)")
                #expect(status == .badRequest || status == .tooManyRequests)
            }
            #expect(try await signIn("guess-again", from: "198.51.100.1") == .tooManyRequests)
            // alice, at her tablet, is not kept out.
            #expect(try await signIn("correct-horse-battery", from: "192.0.2.10") == .ok)
            // A new address waits (the guessing slowed every unknown address for alice), but only for a while.
            #expect(try await signIn("correct-horse-battery", from: "203.0.113.7") == .tooManyRequests)
            server.clock.advance(by: 901)
            #expect(try await signIn("correct-horse-battery", from: "203.0.113.7") == .ok)
        }
    }

    /// ``live(configure:_:)`` with device sign-in on, these device-code limits, and the server behind a trusted
    /// proxy on 127.0.0.1, so that each request may say which address it comes from.
    static func liveWithDeviceCodes(
        perAddress: Int, maximum: Int, backend: StorageBackend = .sqlite,
        _ body:
            @Sendable (
                TestServer, any TestClientProtocol,
                _ start:
                    @Sendable (String) async throws -> (
                        status: HTTPResponse.Status, body: [String: Any], retryAfter: Int?
                    )
            ) async throws -> Void
    ) async throws {
        try await live(
            backend: backend,
            configure: {
                $0.trustedProxies = ["127.0.0.1"]
                $0.oauth.deviceCodes = DeviceCodeLimits(perAddress: perAddress, maximum: maximum)
            }
        ) { server, client in
            _ = try await server.server.settings.set("sign-in.methods", to: "password,device")
            try await body(server, client) { try await client.startDeviceAuthorization(from: $0) }
        }
    }

    /// Anyone who can reach the server may ask for device codes (the client id is public): one address keeps at
    /// most `perAddress` codes waiting at once, and all addresses together `maximum`, so a loop of requests can
    /// neither fill the database nor take every code. The stored address is a keyed hash, never the address.
    @Test func askingForDeviceCodesInALoopIsCappedPerAddressAndInAll() async throws {
        try await Self.liveWithDeviceCodes(perAddress: 3, maximum: 5) { server, client, start in
            for _ in 0..<3 { #expect(try await start("198.51.100.1").status == .ok) }
            // 100 s later the first of them frees its place in 500 s: that is the wait the refusal names.
            server.clock.advance(by: 100)
            let refused = try await start("198.51.100.1")
            #expect(refused.status == .tooManyRequests && refused.body["error"] as? String == "slow_down")
            #expect((1...600).contains(refused.retryAfter ?? 0), "Retry-After \(refused.retryAfter ?? -1)")
            #expect(refused.retryAfter == 500)
            // Other addresses still get codes, up to the limit of all together.
            #expect(try await start("198.51.100.2").status == .ok)
            #expect(try await start("198.51.100.3").status == .ok)
            let full = try await start("198.51.100.4")
            #expect(
                full.status == .serviceUnavailable && full.body["error"] as? String == "temporarily_unavailable"
                    && full.retryAfter != nil)
            #expect(full.retryAfter == 500)
            // Codes that expired hold no place.
            server.clock.advance(by: 601)
            #expect(try await start("198.51.100.1").status == .ok)
            let stored = try await server.server.database.storage.read { db in
                try await db.fetchAll("SELECT * FROM deviceAuthorizations", []).map { row in
                    row.values.compactMap(\.text).joined(separator: " ")
                }
            }
            #expect(stored.count == 6 && !stored.contains { $0.contains("198.51.100") }, "\(stored)")
        }
    }

    /// Many devices asking for codes at once (a station's tablets after a shift change, or a loop of requests)
    /// never take more places than the limit of all, and every refusal says why: on PostgreSQL the requests that
    /// read the same count conflict under `SERIALIZABLE` and run again, and none may fail for it or slip past the
    /// count.
    @Test(arguments: StorageBackend.allCases) func devicesAskingForCodesAtOnceNeverPassTheLimitOfAll(
        backend: StorageBackend
    ) async throws {
        try await Self.liveWithDeviceCodes(perAddress: 2, maximum: 10, backend: backend) { server, client, _ in
            let port = try #require(client.port)
            // Each request on a connection of its own (the test client sends its requests one after another).
            let outcomes = try await withThrowingTaskGroup(of: (Int, String).self) { group in
                for number in 0..<30 {
                    group.addTask {
                        let connection = TestClient(
                            host: "127.0.0.1", port: port,
                            eventLoopGroupProvider: .shared(.singletonMultiThreadedEventLoopGroup))
                        connection.connect()
                        var headers = formHeaders
                        headers[try #require(HTTPField.Name("X-Forwarded-For"))] = "198.51.100.\(number)"
                        let response = try await connection.post(
                            "/oauth/device_authorization", headers: headers,
                            body: ByteBuffer(string: "client_id=baton-device"))
                        try await connection.shutdown()
                        let body =
                            try? JSONSerialization.jsonObject(
                                with: Data(String(buffer: response.body ?? ByteBuffer()).utf8))
                            as? [String: Any]
                        return (Int(response.status.code), body?["error"] as? String ?? "")
                    }
                }
                var all: [(Int, String)] = []
                for try await outcome in group { all.append(outcome) }
                return all
            }
            #expect(outcomes.filter { $0.0 == 200 }.count == 10, "\(outcomes)")
            #expect(
                outcomes.filter { $0 == (503, "temporarily_unavailable") }.count == 20, "\(outcomes)")
            let waiting = try await server.server.database.storage.read { db in
                try await db.fetchOne("SELECT count(*) FROM deviceAuthorizations WHERE status = 'pending'")?[0].integer
            }
            #expect(waiting == 10)
        }
    }

    /// The limits cannot be turned against the people they protect: a code that was used holds no place (a
    /// station's tablets signing in one after another behind one NAT), and an IPv6 network's addresses count as
    /// one (a /64 is one customer's, so taking the limit of all needs that many networks, not addresses).
    @Test func deviceCodeLimitsCountUnexpiredCodesAndIPv6NetworksNotAddresses() async throws {
        try await Self.liveWithDeviceCodes(perAddress: 2, maximum: 4) { server, client, start in
            // Behind one NAT: a code holds its place until it expires, even approved and redeemed (denying or
            // using one's own codes must not make room for more).
            for _ in 0..<2 {
                let (status, started, _) = try await start("192.0.2.1")
                #expect(status == .ok)
                let userCode = try #require(started["user_code"] as? String)
                let deviceCode = try #require(started["device_code"] as? String)
                #expect(try await client.approve(userCode, password: "correct-horse-battery").status == .ok)
                let (redeemed, _) = try await client.token([
                    ("grant_type", DeviceAuthorizationTests.grant), ("client_id", "baton-device"),
                    ("device_code", deviceCode),
                ])
                #expect(redeemed == .ok)
            }
            #expect(try await start("192.0.2.1").status == .tooManyRequests)
            server.clock.advance(by: 601)
            #expect(try await start("192.0.2.1").status == .ok)
            server.clock.advance(by: 601)
            // One IPv6 network, many addresses: its limit, not one per address.
            #expect(try await start("2001:db8:0:1::1").status == .ok)
            #expect(try await start("2001:db8:0:1::2").status == .ok)
            #expect(try await start("2001:db8:0:1::3").status == .tooManyRequests)
            #expect(try await start("2001:db8:0:2::1").status == .ok)
        }
        #expect(DeviceAuthorizations.network(of: "2001:db8:0:1:aa::1") == "2001:db8:0:1::/64")
        #expect(DeviceAuthorizations.network(of: "::ffff:192.0.2.7") == "192.0.2.7")
        #expect(DeviceAuthorizations.network(of: "192.0.2.7") == "192.0.2.7")
        #expect(DeviceAuthorizations.network(of: "local") == "local")
    }

    @Test func forwardedForIsIgnoredFromAnUntrustedPeer() async throws {
        try await Self.live { _, client in
            for attempt in 0..<5 {
                var headers = formHeaders
                headers[HTTPField.Name("X-Forwarded-For")!] = "198.51.100.\(attempt)"
                let status = try await client.execute(
                    uri: "/oauth/token", method: .post, headers: headers,
                    body: formBody([
                        ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                        ("password", "guess-\(attempt)"),
                    ])
                ) { $0.status }
                #expect(status == .badRequest)
            }
            // Five failures from 127.0.0.1, whatever the header claimed: the next attempt from here waits.
            let (status, _) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "guess-5"),
            ])
            #expect(status == .tooManyRequests)
        }
    }

    @Test func aFailedSignInLogsNoUnknownNameAndInvalidClientListsNoClients() async throws {
        try await Self.live { server, client in
            // The password typed into the user-name field.
            let (status, _) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "correct-horse-battery"),
                ("password", "x"),
            ])
            #expect(status == .badRequest)
            let entries = try await server.server.audit.entries()
            #expect(entries.contains { $0.action == "sign-in-failed" })
            #expect(!entries.contains { "\($0)".contains("correct-horse-battery") })
            let (unknown, body) = try await client.token([("grant_type", "password"), ("client_id", "nobody")])
            #expect(unknown == .unauthorized)
            #expect(!"\(body)".contains("baton-device"))
        }
    }

    // MARK: Stored data and files

    @Test func stringsWithANULOrInvalidUTF8AreRefusedNotCutOrReplaced() async throws {
        try await Self.live { _, client in
            let alice = try await client.signIn("alice").access
            let sam = try await client.signIn("sam").access
            #expect(try await client.odata(.post, "Aircraft", token: sam, body: Fixtures.aircraft).status == .created)
            let nul = Fixtures.check(Fixtures.id(1), extra: #","Remarks":"left\u0000right""#)
            let withNUL = try await client.odata(.post, "PreflightChecks", token: alice, body: nul)
            #expect(withNUL.status == .badRequest)
            #expect(withNUL.error?.contains("NUL") == true, "\(withNUL.text)")
            var bytes = Array(Fixtures.check(Fixtures.id(2), extra: #","Remarks":"caf#"#).utf8)
            bytes += [0xC3, 0x28] + Array(#""}"#.utf8)
            let invalid = try await client.execute(
                uri: "/odata/PreflightChecks", method: .post,
                headers: [.authorization: "Bearer \(alice)", .contentType: "application/json"],
                body: ByteBuffer(bytes: bytes)
            ) { ($0.status, String(buffer: $0.body)) }
            #expect(invalid.0 == .badRequest)
            #expect(invalid.1.contains("not valid UTF-8"), "\(invalid.1)")
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "0")
        }
    }

    @Test func aKeysSymlinkInTheDataDirectoryIsRefused() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-link-\(UUID())")
        let elsewhere = FileManager.default.temporaryDirectory.appendingPathComponent("baton-target-\(UUID())")
        defer {
            try? FileManager.default.removeItem(at: directory)
            try? FileManager.default.removeItem(at: elsewhere)
        }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(
            at: elsewhere, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        try FileManager.default.createSymbolicLink(
            at: directory.appendingPathComponent("keys"), withDestinationURL: elsewhere)
        await #expect {
            _ = try await TestServer { $0.dataDirectory = directory }
        } throws: { "\($0)".contains("is a symbolic link") }
        let mode = try FileManager.default.attributesOfItem(atPath: elsewhere.path)[.posixPermissions] as? Int
        #expect(mode == 0o755)
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere.path).isEmpty)
    }

    @Test func theMasterKeyCanLiveOutsideTheDataDirectoryAndTheWrongOneIsRefused() async throws {
        let keyFile = FileManager.default.temporaryDirectory.appendingPathComponent("baton-master-\(UUID()).key")
        defer { try? FileManager.default.removeItem(at: keyFile) }
        let server = try await TestServer { $0.masterKeyFile = keyFile }
        defer { server.remove() }
        #expect(FileManager.default.fileExists(atPath: keyFile.path))
        #expect(
            !FileManager.default.fileExists(atPath: server.directory.appendingPathComponent("keys/master.key").path))
        try await server.addUser("alice")
        try await server.test { client in
            let alice = try await client.signIn("alice").access
            #expect(try await OnBehalfTests.register(client, alice, key: P256.Signing.PrivateKey()) == .ok)
        }
        // The data directory alone (a backup of it, say) opens no store key: another master key is refused.
        let other = FileManager.default.temporaryDirectory.appendingPathComponent("baton-other-\(UUID()).key")
        defer { try? FileManager.default.removeItem(at: other) }
        await #expect {
            var configuration = BatonServerConfiguration()
            configuration.dataDirectory = server.directory
            configuration.masterKeyFile = other
            configuration.bcryptCost = 4
            _ = try await BatonServer(configuration: configuration, logger: .init(label: "test"))
        } throws: { "\($0)".contains("does not open the device store keys") }
    }

    // MARK: Connections

    /// Opens a TCP connection to 127.0.0.1:`port` and returns its descriptor.
    static func connect(port: Int) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw TestFailure("socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            close(socket)
            throw TestFailure("connect() failed")
        }
        return socket
    }

    @Test func silentConnectionsAreClosedAndDoNotStopTheServer() async throws {
        try await Self.live(configure: {
            $0.connections.headTimeout = .seconds(1)
            $0.connections.maximumConnectionsPerAddress = 400
        }) { _, client in
            let port = try #require(client.port)
            var sockets: [Int32] = []
            defer { for socket in sockets { close(socket) } }
            for _ in 0..<300 { sockets.append(try Self.connect(port: port)) }
            // One more sends half a request head and stops.
            let slow = try Self.connect(port: port)
            sockets.append(slow)
            _ = "GET /health HTTP/1.1\r\nHost: x\r\n".withCString { send(slow, $0, strlen($0), 0) }
            // The server answers everyone else meanwhile, on a connection of their own (the test client's
            // kept-alive connection has been idle for as long as the 300 took to open, and idle time counts
            // against the same head timeout).
            #expect(try await offThePool { try Self.health(port: port) })
            // And closes the silent and the slow ones once their time is up: a read sees end of file.
            try await Task.sleep(for: .seconds(2))
            let watched = [sockets[0], sockets[150], slow]
            let reads = try await offThePool {
                watched.map { socket in
                    var buffer = [UInt8](repeating: 0, count: 16)
                    var timeout = timeval(tv_sec: 3, tv_usec: 0)
                    setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                    return recv(socket, &buffer, buffer.count, 0)
                }
            }
            #expect(reads == [0, 0, 0])
        }
    }

    @Test func aRequestWhoseBodyStallsIsClosedWhenItsTimeIsUp() async throws {
        try await Self.live(configure: { $0.connections.bodyTimeout = .seconds(1) }) { _, client in
            let port = try #require(client.port)
            let socket = try Self.connect(port: port)
            defer { close(socket) }
            // A head announcing 100 bytes of body, then 10 of them, then nothing.
            let head = "POST /oauth/token HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\ngrant_type"
            _ = head.withCString { send(socket, $0, strlen($0), 0) }
            let started = ContinuousClock.now
            let read = try await offThePool {
                var buffer = [UInt8](repeating: 0, count: 512)
                var timeout = timeval(tv_sec: 10, tv_usec: 0)
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                // Whatever the server says first (nothing, or a 408), the connection ends: read to end of file.
                var total = 0
                while true {
                    let count = recv(socket, &buffer, buffer.count, 0)
                    if count <= 0 { return count == 0 ? total : -1 }
                    total += count
                }
            }
            #expect(read >= 0, "the connection was not closed within 10 s")
            #expect(ContinuousClock.now - started < .seconds(10))
            // The server still answers others.
            #expect(try await offThePool { try Self.health(port: port) })
        }
    }

    /// A request moves the connection's deadline rather than a timer of its own: a kept-alive connection that asks
    /// more often than the timeout lives past it (the one timer fires, finds the deadline moved, and waits for it),
    /// and one that then goes silent is closed a timeout after its last answer.
    @Test func aBusyKeptAliveConnectionOutlivesTheTimeoutAndClosesOnceSilent() async throws {
        try await Self.live(configure: { $0.connections.headTimeout = .seconds(1) }) { _, client in
            let port = try #require(client.port)
            let socket = try Self.connect(port: port)
            defer { close(socket) }
            var timeout = timeval(tv_sec: 20, tv_usec: 0)
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let started = ContinuousClock.now
            var answered = 0
            while ContinuousClock.now - started < .milliseconds(2_600) {
                let ok = try await offThePool {
                    _ = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".withCString {
                        send(socket, $0, strlen($0), 0)
                    }
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    let count = recv(socket, &buffer, buffer.count, 0)
                    return count > 0 && String(decoding: buffer.prefix(count), as: UTF8.self).hasPrefix("HTTP/1.1 200")
                }
                #expect(ok, "request \(answered + 1) on the kept-alive connection was not answered")
                guard ok else { return }
                answered += 1
                try await Task.sleep(for: .milliseconds(300))
            }
            #expect(answered >= 5)
            // Silent now: closed within the timeout (and the timer's lateness), a read sees end of file.
            let silentSince = ContinuousClock.now
            let read = try await offThePool {
                var buffer = [UInt8](repeating: 0, count: 16)
                return recv(socket, &buffer, buffer.count, 0)
            }
            #expect(read == 0)
            #expect(ContinuousClock.now - silentSince < .seconds(10))
            #expect(ContinuousClock.now - silentSince > .milliseconds(500))
        }
    }

    /// A request the server answers before its body has ended (here a 401: no token) still leaves the connection on
    /// the clock once the body ends: silent after that, it is closed within the head timeout, not kept for good.
    @Test func aRequestAnsweredBeforeItsBodyEndedLeavesTheConnectionTimed() async throws {
        try await Self.live(configure: { $0.connections.headTimeout = .seconds(1) }) { _, client in
            let port = try #require(client.port)
            let socket = try Self.connect(port: port)
            defer { close(socket) }
            var timeout = timeval(tv_sec: 20, tv_usec: 0)
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let head =
                "POST /odata/$batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4\r\n\r\n"
            _ = head.withCString { send(socket, $0, strlen($0), 0) }
            // The answer comes before the body is sent.
            let answer = try await offThePool {
                var buffer = [UInt8](repeating: 0, count: 4096)
                let count = recv(socket, &buffer, buffer.count, 0)
                return String(decoding: buffer.prefix(max(0, count)), as: UTF8.self)
            }
            #expect(answer.hasPrefix("HTTP/1.1 401"), "\(answer.prefix(80))")
            _ = "{}{}".withCString { send(socket, $0, strlen($0), 0) }
            let silentSince = ContinuousClock.now
            let read = try await offThePool {
                var buffer = [UInt8](repeating: 0, count: 4096)
                var count = 1
                while count > 0 { count = recv(socket, &buffer, buffer.count, 0) }
                return count
            }
            #expect(read == 0, "the connection was not closed")
            #expect(ContinuousClock.now - silentSince < .seconds(10))
        }
    }

    @Test func theMetricsPortHoldsFewConnectionsAndClosesSilentOnes() async throws {
        let server = try await TestServer {
            $0.metricsConnections.maximumConnectionsPerAddress = 4
            $0.metricsConnections.headTimeout = .seconds(1)
        }
        defer { server.remove() }
        #expect(server.server.configuration.metricsHost == "127.0.0.1")
        try await server.server.metricsApplication().test(.live) { client in
            let port = try #require(client.port)
            var sockets: [Int32] = []
            defer { for socket in sockets { close(socket) } }
            // The test client holds one connection: three more fill the address's four places.
            for _ in 0..<4 { sockets.append(try Self.connect(port: port)) }
            let opened = sockets
            let reads = try await offThePool {
                opened.map { socket in
                    var buffer = [UInt8](repeating: 0, count: 16)
                    var timeout = timeval(tv_sec: 5, tv_usec: 0)
                    setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                    return recv(socket, &buffer, buffer.count, 0)
                }
            }
            // The one over the limit is closed at once, the silent ones when their second is up: end of file.
            #expect(reads == [0, 0, 0, 0])
            for socket in sockets { close(socket) }
            sockets.removeAll()
            // A scrape on a connection of its own still works (the test client's idle one was closed too).
            #expect(try await offThePool { try Self.health(port: port, path: "/metrics") })
        }
    }

    @Test func connectionsOverTheLimitPerAddressAreRefused() async throws {
        try await Self.live(configure: { $0.connections.maximumConnectionsPerAddress = 8 }) { _, client in
            let port = try #require(client.port)
            var sockets: [Int32] = []
            defer { for socket in sockets { close(socket) } }
            for _ in 0..<9 { sockets.append(try Self.connect(port: port)) }
            let last = sockets[8]
            let read = try await offThePool {
                var buffer = [UInt8](repeating: 0, count: 16)
                var timeout = timeval(tv_sec: 3, tv_usec: 0)
                setsockopt(last, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                return recv(last, &buffer, buffer.count, 0)
            }
            #expect(read <= 0)
            for socket in sockets { close(socket) }
            sockets = []
            // Their places free up as the server sees them close: a new connection is served again.
            var answered = false
            for _ in 0..<50 where !answered {
                try await Task.sleep(for: .milliseconds(100))
                answered = try await offThePool { try Self.health(port: port) }
            }
            #expect(answered)
        }
    }

    /// `GET /health` over a new connection; whether the answer was 200.
    static func health(port: Int, path: String = "/health") throws -> Bool {
        let socket = try connect(port: port)
        defer { close(socket) }
        // Generous: the whole test suite shares two cores with this server.
        var timeout = timeval(tv_sec: 20, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".withCString {
            send(socket, $0, strlen($0), 0)
        }
        var buffer = [UInt8](repeating: 0, count: 256)
        let count = recv(socket, &buffer, buffer.count, 0)
        return count > 0 && String(decoding: buffer.prefix(count), as: UTF8.self).hasPrefix("HTTP/1.1 200")
    }
}
