import BatonOData
import BatonSQL
import BatonTestSupport
import BatonTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import BatonServer

/// An OData response in tests.
struct ODataReply: @unchecked Sendable {
    // Safe: built once from a response and only read afterwards.
    var status: HTTPResponse.Status
    var headers: HTTPFields
    var json: [String: Any]
    var text: String

    var error: String? { (json["error"] as? [String: Any])?["message"] as? String }
    var errorTarget: String? { (json["error"] as? [String: Any])?["target"] as? String }
    var values: [[String: Any]] { json["value"] as? [[String: Any]] ?? [] }
    var etag: String? { headers[.eTag] }
}

extension TestClientProtocol {
    /// Creates pre-flight check number `n` (``Fixtures/id(_:)``) as the holder of `token`; returns its ID.
    func createCheck(_ n: Int, token: String) async throws -> String {
        let id = Fixtures.id(n)
        let created = try await odata(.post, "PreflightChecks", token: token, body: Fixtures.check(id))
        #expect(created.status == .created, "\(created.text)")
        return id
    }

    func odata(
        _ method: HTTPRequest.Method, _ path: String, token: String, headers: [(String, String)] = [],
        body: String? = nil
    ) async throws -> ODataReply {
        var fields: HTTPFields = [.authorization: "Bearer \(token)"]
        if body != nil { fields[.contentType] = "application/json" }
        for (name, value) in headers { if let field = HTTPField.Name(name) { fields[field] = value } }
        return try await execute(
            uri: "/odata/" + path, method: method, headers: fields, body: body.map { ByteBuffer(string: $0) }
        ) {
            let text = String(buffer: $0.body)
            let json = (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]) ?? [:]
            return ODataReply(status: $0.status, headers: $0.headers, json: json, text: text)
        }
    }
}

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DataServiceTests {
    /// `$metadata` answers CSDL XML unless `$format` asks for JSON or `Accept` weighs JSON above XML. A client
    /// listing JSON first and XML at a tenth got XML while the header was searched for "xml".
    @Test func metadataAnswersInTheFormatAskedFor() async throws {
        try await Fixtures.world { _, client, alice, _ in
            func answersJSON(_ path: String, accept: String?) async throws -> Bool {
                let reply = try await client.odata(
                    .get, path, token: alice, headers: accept.map { [("Accept", $0)] } ?? [])
                #expect(reply.status == .ok)
                let json = reply.json["$Version"] != nil
                #expect(json != reply.text.contains("<edmx:Edmx"), "\(path) \(accept ?? "")")
                return json
            }
            let cases: [(String, String?, Bool)] = [
                ("$metadata", nil, false), ("$metadata", "application/json", true),
                ("$metadata", "application/xml", false), ("$metadata", "*/*", false),
                ("$metadata", "application/json, application/xml;q=0.1", true),
                ("$metadata", "application/json;q=0.5, application/xml", false),
                ("$metadata", "application/json, application/xml", false),
                ("$metadata", "APPLICATION/JSON;odata.metadata=minimal", true),
                ("$metadata", "application/json\u{301}", false), ("$metadata", "application/jsonx", false),
                ("$metadata?$format=json", "application/xml", true),
                ("$metadata?$format=application/json;odata.metadata=full", nil, true),
                ("$metadata?$format=xml", "application/json", false),
            ]
            for (path, accept, json) in cases {
                let answered = try await answersJSON(path, accept: accept)
                #expect(answered == json, "\(path) \(accept ?? "")")
            }
        }
    }

    @Test(arguments: StorageBackend.allCases) func createReadUpdateDeleteWithETags(backend: StorageBackend) async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let id = Fixtures.id(1)
            let created = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(id, extra: #","CheckedBy":"mallory""#))
            #expect(created.status == .created)
            #expect(created.headers[.location] == "http://127.0.0.1:8080/odata/PreflightChecks(\(id))")
            #expect(created.json["CheckedBy"] as? String == "alice")  // server-kept, never from the body
            #expect(created.json["UploadedBy"] as? String == "alice")
            let etag = try #require(created.etag)
            let read = try await client.odata(.get, "PreflightChecks(\(id))", token: alice)
            #expect(read.status == .ok)
            #expect(read.json["FuelKg"] as? Double == 5200.5)
            #expect(read.text.contains(#""FuelKg":5200.5"#))
            // Changes need If-Match: 428 without, 412 with a stale ETag, 204 with the current one.
            #expect(
                try await client.odata(.patch, "PreflightChecks(\(id))", token: alice, body: #"{"Remarks":"ok"}"#)
                    .status == .preconditionRequired)
            let stale = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: alice, headers: [("If-Match", "W/\"999\"")],
                body: #"{"Remarks":"ok"}"#)
            #expect(stale.status == .preconditionFailed)
            let patched = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: alice, headers: [("If-Match", etag)],
                body: #"{"Remarks":"ok"}"#)
            #expect(patched.status == .noContent)
            #expect(patched.etag != etag)
            let after = try await client.odata(.get, "PreflightChecks(\(id))/Remarks", token: alice)
            #expect(after.json["value"] as? String == "ok")
            // PUT replaces: properties left out become null.
            let put = try await client.odata(
                .put, "PreflightChecks(\(id))", token: alice,
                headers: [("If-Match", "*"), ("Prefer", "return=representation")],
                body: Fixtures.check(id, fuel: "4000"))
            #expect(put.status == .ok)
            #expect(put.json["Remarks"] is NSNull)
            #expect(put.headers[.preferenceApplied] == "return=representation")
            let deleted = try await client.odata(
                .delete, "PreflightChecks(\(id))", token: alice, headers: [("If-Match", "*")])
            #expect(deleted.status == .noContent)
            #expect(try await client.odata(.get, "PreflightChecks(\(id))", token: alice).status == .notFound)
        }
    }

    /// An update or a delete reads of the entity only what decides it (its key, ETag, author and status): who may
    /// change a final check is still decided on what is stored, and the minimal answer carries the new ETag.
    @Test(arguments: StorageBackend.allCases) func whoMayChangeAFinalCheckIsDecidedOnWhatIsStored(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, sam in
            let samsID = Fixtures.id(5)
            let alicesID = Fixtures.id(6)
            #expect(
                try await client.odata(.post, "PreflightChecks", token: sam, body: Fixtures.check(samsID)).status
                    == .created)
            #expect(
                try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(alicesID)).status
                    == .created)
            // sam's final check: alice (ground staff) may neither change nor remove it.
            let patch = try await client.odata(
                .patch, "PreflightChecks(\(samsID))", token: alice, headers: [("If-Match", "*")],
                body: #"{"Remarks":"not mine"}"#)
            #expect(patch.status == .forbidden)
            #expect((patch.json["error"] as? [String: Any])?["code"] as? String == "NotTheAuthor")
            let delete = try await client.odata(
                .delete, "PreflightChecks(\(samsID))", token: alice, headers: [("If-Match", "*")])
            #expect(delete.status == .forbidden)
            let kept = try await client.odata(.get, "PreflightChecks(\(samsID))", token: sam)
            #expect(kept.json["Remarks"] is NSNull && kept.json["CheckedBy"] as? String == "sam")
            // Her own: changed, with the new ETag in the minimal answer; a stale ETag is refused.
            let before = try await client.odata(.get, "PreflightChecks(\(alicesID))", token: alice)
            let own = try await client.odata(
                .patch, "PreflightChecks(\(alicesID))", token: alice, headers: [("If-Match", before.etag ?? "")],
                body: #"{"Remarks":"mine"}"#)
            #expect(own.status == .noContent)
            let after = try await client.odata(.get, "PreflightChecks(\(alicesID))", token: alice)
            #expect(own.etag != nil && own.etag == after.etag && own.etag != before.etag)
            #expect(
                after.json["Remarks"] as? String == "mine" && (after.json["FuelKg"] as? NSNumber)?.doubleValue == 5200.5
            )
            let stale = try await client.odata(
                .patch, "PreflightChecks(\(alicesID))", token: alice, headers: [("If-Match", before.etag ?? "")],
                body: #"{"Remarks":"again"}"#)
            #expect(stale.status == .preconditionFailed)
            // A supervisor may change anyone's.
            let bySam = try await client.odata(
                .patch, "PreflightChecks(\(samsID))", token: sam, headers: [("If-Match", "*")],
                body: #"{"Remarks":"checked"}"#)
            #expect(bySam.status == .noContent)
        }
    }

    /// An update's read of what decides who may change the entity is the server's own `$select`: an account that
    /// fills the key reads' cache with `$select` lists of its own does not take its place (the review's finding: it
    /// counted as a client's, and every change was translated again once the cache was full).
    @Test func aChangesOwnReadKeepsItsTextWhenClientsFilledTheCache() async throws {
        try await Fixtures.world { server, client, alice, _ in
            let id = Fixtures.id(9)
            #expect(
                try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(id)).status
                    == .created)
            let names = [
                "TailNumber", "FlightNumber", "FuelKg", "TyrePressureMainPsi", "TyrePressureNosePsi", "OilQuarts",
                "Remarks", "Status", "CheckedBy", "UploadedBy",
            ]
            // More distinct `$select` lists (subsets of these names) than the cache keeps for clients.
            for subset in 1...(SQLTextCache.capacity + 8) {
                let select = names.indices.filter { subset & (1 << $0) != 0 }.map { names[$0] }
                let read = try await client.odata(
                    .get, "PreflightChecks(\(id))?$select=\(select.joined(separator: ","))", token: alice)
                #expect(read.status == .ok)
            }
            let full = server.server.data.keyReads.count
            let again = try await client.odata(.get, "PreflightChecks(\(id))?$select=ID,FuelKg", token: alice)
            #expect(again.status == .ok && server.server.data.keyReads.count == full)
            let patch = try await client.odata(
                .patch, "PreflightChecks(\(id))", token: alice, headers: [("If-Match", "*")],
                body: #"{"Remarks":"ok"}"#)
            #expect(patch.status == .noContent)
            #expect(server.server.data.keyReads.count == full + 1)
        }
    }

    @Test(arguments: StorageBackend.allCases) func groundStaffCannotChangeAircraftButSupervisorsCan(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, sam in
            let denied = try await client.odata(
                .patch, "Aircraft('D-AIBL')", token: alice, headers: [("If-Match", "*")],
                body: #"{"Status":"grounded"}"#)
            #expect(denied.status == .forbidden)
            #expect(denied.error == "Only supervisors and admins change Aircraft.")
            let allowed = try await client.odata(
                .patch, "Aircraft('D-AIBL')", token: sam, headers: [("If-Match", "*")], body: #"{"Status":"grounded"}"#)
            #expect(allowed.status == .noContent)
        }
    }

    /// The corpus of invalid check bodies the offline store is held to (BatonOfflineTests' ModelCheckTests): each
    /// is a 400 naming its property, in the words the tablet uses too.
    @Test(arguments: StorageBackend.allCases) func invalidCheckBodiesAreRefusedNamingTheProperty(
        backend: StorageBackend
    )
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            for invalid in InvalidCheckBodies.cases {
                let reply = try await client.odata(
                    .post, "PreflightChecks", token: alice, body: try InvalidCheckBodies.body(of: invalid, id: UUID()))
                #expect(reply.status == .badRequest, "\(invalid)")
                #expect(reply.error == invalid.message, "\(invalid)")
                #expect(reply.errorTarget == invalid.target, "\(invalid)")
            }
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "0")
        }
    }

    @Test(arguments: StorageBackend.allCases) func badRequestsGetClearErrorsAndChangeNothing(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let cases: [(HTTPRequest.Method, String, String?, HTTPResponse.Status, String)] = [
                (
                    .get, "PreflightChecks?$filter=Fuel gt 1", nil, .badRequest,
                    "Unknown property 'Fuel' on 'PreflightCheck'. Did you mean 'FuelKg'? (at position 24)"
                ),
                (.get, "Checks", nil, .notFound, "Unknown entity set 'Checks'. (at position 0)"),
                (
                    .get, "PreflightChecks?$apply=groupby((Status))", nil, .notImplemented,
                    "System query option '$apply' is not implemented (at position 16)"
                ),
                (
                    .post, "PreflightChecks", Fixtures.check(Fixtures.id(2), fuel: "\"lots\""), .badRequest,
                    "Property 'FuelKg' expects a decimal number written without an exponent, but the payload has a string"
                ),
                (
                    .post, "PreflightChecks", "{not json", .badRequest,
                    "Expected a quoted member name in JSON (at position 1)"
                ),
                (
                    .post, "PreflightChecks", #"{"TailNumber":"D-AIBL"}"#, .badRequest,
                    "Property 'ID' is required; add it to the body"
                ),
                (
                    .get, "PreflightChecks(\(Fixtures.id(99)))", nil, .notFound,
                    "No entity at 'PreflightChecks(\(Fixtures.id(99)))'."
                ),
            ]
            for (method, path, body, status, message) in cases {
                let reply = try await client.odata(method, path, token: alice, body: body)
                #expect(reply.status == status, "\(path)")
                #expect(reply.error == message, "\(path)")
            }
            let again = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(3)))
            #expect(again.status == .created)
            let duplicate = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(3)))
            #expect(duplicate.status == .conflict)
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "1")
        }
    }

    @Test(arguments: StorageBackend.allCases) func serverDrivenPagingFollowsNextLinks(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            for n in 1...7 {
                #expect(
                    try await client.odata(
                        .post, "PreflightChecks", token: alice,
                        body: Fixtures.check(Fixtures.id(n), fuel: "\(1000 * n)")
                    ).status == .created)
            }
            var path = "PreflightChecks?$orderby=FuelKg desc&$select=FuelKg&$count=true"
            var fuels: [Double] = []
            var pages = 0
            while true {
                let page = try await client.odata(
                    .get, path, token: alice, headers: [("Prefer", "odata.maxpagesize=3")])
                #expect(page.status == .ok)
                #expect(page.json["@odata.count"] as? Int == 7)
                #expect(page.headers[.preferenceApplied] == "odata.maxpagesize=3")
                fuels += page.values.compactMap { $0["FuelKg"] as? Double }
                pages += 1
                guard let next = page.json["@odata.nextLink"] as? String else { break }
                path = String(next.dropFirst("http://127.0.0.1:8080/odata/".count))
            }
            #expect(pages == 3)
            #expect(fuels == [7000, 6000, 5000, 4000, 3000, 2000, 1000])
            let top = try await client.odata(
                .get, "PreflightChecks?$top=4&$skip=1&$orderby=FuelKg", token: alice,
                headers: [("Prefer", "odata.maxpagesize=3")])
            #expect(top.values.count == 3)
            let rest = try await client.odata(
                .get,
                String((top.json["@odata.nextLink"] as? String ?? "").dropFirst("http://127.0.0.1:8080/odata/".count)),
                token: alice, headers: [("Prefer", "odata.maxpagesize=3")])
            #expect(rest.values.count == 1)
            #expect(rest.json["@odata.nextLink"] == nil)
            #expect(
                try await client.odata(.get, "PreflightChecks?$skiptoken=garbage!", token: alice).status == .badRequest)
        }
    }

    @Test(arguments: StorageBackend.allCases) func oversizedBodiesNameTheLimitOfTheirEndpoint(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let big = String(repeating: " ", count: 2 * 1024 * 1024)
            let data = try await client.odata(.post, "PreflightChecks", token: alice, body: big)
            #expect(data.status == .contentTooLarge)
            #expect(data.error == "The request body is larger than the data service accepts (1024 KiB).")
            let small = String(repeating: " ", count: 100 * 1024)
            #expect(try await client.odata(.post, "PreflightChecks", token: alice, body: small).status == .badRequest)
        }
    }

    @Test(arguments: StorageBackend.allCases) func hostilePagingValuesAreAnsweredNotCrashed(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            _ = try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(1)))
            func token(_ text: String) -> String {
                Data(text.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
            }
            let max = "9223372036854775807"
            let cases: [(String, HTTPResponse.Status)] = [
                ("PreflightChecks?$skip=\(max)&$skiptoken=\(token("5"))", .ok),
                ("PreflightChecks?$skiptoken=\(token(max))", .badRequest),
                ("PreflightChecks?$top=\(max)", .ok),
                ("PreflightChecks?$top=99999999999999999999", .badRequest),
                ("PreflightChecks?$deltatoken=\(max)", .badRequest),
                ("PreflightChecks?$deltatoken=-1", .badRequest),
                (
                    "PreflightChecks?$deltatoken=0&$skiptoken=\(token(String(repeating: "s1:2", count: 50_000)))",
                    .badRequest
                ),
                // Well formed but longer than any token the server writes: refused before it is read.
                (
                    "PreflightChecks?$deltatoken=0&$skiptoken=\(token("s" + String(repeating: "0", count: 20_000) + "1:1"))",
                    .badRequest
                ),
                ("PreflightChecks?$filter=FuelKg add \(max) gt 1", .ok),
            ]
            for (path, status) in cases {
                #expect(try await client.odata(.get, path, token: alice).status == status, "\(path)")
            }
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "1")
        }
    }

    /// A read whose expression PostgreSQL cannot evaluate (SQLSTATE class 22: an overflow, a substring bound out
    /// of range) is the client's fault: 400 `ExpressionNotEvaluable`, naming no value, alone or in a `$batch`
    /// whose next read still answers; SQLite evaluates the same reads. A NUL in a literal, a key or `$search` is
    /// refused by the parser on both engines alike.
    @Test(arguments: StorageBackend.allCases) func dataErrorsOfAReadAreTheClientsFaultAndNameNoValue(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let check = Fixtures.check(Fixtures.id(1), extra: #","Remarks":"tyre ok""#)
            #expect(try await client.odata(.post, "PreflightChecks", token: alice, body: check).status == .created)
            let max = "9223372036854775807"
            // Pages and a key read (one statement, replayed), a page with its count (a read transaction).
            let unevaluable = [
                "PreflightChecks?$filter=FuelKg mul 1e308 mul 1e308 gt 0",
                "PreflightChecks?$filter=substring(Remarks,1,\(max)) eq 'tyre'",
                "PreflightChecks?$filter=length(Remarks) mul \(max) gt 0",
                "PreflightChecks(\(Fixtures.id(1)))?$filter=FuelKg mul 1e308 mul 1e308 gt 0",
                "PreflightChecks?$count=true&$filter=length(Remarks) mul \(max) gt 0",
            ].map { $0.replacingOccurrences(of: " ", with: "%20") }
            for path in unevaluable {
                let reply = try await client.odata(.get, path, token: alice)
                #expect(reply.status.code < 500, "\(path): \(reply.text)")
                if backend == .postgres {
                    #expect(reply.status == .badRequest, "\(path)")
                    let code = (reply.json["error"] as? [String: Any])?["code"] as? String
                    #expect(code == "ExpressionNotEvaluable", "\(path): \(reply.text)")
                }
                if reply.status != .ok {
                    #expect(!reply.text.contains(max) && !reply.text.contains("1e308") && !reply.text.contains("tyre"))
                }
                let batch =
                    #"{"requests":[{"id":"1","method":"GET","url":"\#(path)"},"#
                    + #"{"id":"2","method":"GET","url":"PreflightChecks/$count"}]}"#
                let batched = try await client.odata(.post, "$batch", token: alice, body: batch)
                #expect(batched.status == .ok)
                let answers = batched.json["responses"] as? [[String: Any]] ?? []
                #expect(answers.count == 2 && (answers.first?["status"] as? Int ?? 500) < 500, "\(batched.text)")
                #expect(answers.last?["status"] as? Int == 200, "\(batched.text)")
            }
            for path in [
                "PreflightChecks?$filter=Remarks eq 'tyre%00ok'", "PreflightChecks?$filter=Remarks in ('a','b%00')",
                "Aircraft('D-AI%00BL')", "PreflightChecks?$search=tyre%00ok",
            ] {
                let reply = try await client.odata(.get, path.replacingOccurrences(of: " ", with: "%20"), token: alice)
                #expect(reply.status == .badRequest, "\(path): \(reply.text)")
                #expect(reply.error?.contains("NUL") == true, "\(path): \(reply.text)")
            }
        }
    }

    /// An entity changed again between two pages of a delta (or of a tracked collection) neither shifts the
    /// rest of the pages — nothing is skipped — nor gets lost: it comes with the next delta.
    @Test(arguments: StorageBackend.allCases) func aChangeMadeWhilePagingIsNeitherSkippedNorLost(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            func relative(_ link: String) -> String { String(link.dropFirst("http://127.0.0.1:8080/odata/".count)) }
            let paged = [("Prefer", "odata.maxpagesize=2")]
            let start = try await client.odata(
                .get, "PreflightChecks", token: alice, headers: [("Prefer", "odata.track-changes")])
            let deltaLink = try #require(start.json["@odata.deltaLink"] as? String)
            for n in 1...3 {
                _ = try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(n)))
            }
            let first = try await client.odata(.get, relative(deltaLink), token: alice, headers: paged)
            #expect(first.values.compactMap { $0["ID"] as? String } == [Fixtures.id(1), Fixtures.id(2)])
            let next = try #require(first.json["@odata.nextLink"] as? String)
            _ = try await client.odata(
                .patch, "PreflightChecks(\(Fixtures.id(1)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"Remarks":"again"}"#)
            let second = try await client.odata(.get, relative(next), token: alice, headers: paged)
            #expect(second.values.compactMap { $0["ID"] as? String } == [Fixtures.id(3)])
            let after = try #require(second.json["@odata.deltaLink"] as? String)
            let later = try await client.odata(.get, relative(after), token: alice)
            #expect(later.values.compactMap { $0["ID"] as? String } == [Fixtures.id(1)])
            // A tracked collection read in pages: a change to an entity already paged past reaches the delta.
            let page = try await client.odata(
                .get, "PreflightChecks", token: alice, headers: [("Prefer", "odata.track-changes,odata.maxpagesize=2")])
            let rest = try #require(page.json["@odata.nextLink"] as? String)
            _ = try await client.odata(
                .patch, "PreflightChecks(\(Fixtures.id(2)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"Remarks":"while paging"}"#)
            let last = try await client.odata(.get, relative(rest), token: alice)
            let tracked = try #require(last.json["@odata.deltaLink"] as? String)
            let changes = try await client.odata(.get, relative(tracked), token: alice)
            #expect(changes.values.compactMap { $0["ID"] as? String }.contains(Fixtures.id(2)))
        }
    }

    /// A first read in pages continues after the last entity it served, not at a count of rows: entities served
    /// earlier that are deleted, or leave the filter, between two pages move nothing past the client unseen (an
    /// unchanged entity skipped then would never come with a delta either).
    @Test(arguments: StorageBackend.allCases) func aFirstReadInPagesSkipsNothingWhenEntitiesItServedGo(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            func relative(_ link: String) -> String { String(link.dropFirst("http://127.0.0.1:8080/odata/".count)) }
            func ids(_ reply: ODataReply) -> [String] { reply.values.compactMap { $0["ID"] as? String } }
            for n in 1...6 {
                _ = try await client.odata(
                    .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(n), fuel: "6000"))
            }
            let filter = "PreflightChecks?$filter=FuelKg gt 5001"
            let first = try await client.odata(
                .get, filter, token: alice, headers: [("Prefer", "odata.track-changes,odata.maxpagesize=2")])
            var held = Set(ids(first))
            #expect(held == [Fixtures.id(1), Fixtures.id(2)])
            // Between the pages, the first served is deleted and the second leaves the filter.
            _ = try await client.odata(
                .delete, "PreflightChecks(\(Fixtures.id(1)))", token: alice, headers: [("If-Match", "*")])
            _ = try await client.odata(
                .patch, "PreflightChecks(\(Fixtures.id(2)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"FuelKg":10}"#)
            var next = first.json["@odata.nextLink"] as? String
            var deltaLink: String?
            var served: [String] = []
            while let link = next {
                let page = try await client.odata(.get, relative(link), token: alice)
                #expect(page.status == .ok)
                served += ids(page)
                next = page.json["@odata.nextLink"] as? String
                deltaLink = page.json["@odata.deltaLink"] as? String
            }
            #expect(served == (3...6).map(Fixtures.id))
            held.formUnion(served)
            let delta = try await client.odata(.get, relative(try #require(deltaLink)), token: alice)
            for value in delta.values {
                if value["@removed"] != nil, let id = value["@id"] as? String {
                    held.remove(String(id.dropFirst("PreflightChecks(".count).dropLast()))
                } else if let id = value["ID"] as? String {
                    held.insert(id)
                }
            }
            // The client holds exactly what the filter selects now.
            #expect(held == Set(ids(try await client.odata(.get, filter, token: alice))))
            #expect(held == Set((3...6).map(Fixtures.id)))

            // A position this server did not write (not a key of the set's type) is refused, not run.
            func token(_ text: String) -> String {
                Data(text.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
                    .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            }
            for forged in [#"k2:-:["not a guid"]"#, #"k2:-:[1]"#, #"k2:-:[]"#, #"k2:-:{"#, #"k-1:-:[null]"#, "k2:x:[]"]
            {
                let reply = try await client.odata(.get, "\(filter)&$skiptoken=\(token(forged))", token: alice)
                #expect(reply.status == .badRequest, "\(forged)")
            }
        }
    }

    /// A next link the server wrote is one it follows, whatever the key it carries: a key stored before the model
    /// tightened a facet (here a tail number longer than today's `MaxLength` of 10) is still a position, not a
    /// forged token. Refusing it stopped every first download of the set at that page, for good.
    @Test(arguments: StorageBackend.allCases) func aKeyTheModelNoLongerAllowsStillContinuesAPagedRead(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { server, client, _, sam in
            let long = "A-1234567890AB"
            try await server.server.data.store.storage.write { db in
                _ = try await db.execute(
                    #"UPDATE "Aircraft" SET "TailNumber" = ? WHERE "TailNumber" = ?"#, long, "D-AIBL")
            }
            let second = try await client.odata(
                .post, "Aircraft", token: sam,
                body: #"{"TailNumber":"D-AIBM","Type":"A320","Station":"FRA","Status":"ready"}"#)
            #expect(second.status == .created)
            var next: String? = "Aircraft"
            var served: [String] = []
            while let link = next {
                let page = try await client.odata(
                    .get, link.replacingOccurrences(of: "http://127.0.0.1:8080/odata/", with: ""), token: sam,
                    headers: [("Prefer", "odata.maxpagesize=1")])
                #expect(page.status == .ok, "\(page.json)")
                guard page.status == .ok else { break }
                served += page.values.compactMap { $0["TailNumber"] as? String }
                next = page.json["@odata.nextLink"] as? String
            }
            #expect(served == [long, "D-AIBM"])

            // A key too long to carry in a token continues at the offset; a token that long is refused unread.
            let huge = "A-" + String(repeating: "7", count: 20_000)
            try await server.server.data.store.storage.write { db in
                _ = try await db.execute(#"UPDATE "Aircraft" SET "TailNumber" = ? WHERE "TailNumber" = ?"#, huge, long)
            }
            let first = try await client.odata(
                .get, "Aircraft", token: sam, headers: [("Prefer", "odata.maxpagesize=1")])
            #expect(first.values.first?["TailNumber"] as? String == huge)
            let link = try #require(first.json["@odata.nextLink"] as? String)
            #expect(link.count < 200, "\(link.count)")
            let rest = try await client.odata(
                .get, link.replacingOccurrences(of: "http://127.0.0.1:8080/odata/", with: ""), token: sam)
            #expect(rest.values.compactMap { $0["TailNumber"] as? String } == ["D-AIBM"])
            let forged = Data(("k1:-:[" + String(repeating: "0,", count: 200_000) + "0]").utf8).base64EncodedString()
                .replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_")
            let refused = try await client.odata(.get, "Aircraft?$skiptoken=\(forged)", token: sam)
            #expect(refused.status == .badRequest)
            // A well-formed position past the cap is refused too, though a key of that type would read.
            let longPosition = base64URL(Data(("k1:-:[\"" + String(repeating: "A", count: 9_000) + "\"]").utf8))
            let tooLong = try await client.odata(.get, "Aircraft?$skiptoken=\(longPosition)", token: sam)
            #expect(tooLong.status == .badRequest, "\(tooLong.json)")
        }
    }

    /// A model with an enumeration type: values are member names, stored and filtered as text; a name that is not
    /// a member is refused naming the property; `$metadata` declares the type.
    @Test(arguments: StorageBackend.allCases) func enumerationPropertiesTakeMemberNamesOnly(backend: StorageBackend)
        async throws
    {
        let model = try ServiceModel(
            csdlJSON: """
                {"$Version": "4.01", "$EntityContainer": "N.C", "N": {
                  "Shade": {"$Kind": "EnumType", "Light": 0, "Dark": 1},
                  "Note": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {"$Type": "Edm.Int32"},
                    "Tone": {"$Type": "N.Shade", "$DefaultValue": "Dark"}},
                  "C": {"$Kind": "EntityContainer", "Notes": {"$Collection": true, "$Type": "N.Note"}}}}
                """)
        try await Fixtures.supervisor(on: model, backend: backend) { _, client, sam in
            #expect(
                try await client.odata(.post, "Notes", token: sam, body: #"{"ID":1,"Tone":"Light"}"#).status == .created
            )
            #expect(try await client.odata(.post, "Notes", token: sam, body: #"{"ID":2}"#).status == .created)
            let refused = try await client.odata(.post, "Notes", token: sam, body: #"{"ID":3,"Tone":"Purple"}"#)
            #expect(refused.status == .badRequest)
            #expect(
                refused.error
                    == "Property 'Tone' expects a member of N.Shade (Light, Dark) by name, but the payload has a string"
            )
            #expect(refused.errorTarget == "Tone")
            let dark = try await client.odata(.get, "Notes?$filter=Tone eq 'Dark'", token: sam)
            #expect(dark.values.compactMap { $0["ID"] as? Int } == [2])
            let metadata = try await client.odata(.get, "$metadata", token: sam)
            #expect(metadata.text.contains(#"<EnumType Name="Shade" UnderlyingType="Edm.Int32">"#))
        }
    }

    /// A key must fit a skip token and a URL: one longer than that could only be paged by offset, which skips
    /// an entity when an earlier one goes (and a tablet that then starts over sweeps its copy away). So a create
    /// whose key is that long is refused, in a model whose key has no MaxLength.
    @Test func aKeyTooLongToPageByIsRefusedOnCreate() async throws {
        let model = try ServiceModel(
            csdlJSON: """
                {"$Version": "4.01", "$EntityContainer": "N.C", "N": {
                  "Note": {"$Kind": "EntityType", "$Key": ["Name"], "Name": {}, "Text": {"$Nullable": true}},
                  "C": {"$Kind": "EntityContainer", "Notes": {"$Collection": true, "$Type": "N.Note"}}}}
                """)
        try await Fixtures.supervisor(on: model) { _, client, alice in
            let fits = String(repeating: "n", count: 2_000)
            #expect(
                try await client.odata(.post, "Notes", token: alice, body: #"{"Name":"\#(fits)"}"#).status == .created)
            // Control characters are written as \u00XX in a token: six bytes each.
            for long in [String(repeating: "n", count: 5_000), String(repeating: "\\u0001", count: 1_000)] {
                let refused = try await client.odata(.post, "Notes", token: alice, body: #"{"Name":"\#(long)"}"#)
                #expect(refused.status == .badRequest, "\(refused.json)")
                #expect(((refused.json["error"] as? [String: Any])?["message"] as? String)?.contains("key") == true)
            }
            #expect(try await client.odata(.get, "Notes", token: alice).values.count == 1)
        }
    }

    /// A delta's removals are not paged, so they are bounded: past `maximumDeltaRemovals` deletions, or changed
    /// entities a filtered delta checks for "left the set", the delta answers 410 and the client reads the
    /// collection again in pages — one request never holds a month of a fleet's changes.
    @Test(arguments: StorageBackend.allCases) func aDeltaWithMoreRemovalsThanItsBoundIsReadAgain(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend) { $0.dataService.maximumDeltaRemovals = 2 }
        defer { server.remove() }
        try await server.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        try await server.test { client in
            func relative(_ link: String) -> String { String(link.dropFirst("http://127.0.0.1:8080/odata/".count)) }
            let sam = try await client.signIn("sam").access
            #expect(try await client.odata(.post, "Aircraft", token: sam, body: Fixtures.aircraft).status == .created)
            for n in 1...5 {
                _ = try await client.odata(
                    .post, "PreflightChecks", token: sam, body: Fixtures.check(Fixtures.id(n), fuel: "6000"))
            }
            func track(_ query: String) async throws -> String {
                let read = try await client.odata(.get, query, token: sam, headers: [("Prefer", "odata.track-changes")])
                return relative(try #require(read.json["@odata.deltaLink"] as? String))
            }
            func leave(_ n: Int) async throws {
                _ = try await client.odata(
                    .patch, "PreflightChecks(\(Fixtures.id(n)))", token: sam, headers: [("If-Match", "*")],
                    body: #"{"FuelKg":10}"#)
            }
            // Two changed entities to check: within the bound.
            var filtered = try await track("PreflightChecks?$filter=FuelKg gt 5001")
            try await leave(1)
            try await leave(2)
            let within = try await client.odata(.get, filtered, token: sam)
            #expect(within.status == .ok && within.values.filter { $0["@removed"] != nil }.count == 2)
            // Three: past it.
            filtered = try await track("PreflightChecks?$filter=FuelKg gt 5001")
            try await leave(3)
            try await leave(4)
            try await leave(5)
            let past = try await client.odata(.get, filtered, token: sam)
            #expect(past.status == .gone, "\(past.json)")
            // Deletions the same, filtered or not.
            let all = try await track("PreflightChecks")
            for n in 1...3 {
                _ = try await client.odata(
                    .delete, "PreflightChecks(\(Fixtures.id(n)))", token: sam, headers: [("If-Match", "*")])
            }
            #expect(try await client.odata(.get, all, token: sam).status == .gone)
            // Reading again in pages works, whatever changed.
            let again = try await client.odata(
                .get, "PreflightChecks", token: sam, headers: [("Prefer", "odata.track-changes,odata.maxpagesize=1")])
            #expect(again.status == .ok && again.values.count == 1)
            // Followed to its end, the read brings what is left, and a delta link to go on from.
            var served = again.values.compactMap { $0["ID"] as? String }
            var page = again
            while let next = page.json["@odata.nextLink"] as? String {
                page = try await client.odata(.get, relative(next), token: sam)
                #expect(page.status == .ok)
                served += page.values.compactMap { $0["ID"] as? String }
            }
            #expect(served == [Fixtures.id(4), Fixtures.id(5)])
            #expect(page.json["@odata.deltaLink"] is String)
        }
    }

    @Test(arguments: StorageBackend.allCases) func deltaLinksReportChangesDeletionsAndEntitiesThatLeftTheFilter(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { server, client, alice, _ in
            for n in 1...3 {
                _ = try await client.odata(
                    .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(n), fuel: "\(5000 + n)"))
            }
            let initial = try await client.odata(
                .get, "PreflightChecks?$filter=FuelKg gt 5001", token: alice,
                headers: [("Prefer", "odata.track-changes")])
            #expect(initial.values.count == 2)
            #expect(initial.headers[.preferenceApplied] == "odata.track-changes")
            let deltaLink = try #require(initial.json["@odata.deltaLink"] as? String)
            // Change one so it leaves the filter, change one in place, delete one, add one.
            _ = try await client.odata(
                .patch, "PreflightChecks(\(Fixtures.id(2)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"FuelKg":10}"#)
            _ = try await client.odata(
                .patch, "PreflightChecks(\(Fixtures.id(3)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"Remarks":"rechecked"}"#)
            _ = try await client.odata(
                .delete, "PreflightChecks(\(Fixtures.id(1)))", token: alice, headers: [("If-Match", "*")])
            _ = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(4), fuel: "9000"))
            let delta = try await client.odata(
                .get, String(deltaLink.dropFirst("http://127.0.0.1:8080/odata/".count)), token: alice)
            #expect(delta.status == .ok)
            let changedIDs = Set(delta.values.compactMap { $0["ID"] as? String })
            #expect(changedIDs == [Fixtures.id(3), Fixtures.id(4)])
            let removed = delta.values.filter { $0["@removed"] != nil }
            let reasons = Dictionary(
                uniqueKeysWithValues: removed.map {
                    ($0["@id"] as? String ?? "", ($0["@removed"] as? [String: Any])?["reason"] as? String ?? "")
                })
            #expect(reasons["PreflightChecks(\(Fixtures.id(2)))"] == "changed")
            #expect(reasons["PreflightChecks(\(Fixtures.id(1)))"] == "deleted")
            let nextDelta = try #require(delta.json["@odata.deltaLink"] as? String)
            let quiet = try await client.odata(
                .get, String(nextDelta.dropFirst("http://127.0.0.1:8080/odata/".count)), token: alice)
            #expect(quiet.values.isEmpty)
            // 4.0 clients get the 4.0 shape of removed entries.
            let old = try await client.odata(
                .get, String(deltaLink.dropFirst("http://127.0.0.1:8080/odata/".count)), token: alice,
                headers: [("OData-MaxVersion", "4.0")])
            #expect(old.headers[.odataVersionForTests] == "4.0")
            #expect(
                old.values.contains {
                    ($0["@odata.context"] as? String)?.hasSuffix("#PreflightChecks/$deletedEntity") == true
                })
            // Tokens older than the retention window are gone.
            server.clock.advance(by: 31 * 86_400)
            _ = try await client.signIn("alice")
            let fresh = try await client.signIn("alice").access
            _ = try await client.odata(
                .delete, "PreflightChecks(\(Fixtures.id(3)))", token: fresh, headers: [("If-Match", "*")])
            _ = try await client.odata(
                .delete, "PreflightChecks(\(Fixtures.id(4)))", token: fresh, headers: [("If-Match", "*")])
            let expired = try await client.odata(
                .get, String(deltaLink.dropFirst("http://127.0.0.1:8080/odata/".count)), token: fresh)
            #expect(expired.status == .gone)
        }
    }

    /// A filtered delta says "left the set" to a device only for the entities it can hold: those created up to
    /// its token (or served on a later page of its first read) and those it created itself. Another device's new
    /// entity that never matched costs it nothing; one created with no device known is said to everyone. An
    /// entity deleted and created again within the range comes deleted, then written.
    @Test(arguments: StorageBackend.allCases) func aFilteredDeltaSaysWhatLeftTheSetOnlyToTheDevicesThatHoldIt(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, sam in
            func relative(_ link: String) -> String { String(link.dropFirst("http://127.0.0.1:8080/odata/".count)) }
            #expect(try await OnBehalfTests.register(client, alice, device: "tablet-1", key: .init()) == .ok)
            #expect(try await OnBehalfTests.register(client, sam, device: "tablet-2", key: .init()) == .ok)
            let one = [("Baton-Device", "tablet-1")]
            let two = [("Baton-Device", "tablet-2")]
            let filter = "PreflightChecks?$filter=FuelKg gt 5001"
            for n in [1, 5] {
                _ = try await client.odata(
                    .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(n), fuel: "6000"))
            }
            let initial = try await client.odata(
                .get, filter, token: alice, headers: one + [("Prefer", "odata.track-changes")])
            #expect(initial.values.count == 2)
            let token = relative(try #require(initial.json["@odata.deltaLink"] as? String))
            // Check 1 leaves the filter; 2 never matched (tablet-2's); 3 is tablet-1's own, outside the filter;
            // 4 was created with no device named; 5 is deleted and created again.
            _ = try await client.odata(
                .patch, "PreflightChecks(\(Fixtures.id(1)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"FuelKg":10}"#)
            _ = try await client.odata(
                .post, "PreflightChecks", token: sam, headers: two, body: Fixtures.check(Fixtures.id(2), fuel: "10"))
            _ = try await client.odata(
                .post, "PreflightChecks", token: alice, headers: one, body: Fixtures.check(Fixtures.id(3), fuel: "10"))
            _ = try await client.odata(
                .post, "PreflightChecks", token: sam, body: Fixtures.check(Fixtures.id(4), fuel: "10"))
            _ = try await client.odata(
                .delete, "PreflightChecks(\(Fixtures.id(5)))", token: alice, headers: [("If-Match", "*")])
            _ = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(5), fuel: "7000"))
            func removed(_ reply: ODataReply) -> [String] {
                reply.values.compactMap { $0["@removed"] != nil ? $0["@id"] as? String : nil }
            }
            let key = { (n: Int) in "PreflightChecks(\(Fixtures.id(n)))" }
            let delta = try await client.odata(.get, token, token: alice, headers: one)
            #expect(delta.status == .ok)
            #expect(Set(removed(delta)) == [key(1), key(3), key(4), key(5)])
            #expect(delta.values.compactMap { $0["ID"] as? String } == [Fixtures.id(5)])
            let tombstone = delta.values.firstIndex { $0["@id"] as? String == key(5) }
            let written = delta.values.firstIndex { $0["ID"] as? String == Fixtures.id(5) }
            #expect(tombstone != nil && written != nil && tombstone! < written!)
            // A client that does not name its device may hold anything: it hears of every entity that left.
            let anonymous = try await client.odata(.get, token, token: alice)
            #expect(Set(removed(anonymous)) == [key(1), key(2), key(3), key(4), key(5)])
            // Nor does one naming a device its user is not registered on.
            let claimed = try await client.odata(.get, token, token: alice, headers: two)
            #expect(Set(removed(claimed)) == [key(1), key(2), key(3), key(4), key(5)])

            // A first read in pages: an entity created between two pages comes on the later one, so the client holds
            // it although it is newer than the read's snapshot; when it leaves the filter, the client hears of it.
            _ = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(7), fuel: "9000"))
            let paged = try await client.odata(
                .get, filter, token: sam, headers: two + [("Prefer", "odata.track-changes,odata.maxpagesize=1")])
            #expect(paged.values.compactMap { $0["ID"] as? String } == [Fixtures.id(5)])
            _ = try await client.odata(
                .post, "PreflightChecks", token: alice, headers: one, body: Fixtures.check(Fixtures.id(6), fuel: "8000")
            )
            var next = paged.json["@odata.nextLink"] as? String
            var tracked: String?
            var served: [String] = []
            while let link = next {
                let page = try await client.odata(.get, relative(link), token: sam, headers: two)
                served += page.values.compactMap { $0["ID"] as? String }
                next = page.json["@odata.nextLink"] as? String
                tracked = page.json["@odata.deltaLink"] as? String
            }
            #expect(served == [Fixtures.id(6), Fixtures.id(7)])
            let held = relative(try #require(tracked))
            _ = try await client.odata(
                .patch, "PreflightChecks(\(Fixtures.id(6)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"FuelKg":20}"#)
            #expect(removed(try await client.odata(.get, held, token: sam, headers: two)) == [key(6)])

            // A delta page's skip token whose watermark is another engine's, from before its delta token, or from the
            // future: refused, not run (a snapshot condition on SQLite was a 500).
            for skip in ["s0:x1-2", "s0:99999999", "s0:0", "s0:x99999999-99999999"] {
                let token = Data(skip.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                    .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
                let reply = try await client.odata(.get, held + "&$skiptoken=\(token)", token: sam, headers: two)
                #expect(reply.status == .badRequest, "\(skip): \(reply.text)")
            }

            // Tokens this server did not issue.
            // On PostgreSQL a token carries a snapshot (`x<xmin>-<xmax>-<in progress>`): one that is not a snapshot
            // PostgreSQL could have taken, or one from the future, is refused as well, before it reaches SQL.
            let snapshots = [
                "x5-3", "x1-9-9_3", "x3-9-1", "x3-9-4_4", "x-1-2", "x1-2-3-4", "x99999999999999999999-1", "x1-2-",
                "x1-99999999999999", "x1-2.x1-99999999999999",
                // A combining mark after the `x` or a digit (percent-encoded in the URL).
                "x%CC%811-2", "1%CC%81", "x1-2%CC%81",
                "x1-2-\(Array(repeating: "1", count: 1_001).joined(separator: "_"))",
            ]
            for bad in ["1.1", "2.1", "1.", ".1", "1.2.3", "1.x", "1.99999"] + snapshots {
                let reply = try await client.odata(.get, "PreflightChecks?$deltatoken=\(bad)", token: alice)
                #expect(reply.status == .badRequest, "\(bad)")
            }
        }
    }

    @Test(arguments: StorageBackend.allCases) func rowsWrittenDirectlyMatchTheGeneralPath(backend: StorageBackend)
        async throws
    {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            let body = Fixtures.check(
                Fixtures.id(1), fuel: "-0.5",
                extra: #","Remarks":"quote \" back\\slash \u0001 ünï","FlightNumber":null"#)
            #expect(try await client.odata(.post, "PreflightChecks", token: alice, body: body).status == .created)
            // A key read and a page take the direct path; $expand takes the general one.
            let direct = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(1)))", token: alice)
            let page = try await client.odata(.get, "PreflightChecks", token: alice)
            let general = try await client.odata(.get, "Aircraft('D-AIBL')?$expand=Checks", token: alice)
            func members(_ text: String) -> String {
                // The check object, from its etag to the end of the object, as text.
                guard let start = text.range(of: #""@odata.etag""#, options: .backwards)?.lowerBound,
                    let end = text[start...].firstIndex(of: "}")
                else { return "" }
                return String(text[start...end])
            }
            let generalCheck = members(String(general.text.dropLast(2)))
            #expect(!generalCheck.isEmpty)
            #expect(members(direct.text) == generalCheck)
            #expect(members(page.text) == generalCheck)
            #expect(direct.json["Remarks"] as? String == "quote \" back\\slash \u{1} ünï")
            #expect(direct.text.contains(#""FuelKg":-0.5"#))
        }
    }

    /// An entity addressed by a key after a navigation is the parent's only: another aircraft's check is not found
    /// through this one, read or changed (a key after a navigation keeps the navigation's conditions; only
    /// `Set(key)` alone reads by key).
    @Test(arguments: StorageBackend.allCases) func aKeyAfterANavigationFindsOnlyTheParentsEntity(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, sam in
            let other = Fixtures.aircraft.replacingOccurrences(of: "D-AIBL", with: "D-AIBX")
            #expect(try await client.odata(.post, "Aircraft", token: sam, body: other).status == .created)
            let mine = Fixtures.id(1)
            let theirs = Fixtures.id(2)
            #expect(
                try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(mine)).status
                    == .created)
            #expect(
                try await client.odata(
                    .post, "PreflightChecks", token: alice, body: Fixtures.check(theirs, tail: "D-AIBX")
                ).status == .created)
            #expect(try await client.odata(.get, "Aircraft('D-AIBL')/Checks(\(mine))", token: alice).status == .ok)
            for path in ["Aircraft('D-AIBL')/Checks(\(theirs))", "Aircraft('D-AIBL')/Checks/\(theirs)"] {
                #expect(try await client.odata(.get, path, token: alice).status == .notFound, "\(path)")
                let changed = try await client.odata(
                    .patch, path, token: alice, headers: [("If-Match", "*")], body: #"{"Remarks":"not yours"}"#)
                #expect(changed.status == .notFound, "\(path)")
            }
            let unchanged = try await client.odata(.get, "PreflightChecks(\(theirs))", token: alice)
            #expect(unchanged.status == .ok)
            #expect(unchanged.json["Remarks"] is NSNull || unchanged.json["Remarks"] == nil)
        }
    }

    @Test(arguments: StorageBackend.allCases) func expandSelectAndNavigation(backend: StorageBackend) async throws {
        try await Fixtures.world(backend: backend) { _, client, alice, _ in
            _ = try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(1)))
            let expanded = try await client.odata(
                .get, "Aircraft('D-AIBL')?$expand=Checks($select=FuelKg)", token: alice)
            let checks = expanded.json["Checks"] as? [[String: Any]]
            #expect(checks?.count == 1)
            #expect(checks?.first?["FuelKg"] as? Double == 5200.5)
            #expect(checks?.first?["ID"] as? String == Fixtures.id(1))  // keys always come along
            let navigation = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(1)))/Aircraft", token: alice)
            #expect(navigation.json["Station"] as? String == "FRA")
            let deep = try await client.odata(
                .get, "Aircraft?$expand=Checks($expand=Aircraft($expand=Checks($expand=Aircraft)))", token: alice)
            #expect(deep.status == .badRequest)
            #expect(deep.error == "$expand nests deeper than 3 levels.")
        }
    }
}

