import BatonOData
import BatonServer
import BatonTestSupport
import BatonTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ServerBatchTests {
    static func jsonBatch(_ client: any TestClientProtocol, token: String, _ requests: String) async throws -> [[String:
        Any]]
    {
        let reply = try await client.odata(.post, "$batch", token: token, body: #"{"requests":[\#(requests)]}"#)
        #expect(reply.status == .ok, "BODY \(reply.text)")
        return reply.json["responses"] as? [[String: Any]] ?? []
    }

    @Test(arguments: StorageBackend.allCases) func atomicityGroupsApplyAllOrNothing(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let good = Fixtures.check(Fixtures.id(1))
            let bad = Fixtures.check(Fixtures.id(2), fuel: "\"lots\"")
            let responses = try await Self.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(good)},
                {"id":"2","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(bad)},
                {"id":"3","dependsOn":["g"],"method":"GET","url":"PreflightChecks/$count"}
                """#)
            #expect(responses.map { $0["status"] as? Int } == [424, 400, 424])
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "0")
        }
    }

    /// A `$batch` writes its client's address out once for all its changes: each change's audit entry carries the
    /// address a change sent alone carries.
    @Test(arguments: StorageBackend.allCases) func aBatchsChangesAreAuditedWithTheClientsAddress(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { server, client, alice, _ in
            let alone = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(1)))
            #expect(alone.status == .created)
            let responses = try await Self.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(2)))},
                {"id":"2","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(1)))","headers":{"If-Match":"*"},"body":{"Remarks":"r"}},
                {"id":"3","method":"DELETE","url":"PreflightChecks(\#(Fixtures.id(2)))","headers":{"If-Match":"*"},"dependsOn":["1"]}
                """#)
            #expect(responses.map { $0["status"] as? Int } == [201, 204, 204])
            // The world's aircraft, the check sent alone, and the batch's three changes.
            let entries = try await server.server.audit.entries(limit: 100).filter { $0.action.hasPrefix("entity-") }
            #expect(
                entries.map(\.action).sorted() == [
                    "entity-created", "entity-created", "entity-created", "entity-deleted", "entity-updated",
                ])
            let addresses = Set(entries.map(\.address))
            #expect(addresses.count == 1)
            #expect(addresses.first??.isEmpty == false)
        }
    }

    /// Changes outside atomicity groups each apply or fail alone, in one transaction: first run without
    /// savepoints (each a round trip on PostgreSQL), then, once one fails, all again with a savepoint each. A
    /// failed statement (a key taken: on PostgreSQL it ends the transaction) and a refused body leave the other
    /// changes applied, once, and a later change builds on an earlier one of the same run.
    @Test(arguments: StorageBackend.allCases) func independentChangesFailAloneAndTheRestApplyOnce(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let taken = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(1)))
            #expect(taken.status == .created)
            let responses = try await Self.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(2), extra: #","Remarks":"new""#))},
                {"id":"2","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(1)))},
                {"id":"3","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(2)))","headers":{"If-Match":"*"},"body":{"Remarks":"patched"}},
                {"id":"4","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(3), fuel: "\"lots\""))},
                {"id":"5","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(4)))}
                """#)
            #expect(responses.map { $0["status"] as? Int } == [201, 409, 204, 400, 201])
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "3")
            let patched = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(2)))", token: alice)
            #expect(patched.json["Remarks"] as? String == "patched")
            // All good: the run applies.
            let clean = try await Self.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(5)))},
                {"id":"2","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(5)))","headers":{"If-Match":"*"},"body":{"Remarks":"x"}}
                """#)
            #expect(clean.map { $0["status"] as? Int } == [201, 204])
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "4")
        }
    }

    @Test(arguments: StorageBackend.allCases) func referencesAndDependenciesWork(backend: StorageBackend) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let responses = try await Self.jsonBatch(
                client, token: alice,
                #"""
                {"id":"c","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(1)))},
                {"id":"p","atomicityGroup":"g","dependsOn":["c"],"method":"PATCH","url":"$c","headers":{"If-Match":"*"},"body":{"Remarks":"via $c"}},
                {"id":"r","dependsOn":["g"],"method":"GET","url":"$c/Aircraft"}
                """#)
            #expect(responses.map { $0["status"] as? Int } == [201, 204, 200])
            #expect((responses[2]["body"] as? [String: Any])?["TailNumber"] as? String == "D-AIBL")
            let stored = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(1)))", token: alice)
            #expect(stored.json["Remarks"] as? String == "via $c")
        }
    }

    @Test(arguments: StorageBackend.allCases) func multipartBatchesWithChangesets(backend: StorageBackend) async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let body = """
                --b\r
                Content-Type: multipart/mixed; boundary=cs\r
                \r
                --cs\r
                Content-Type: application/http\r
                Content-ID: 1\r
                \r
                POST PreflightChecks HTTP/1.1\r
                Content-Type: application/json\r
                \r
                \(Fixtures.check(Fixtures.id(1)))\r
                --cs--\r
                --b\r
                Content-Type: application/http\r
                \r
                GET PreflightChecks/$count HTTP/1.1\r
                \r
                \r
                --b--\r

                """
            let reply = try await client.execute(
                uri: "/odata/$batch", method: .post,
                headers: [.authorization: "Bearer \(alice)", .contentType: "multipart/mixed; boundary=b"],
                body: ByteBuffer(string: body)
            ) { ($0.status, $0.headers[.contentType] ?? "", Array(buffer: $0.body)) }
            #expect(reply.0 == .ok)
            let boundary = try MultipartBatch.boundary(fromContentType: reply.1)
            let responses = try MultipartBatch.decodeResponses(reply.2, boundary: boundary)
            #expect(responses.map(\.status) == [201, 200])
            #expect(responses[1].body == .string("1"))
        }
    }

    /// A JSON `$batch` is told by its media type read by byte: any case and parameters are JSON; a longer subtype or one
    /// glued to a combining mark is not, and is refused as an unsupported type (it was read as JSON by a Unicode
    /// prefix before).
    @Test func aJSONBatchIsToldByItsMediaTypeReadByByte() async throws {
        try await Fixtures.world(backend: .sqlite) { _, client, alice, _ in
            let body = #"{"requests":[{"id":"1","method":"GET","url":"Aircraft/$count"}]}"#
            for (contentType, status) in [
                ("APPLICATION/JSON; charset=utf-8", HTTPResponse.Status.ok), ("application/json", .ok),
                ("application/jsonx", .unsupportedMediaType), ("application/json-seq", .unsupportedMediaType),
                ("application/json\u{301}", .unsupportedMediaType),
            ] {
                let reply = try await client.execute(
                    uri: "/odata/$batch", method: .post,
                    headers: [.authorization: "Bearer \(alice)", .contentType: contentType],
                    body: ByteBuffer(string: body)
                ) { $0.status }
                #expect(reply == status, "\(Array(contentType.utf8))")
            }
        }
    }

    @Test(arguments: StorageBackend.allCases) func malformedAndOversizedBatchesAreRefused(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let cyclic = try await client.odata(
                .post, "$batch", token: alice,
                body:
                    #"{"requests":[{"id":"1","dependsOn":["2"],"method":"GET","url":"Aircraft"},{"id":"2","dependsOn":["1"],"method":"GET","url":"Aircraft"}]}"#
            )
            #expect(cyclic.status == .badRequest)
            #expect(cyclic.error == "Request '1' depends on '2', which is not an earlier request or group")
            let many = (0..<101).map { #"{"id":"\#($0)","method":"GET","url":"Aircraft"}"# }.joined(separator: ",")
            let oversized = try await client.odata(.post, "$batch", token: alice, body: #"{"requests":[\#(many)]}"#)
            #expect(oversized.status == .contentTooLarge)
            let envelope = try await client.odata(
                .post, "$batch", token: alice,
                headers: [
                    ("Repeatability-Request-ID", "x"), ("Repeatability-First-Sent", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ],
                body: #"{"requests":[]}"#)
            #expect(envelope.status == .badRequest)
            #expect(
                envelope.error
                    == "Repeatability headers belong on the requests inside a $batch, not on the $batch itself.")
        }
    }

    /// An `If-Match` value as a JSON string's content.
    static func ifMatch(_ etag: String?) -> String { (etag ?? "").replacingOccurrences(of: "\"", with: "\\\"") }

    /// A run's changes read their entities together before it (one `SELECT … IN` a set), and each change still
    /// checks `If-Match` against the entity as stored when it runs: a second change of an entity with the ETag the
    /// first one made stale fails, in a run that goes again with savepoints and in an atomicity group; an unknown
    /// entity is 404; the changes that apply land on their own entities.
    @Test(arguments: StorageBackend.allCases) func aChangeChecksItsEntityAsStoredWhenItRunsInARunReadAhead(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            var etags: [String] = []
            for n in 1...3 {
                let created = try await client.odata(
                    .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(n)))
                #expect(created.status == .created)
                etags.append(Self.ifMatch(created.etag))
            }
            let responses = try await Self.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(1)))","headers":{"If-Match":"\#(etags[0])"},"body":{"Remarks":"one"}},
                {"id":"2","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(2)))","headers":{"If-Match":"\#(etags[1])"},"body":{"Remarks":"two"}},
                {"id":"3","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(1)))","headers":{"If-Match":"\#(etags[0])"},"body":{"Remarks":"stale"}},
                {"id":"4","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(9)))","headers":{"If-Match":"*"},"body":{"Remarks":"nobody"}},
                {"id":"5","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(2)))","headers":{"If-Match":"*"},"body":{"Remarks":"two again"}},
                {"id":"6","method":"DELETE","url":"PreflightChecks(\#(Fixtures.id(3)))","headers":{"If-Match":"\#(etags[2])"}}
                """#)
            #expect(responses.map { $0["status"] as? Int } == [204, 204, 412, 404, 204, 204])
            let one = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(1)))", token: alice)
            #expect(one.json["Remarks"] as? String == "one")
            let two = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(2)))", token: alice)
            #expect(two.json["Remarks"] as? String == "two again")
            #expect(
                try await client.odata(.get, "PreflightChecks(\(Fixtures.id(3)))", token: alice).status == .notFound)
            // In an atomicity group: the second change's stale ETag rolls the group back.
            let oneETag = Self.ifMatch(one.etag)
            let group = try await Self.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","atomicityGroup":"g","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(1)))","headers":{"If-Match":"\#(oneETag)"},"body":{"Remarks":"g1"}},
                {"id":"2","atomicityGroup":"g","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(2)))","headers":{"If-Match":"*"},"body":{"Remarks":"g2"}},
                {"id":"3","atomicityGroup":"g","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(1)))","headers":{"If-Match":"\#(oneETag)"},"body":{"Remarks":"g3"}}
                """#)
            #expect(group.map { $0["status"] as? Int } == [424, 424, 412])
            let after = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(1)))", token: alice)
            #expect(after.json["Remarks"] as? String == "one")
            #expect(after.etag == one.etag)
        }
    }

    /// Entities read ahead are told apart by their key's bytes: a composed and a decomposed `É` are two aircraft
    /// (which `String`'s `==` takes for one), and each change of a run reaches its own (a third keeps the run read
    /// ahead were the two taken for one).
    @Test(arguments: StorageBackend.allCases) func entitiesReadAheadAreFoundByTheirKeysBytes(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, _, sam in
            for tail in ["\u{C9}-1", "E\u{301}-1"] {
                let created = try await client.odata(
                    .post, "Aircraft", token: sam,
                    body: #"{"TailNumber":"\#(tail)","Type":"A320","Station":"FRA","Status":"ready"}"#)
                #expect(created.status == .created, "\(created.text)")
            }
            // Both orders: whichever of the two a mix-up kept, one order hands it to the other's change, whose update
            // (`If-Match: *`, so nothing fails and the run is not gone through again) would land on the wrong one.
            for (first, second) in [(1, 0), (0, 1)] {
                let stations = first == 1 ? ["MUC", "HAM"] : ["STR", "DUS"]
                let urls = ["Aircraft('%C3%89-1')", "Aircraft('E%CC%81-1')"]
                let responses = try await Self.jsonBatch(
                    client, token: sam,
                    #"""
                    {"id":"1","method":"PATCH","url":"\#(urls[first])","headers":{"If-Match":"*"},"body":{"Station":"\#(stations[first])"}},
                    {"id":"2","method":"PATCH","url":"\#(urls[second])","headers":{"If-Match":"*"},"body":{"Station":"\#(stations[second])"}},
                    {"id":"3","method":"PATCH","url":"Aircraft('D-AIBL')","headers":{"If-Match":"*"},"body":{"Station":"CGN"}}
                    """#)
                #expect(responses.map { $0["status"] as? Int } == [204, 204, 204])
                for (url, station) in zip(urls, stations) {
                    let stored = try await client.odata(.get, url, token: sam)
                    #expect(stored.json["Station"] as? String == station, "\(url)")
                }
            }
        }
    }

    /// A run with a change through `$n/…` (a navigation from an entity the run creates) reads nothing ahead: it can
    /// change an entity a later change of the run addresses by key, which must then see that change (412 for the
    /// ETag from before the run), whatever it was read as before the run.
    @Test(arguments: StorageBackend.allCases) func aChangeThroughANewEntitysNavigationIsSeenByTheChangesAfterIt(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, _, sam in
            let before = try await client.odata(.get, "Aircraft('D-AIBL')", token: sam)
            let second = try await client.odata(
                .post, "Aircraft", token: sam,
                body: #"{"TailNumber":"D-AIBX","Type":"A320","Station":"FRA","Status":"ready"}"#)
            #expect(second.status == .created)
            let responses = try await Self.jsonBatch(
                client, token: sam,
                #"""
                {"id":"1","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(1)))},
                {"id":"2","method":"PATCH","url":"$1/Aircraft","headers":{"If-Match":"*"},"body":{"Station":"MUC"}},
                {"id":"3","method":"PATCH","url":"Aircraft('D-AIBL')","headers":{"If-Match":"\#(Self.ifMatch(before.etag))"},"body":{"Station":"HAM"}},
                {"id":"4","method":"PATCH","url":"Aircraft('D-AIBX')","headers":{"If-Match":"*"},"body":{"Station":"CGN"}}
                """#)
            #expect(responses.map { $0["status"] as? Int } == [201, 204, 412, 204])
            let after = try await client.odata(.get, "Aircraft('D-AIBL')", token: sam)
            #expect(after.json["Station"] as? String == "MUC")
        }
    }
}