extension HTTPField.Name {
    static let preferenceApplied = HTTPField.Name("Preference-Applied") ?? .accept
    static let odataVersionForTests = HTTPField.Name("OData-Version") ?? .accept
}

/// Next and delta links replace their token options by byte: a combining mark after an `&` neither joins the
/// option after it to the token (which dropped it) nor hides a token option spelled in another case or
/// percent-encoded.
@Suite struct QueryOptionReplacementTests {
    func replaced(_ url: String) -> String {
        DataService.replacingQueryOption(in: url, names: ["skiptoken", "deltatoken"], with: ("$skiptoken", "new"))
    }

    @Test func tokenOptionsAreReplacedByByte() {
        #expect(replaced("PreflightChecks") == "PreflightChecks?$skiptoken=new")
        #expect(replaced("PreflightChecks?$top=5") == "PreflightChecks?$top=5&$skiptoken=new")
        #expect(
            replaced("PreflightChecks?$top=5&$SkipToken=old&%24deltatoken=d&x=%24skiptoken")
                == "PreflightChecks?$top=5&x=%24skiptoken&$skiptoken=new")
        // By Character, `&\u{301}` was no separator, and the option after it went with the token.
        #expect(replaced("A?$skiptoken=old&\u{301}x=1") == "A?\u{301}x=1&$skiptoken=new")
        // A name that only lower-cases to a token's under Unicode rules is not one.
        #expect(replaced("A?$s\u{212A}iptoken=1") == "A?$s\u{212A}iptoken=1&$skiptoken=new")
        #expect(replaced("A?é=1&&$skiptoken=") == "A?é=1&$skiptoken=new")
        // A fragment is dropped, as the parser drops it: a token after it would be lost.
        #expect(replaced("A?$top=5#x") == "A?$top=5&$skiptoken=new")
        // An option with an empty name is kept, as the parser keeps it (a custom option): split omitting empty
        // pieces, its value was taken for its name, and `=skiptoken` went.
        #expect(replaced("A?=skiptoken&==deltatoken") == "A?=skiptoken&==deltatoken&$skiptoken=new")
    }

    /// The link as the earlier implementation built it (split into pieces, each name made a string), but with a name
    /// read as the parser reads it, all before the first `=`: the one-pass writer must give the same text for every
    /// URL.
    func reference(_ url: String, names: Set<String>, option: (String, String)) -> String {
        let whole = Array(url.utf8)
        let bytes = whole.firstIndex(of: UInt8(ascii: "#")).map { Array(whole[..<$0]) } ?? whole
        let question = bytes.firstIndex(of: UInt8(ascii: "?"))
        var items = question.map { bytes[($0 + 1)...].split(separator: UInt8(ascii: "&")) } ?? []
        let wanted = names.map { Array($0.utf8) }
        items.removeAll { item in
            var name = item[..<(item.firstIndex(of: UInt8(ascii: "=")) ?? item.endIndex)]
            if name.contains(UInt8(ascii: "%")) {
                name = ArraySlice((String(decoding: name, as: UTF8.self).removingPercentEncoding ?? "").utf8)
            }
            if name.first == UInt8(ascii: "$") { name = name.dropFirst() }
            let folded = String(decoding: name.map(HeaderScanner.asciiLowercased), as: UTF8.self)
            return wanted.contains { $0.elementsEqual(folded.utf8) }
        }
        let path = String(decoding: bytes[..<(question ?? bytes.endIndex)], as: UTF8.self)
        return path + "?"
            + (items.map { String(decoding: $0, as: UTF8.self) } + ["\(option.0)=\(option.1)"]).joined(separator: "&")
    }

    /// Whatever query the parser accepts, the link it gets reads back through the parser with the server's token
    /// and no other: no spelling of a token option survives the replacement.
    @Test func aLinkCarriesTheServersTokenAloneWhateverTheQuery() throws {
        let model = try ServiceModel.aircraftChecks
        let pieces = [
            "&", "=", "$", "%24", "skiptoken", "SkipToken", "deltatoken", "%73kiptoken", "%64eltatoken", "$top=5",
            "x=1",
            "\u{301}", "\u{212A}", "+", "%2B", "#", "old", "$$", "%2524skiptoken",
        ]
        var generator = SystemRandomNumberGenerator()
        var parsed = 0
        for _ in 0..<5_000 {
            let query = (0..<Int.random(in: 0...8, using: &generator)).map { _ in
                pieces.randomElement(using: &generator) ?? ""
            }.joined()
            guard (try? ODataURL(parsing: "PreflightChecks?" + query, model: model)) != nil else { continue }
            parsed += 1
            let link = DataService.replacingQueryOption(
                in: "PreflightChecks?" + query, names: ["skiptoken", "deltatoken"], with: ("$skiptoken", "new"))
            let url = try ODataURL(parsing: link, model: model)
            #expect(url.query.skipToken == "new", "\(query) → \(link)")
            #expect(url.query.deltaToken == nil, "\(query) → \(link)")
        }
        #expect(parsed > 500)
    }

    @Test func theOnePassLinkIsTheSplitOnesForRandomURLs() {
        let pieces = [
            "A", "?", "&", "=", "#", "$", "%24", "%", "%2", "skiptoken", "SkipToken", "deltatoken", "DELTATOKEN", "top",
            "5", "\u{301}", "é", "\u{212A}", "x", "==", "&&", "??", "%26", "%3D", "+", "%73", "%2a", "%FF", "%00", "$$",
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let url = (0..<Int.random(in: 0...14, using: &generator)).map { _ in
                pieces.randomElement(using: &generator) ?? ""
            }.joined()
            for names: Set<String> in [["skiptoken"], ["skiptoken", "deltatoken"]] {
                let option = ("$deltatoken", "t")
                #expect(
                    DataService.replacingQueryOption(in: url, names: names, with: option)
                        == reference(url, names: names, option: option), "\(Array(url.unicodeScalars))")
            }
        }
    }
}
