import BatonOData
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import BatonServer

/// Photos as OData media entities over real HTTP on both engines: created by POSTing their bytes, read and
/// replaced at `$value`, their location removed, refused for every kind of bad input with nothing changed.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct MediaTests {
    static let checkID = Fixtures.id(1)

    /// A server with alice and bob (ground staff) and sam (supervisor), one aircraft and one check of alice's.
    static func world(
        backend: StorageBackend,
        configure: @escaping @Sendable (inout BatonServerConfiguration) -> Void = { _ in },
        _ body:
            @Sendable (TestServer, any TestClientProtocol, _ alice: String, _ bob: String, _ sam: String)
            async throws -> Void
    ) async throws {
        let server = try await TestServer(backend: backend, configure: configure)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.addUser("bob")
        try await server.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        try await server.server.application().test(.live) { client in
            let alice = try await client.signIn("alice").access
            let bob = try await client.signIn("bob").access
            let sam = try await client.signIn("sam").access
            #expect(try await client.odata(.post, "Aircraft", token: sam, body: Fixtures.aircraft).status == .created)
            let check = try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(checkID))
            #expect(check.status == .created)
            try await body(server, client, alice, bob, sam)
        }
    }

    static func slug(id: String, caption: String = "main tyre, cut on the sidewall") -> String {
        let json = #"{"ID":"\#(id)","CheckID":"\#(checkID)","TakenAt":"2026-11-27T05:10:00Z","Caption":"\#(caption)"}"#
        return json.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    }

    /// The photo's scrubbed bytes and their SHA-256: what the server must hold.
    static func expected(_ image: [UInt8]) throws -> (bytes: [UInt8], sha256: String) {
        var bytes = image
        _ = try ImageHead.scrubLocation(&bytes, isWhole: true)
        return (bytes, SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
    }

    @Test(arguments: StorageBackend.allCases) func aPhotoIsCreatedReadReplacedAndDeleted(backend: StorageBackend)
        async throws
    {
        try await Self.world(backend: backend) { server, client, alice, bob, sam in
            let id = Fixtures.id(100)
            let jpeg = ImageFixtures.jpeg()
            let (stored, sha256) = try Self.expected(jpeg)
            let created = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: jpeg,
                headers: [("Slug", Self.slug(id: id))])
            #expect(created.status == .created, "\(created.text)")
            #expect(created.json["TakenBy"] as? String == "alice")
            #expect(created.json["UploadedBy"] as? String == "alice")
            #expect(created.json["SHA256"] as? String == sha256)
            #expect(created.json["Size"] as? Int == jpeg.count)
            #expect(created.json["ContentType"] as? String == "image/jpeg")
            #expect(created.json["CheckID"] as? String == Self.checkID)
            #expect(created.json["@odata.mediaReadLink"] as? String == "CheckPhotos(\(id))/$value")
            #expect(created.json["@odata.mediaEditLink"] as? String == "CheckPhotos(\(id))/$value")
            #expect(created.json["@odata.mediaContentType"] as? String == "image/jpeg")
            #expect(created.json["@odata.mediaEtag"] as? String == "\"\(sha256)\"")

            // Read back: the bytes without their location, never sniffed, inline under the entity's name.
            let read = try await client.media(.get, "CheckPhotos(\(id))/$value", token: bob)
            #expect(read.status == .ok)
            #expect(read.bytes == stored)
            #expect(!ImageFixtures.contains(read.bytes, ImageFixtures.locationBytes))
            #expect(read.headers[.contentType] == "image/jpeg")
            #expect(read.headers[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
            #expect(
                read.headers[HTTPField.Name("Content-Disposition")!]?.hasPrefix("inline; filename=\"CheckPhotos")
                    == true)
            #expect(read.headers[.eTag] == "\"\(sha256)\"")
            let unchanged = try await client.media(
                .get, "CheckPhotos(\(id))/$value", token: bob, headers: [("If-None-Match", "\"\(sha256)\"")])
            #expect(unchanged.status == .notModified)

            // The photo is listed with its check's photos, annotated.
            let listed = try await client.odata(.get, "PreflightChecks(\(Self.checkID))/Photos", token: sam)
            let photos = listed.json["value"] as? [[String: Any]] ?? []
            #expect(photos.count == 1)
            #expect(photos.first?["@odata.mediaEtag"] as? String == "\"\(sha256)\"")
            #expect(photos.first?["@odata.mediaReadLink"] as? String == "CheckPhotos(\(id))/$value")

            // Bob may not replace alice's photo; nothing changes.
            let etag = try #require(created.headers[.eTag])
            let png = ImageFixtures.png()
            let bobs = try await client.media(
                .put, "CheckPhotos(\(id))/$value", token: bob, contentType: "image/png", body: png,
                headers: [("If-Match", etag)])
            #expect(bobs.status == .forbidden)
            #expect(bobs.json.error == "NotTheAuthor")
            #expect(try await client.media(.get, "CheckPhotos(\(id))/$value", token: sam).bytes == stored)

            // Alice replaces it with If-Match; a stale ETag is refused.
            let (newBytes, newSHA) = try Self.expected(png)
            let replaced = try await client.media(
                .put, "CheckPhotos(\(id))/$value", token: alice, contentType: "image/png", body: png,
                headers: [("If-Match", etag)])
            #expect(replaced.status == .noContent, "\(replaced.text)")
            let stale = try await client.media(
                .put, "CheckPhotos(\(id))/$value", token: alice, contentType: "image/jpeg", body: jpeg,
                headers: [("If-Match", etag)])
            #expect(stale.status == .preconditionFailed)
            let now = try await client.media(.get, "CheckPhotos(\(id))/$value", token: alice)
            #expect(now.bytes == newBytes)
            #expect(now.headers[.contentType] == "image/png")
            let entity = try await client.odata(.get, "CheckPhotos(\(id))", token: alice)
            #expect(entity.json["SHA256"] as? String == newSHA)
            #expect(entity.json["Size"] as? Int == png.count)

            // Who took it and who uploaded it are in the audit log.
            let entries = try await server.server.audit.entries(limit: 100)
            #expect(
                entries.contains {
                    $0.action == "entity-created" && $0.subject == "CheckPhotos(\(id))" && $0.actor == "alice"
                })

            // Deleted like any entity.
            let current = try #require(entity.headers[.eTag])
            let deleted = try await client.odata(
                .delete, "CheckPhotos(\(id))", token: alice, headers: [("If-Match", current)])
            #expect(deleted.status == .noContent)
            #expect(try await client.media(.get, "CheckPhotos(\(id))/$value", token: alice).status == .notFound)
        }
    }

    /// Each kind of bad input gets a clear error and leaves no photo behind.
    @Test(arguments: StorageBackend.allCases) func badPhotosAreRefusedAndChangeNothing(backend: StorageBackend)
        async throws
    {
        try await Self.world(backend: backend, configure: { $0.dataService.maximumMediaSize = 4096 }) {
            server, client, alice, _, _ in
            let jpeg = ImageFixtures.jpeg()
            let html = Array("<html><body><script>alert(document.cookie)</script></body></html>".utf8)
            let cases: [(String, String, [UInt8], [(String, String)], HTTPResponse.Status, String)] = [
                ("a PNG that is really HTML", "image/png", html, [], .unsupportedMediaType, "NotAnImage"),
                ("a 0-byte file", "image/jpeg", [], [], .badRequest, "BadRequest"),
                (
                    "a file over the cap", "image/jpeg", ImageFixtures.jpeg(scanBytes: 8192), [], .contentTooLarge,
                    "MediaTooLarge"
                ),
                ("a truncated JPEG", "image/jpeg", Array(jpeg.dropLast(10)), [], .badRequest, "BadRequest"),
                ("a JPEG declared as PNG", "image/png", jpeg, [], .unsupportedMediaType, "MediaTypeMismatch"),
                ("HTML declared as HTML", "text/html", html, [], .unsupportedMediaType, "UnsupportedMediaType"),
                ("a Slug that is not JSON", "image/jpeg", jpeg, [("Slug", "not%20json")], .badRequest, "BadRequest"),
                (
                    "a Slug naming no check", "image/jpeg", jpeg,
                    [("Slug", "%7B%22ID%22%3A%22\(Fixtures.id(7))%22%7D")], .badRequest, "InvalidPayload"
                ),
                (
                    "a Slug naming a check that does not exist", "image/jpeg", jpeg,
                    [("Slug", "%7B%22ID%22%3A%22\(Fixtures.id(8))%22%2C%22CheckID%22%3A%22\(Fixtures.id(99))%22%7D")],
                    .badRequest, "BadRequest"
                ),
            ]
            let wrongDigest =
                "sha-256=:" + Data(SHA256.hash(data: Data("another photo".utf8))).base64EncodedString() + ":"
            let rightDigest = "sha-256=:" + Data(SHA256.hash(data: Data(jpeg))).base64EncodedString() + ":"
            let digests: [(String, String, [UInt8], [(String, String)], HTTPResponse.Status, String)] = [
                (
                    "a wrong SHA-256", "image/jpeg", jpeg,
                    [("Slug", Self.slug(id: Fixtures.id(40))), ("Content-Digest", wrongDigest)], .badRequest,
                    "DigestMismatch"
                ),
                (
                    "a digest that is no SHA-256", "image/jpeg", jpeg,
                    [("Slug", Self.slug(id: Fixtures.id(41))), ("Content-Digest", "sha-256=:abc:")], .badRequest,
                    "BadRequest"
                ),
                (
                    "the right SHA-256 of bytes cut on the way", "image/jpeg", Array(jpeg.prefix(jpeg.count - 2)),
                    [("Slug", Self.slug(id: Fixtures.id(42))), ("Content-Digest", rightDigest)], .badRequest,
                    "BadRequest"
                ),
            ]
            for (index, (what, contentType, body, headers, status, code)) in (cases + digests).enumerated() {
                // Bytes are judged with properties that would be accepted.
                let headers = headers.isEmpty ? [("Slug", Self.slug(id: Fixtures.id(50 + index)))] : headers
                let answer = try await client.media(
                    .post, "CheckPhotos", token: alice, contentType: contentType, body: body, headers: headers)
                #expect(answer.status == status, "\(what): \(answer.text)")
                #expect(answer.json.error == code, "\(what): \(answer.text)")
            }
            // JSON to a media entity set: a photo's bytes are expected.
            let json = try await client.odata(
                .post, "CheckPhotos", token: alice,
                body: #"{"ID":"\#(Fixtures.id(9))","CheckID":"\#(Self.checkID)","TakenAt":"2026-11-27T05:10:00Z"}"#)
            #expect(json.status == .unsupportedMediaType)
            #expect(json.json.error == "MediaExpected")
            // $value of an entity that is no media entity.
            let notMedia = try await client.odata(.get, "PreflightChecks(\(Self.checkID))/$value", token: alice)
            #expect(notMedia.status == .badRequest)
            let photos = try await client.odata(.get, "CheckPhotos", token: alice)
            #expect((photos.json["value"] as? [Any])?.isEmpty == true, "\(photos.text)")
            #expect(try await Self.storedBlobs(server) == 0, "a refused photo leaves no bytes behind")
        }
    }

    /// How many blobs the server's media store holds.
    static func storedBlobs(_ server: TestServer) async throws -> Int {
        switch server.backend {
        case .sqlite:
            let media = server.directory.appendingPathComponent("media")
            let shards = (try? FileManager.default.contentsOfDirectory(atPath: media.path)) ?? []
            return shards.filter { $0 != "uploads" }.reduce(0) { count, shard in
                count
                    + ((try? FileManager.default.contentsOfDirectory(
                        atPath: media.appendingPathComponent(shard).path))?.count ?? 0)
            }
        case .postgres:
            let storage = try StorageTests.postgres(server)
            return Int(
                try await storage.readStatement {
                    try await $0.fetchOne(#"SELECT count(*) FROM "$mediaPart""#)?[0].integer ?? 0
                })
        }
    }

    /// Evidence is added to a final check only by its author or a supervisor; a photo stays its taker's.
    @Test(arguments: StorageBackend.allCases) func groundStaffAddPhotosOnlyToChecksTheyMayChange(
        backend: StorageBackend
    ) async throws {
        try await Self.world(backend: backend) { server, client, alice, bob, sam in
            let bobs = try await client.media(
                .post, "CheckPhotos", token: bob, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: Fixtures.id(500)))])
            #expect(bobs.status == .forbidden, "\(bobs.text)")
            #expect(bobs.json.error == "NotTheAuthor")
            #expect(try await Self.storedBlobs(server) == 0, "refused before a byte was stored")
            let sams = try await client.media(
                .post, "CheckPhotos", token: sam, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: Fixtures.id(501)))])
            #expect(sams.status == .created)
            let alices = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/png", body: ImageFixtures.png(),
                headers: [("Slug", Self.slug(id: Fixtures.id(502)))])
            #expect(alices.status == .created)
            // A supervisor's correction leaves alice the one who took it.
            let caption = try await client.odata(
                .patch, "CheckPhotos(\(Fixtures.id(502)))", token: sam,
                headers: [("If-Match", try #require(alices.headers[.eTag])), ("Prefer", "return=representation")],
                body: #"{"Caption":"left main gear"}"#)
            #expect(caption.status == .ok, "\(caption.text)")
            #expect(caption.json["TakenBy"] as? String == "alice")
            #expect(caption.json["UploadedBy"] as? String == "sam")
            // A photo cannot be moved to a check that does not exist.
            let moved = try await client.odata(
                .patch, "CheckPhotos(\(Fixtures.id(502)))", token: alice, headers: [("If-Match", "*")],
                body: #"{"CheckID":"\#(Fixtures.id(77))"}"#)
            #expect(moved.status == .badRequest, "\(moved.text)")
        }
    }

    /// Delta links carry photos like any entity; a `$batch` says what it does not carry (bytes).
    @Test(arguments: StorageBackend.allCases) func deltaLinksCarryPhotosAndABatchRefusesTheirBytes(
        backend: StorageBackend
    ) async throws {
        try await Self.world(backend: backend) { _, client, alice, _, _ in
            let tracked = try await client.odata(
                .get, "CheckPhotos", token: alice, headers: [("Prefer", "odata.track-changes")])
            let link = try #require(tracked.json["@odata.deltaLink"] as? String)
            let id = Fixtures.id(600)
            let created = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: id))])
            #expect(created.status == .created)
            let delta = try await client.odata(.get, String(link.split(separator: "/odata/").last ?? ""), token: alice)
            let changed = delta.json["value"] as? [[String: Any]] ?? []
            #expect(changed.map { $0["ID"] as? String } == [id], "\(delta.text)")
            #expect(changed.first?["@odata.mediaReadLink"] as? String == "CheckPhotos(\(id))/$value")
            let batch =
                #"{"requests":[{"id":"1","method":"GET","url":"CheckPhotos(\#(id))/$value"},{"id":"2","method":"POST","url":"CheckPhotos","headers":{"content-type":"application/json"},"body":{"CheckID":"\#(Self.checkID)"}}]}"#
            let answer = try await client.odata(.post, "$batch", token: alice, body: batch)
            let statuses = (answer.json["responses"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? Int }
            #expect(statuses == [200, 415], "\(answer.text)")
        }
    }

    /// A `$batch` carries photos: created from its bytes (base64url in a JSON batch, as they are in a multipart
    /// one), after the check a request before it created, and read back; never inside an atomicity group, and
    /// refused as a photo sent alone is.
    @Test(arguments: StorageBackend.allCases) func aBatchCarriesPhotos(backend: StorageBackend) async throws {
        try await Self.world(backend: backend) { _, client, alice, _, _ in
            let jpeg = ImageFixtures.jpeg(scanBytes: 5_000)
            let expected = try Self.expected(jpeg)
            let check = Fixtures.id(700)
            let photo = Fixtures.id(701)
            func slug(_ id: String, check: String) -> String {
                #"{"ID":"\#(id)","CheckID":"\#(check)","Caption":"batch"}"#
                    .addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            }
            let json = """
                {"requests":[
                {"id":"c","method":"POST","url":"PreflightChecks","headers":{"content-type":"application/json"},"body":\(Fixtures.check(check))},
                {"id":"p","dependsOn":["c"],"method":"POST","url":"CheckPhotos","headers":{"content-type":"image/jpeg","slug":"\(slug(photo, check: check))"},"body":"\(Data(jpeg).base64URLEncoded)"},
                {"id":"r","dependsOn":["p"],"method":"GET","url":"CheckPhotos(\(photo))/$value"},
                {"id":"h","method":"POST","url":"CheckPhotos","headers":{"content-type":"image/jpeg","slug":"\(slug(Fixtures.id(702), check: check))"},"body":"\(Data("<html>no</html>".utf8).base64URLEncoded)"},
                {"id":"g1","atomicityGroup":"g","method":"POST","url":"CheckPhotos","headers":{"content-type":"image/jpeg","slug":"\(slug(Fixtures.id(703), check: check))"},"body":"\(Data(jpeg).base64URLEncoded)"},
                {"id":"g2","atomicityGroup":"g","method":"PATCH","url":"PreflightChecks(\(check))","headers":{"content-type":"application/json"},"body":{"Remarks":"rolled back"}}
                ]}
                """
            let answer = try await client.odata(.post, "$batch", token: alice, body: json)
            let responses = answer.json["responses"] as? [[String: Any]] ?? []
            let byID = Dictionary(responses.compactMap { r in (r["id"] as? String).map { ($0, r) } }) { a, _ in a }
            #expect(byID["c"]?["status"] as? Int == 201, "\(answer.text)")
            #expect(byID["p"]?["status"] as? Int == 201, "\(answer.text)")
            #expect((byID["p"]?["body"] as? [String: Any])?["SHA256"] as? String == expected.sha256)
            #expect(byID["r"]?["status"] as? Int == 200)
            let read = (byID["r"]?["body"] as? String).flatMap { Data(base64URLEncoded: $0) }
            #expect(read.map(Array.init) == expected.bytes)
            #expect(byID["h"]?["status"] as? Int == 415)
            #expect(byID["g1"]?["status"] as? Int == 400)
            #expect(byID["g2"]?["status"] as? Int == 424)
            let stored = try await client.media(.get, "CheckPhotos(\(photo))/$value", token: alice)
            #expect(stored.bytes == expected.bytes)
            #expect((try await client.odata(.get, "CheckPhotos", token: alice).json["value"] as? [Any])?.count == 1)
            // Replaced at its $value inside a batch, with the entity's ETag.
            let etag = try #require(try await client.odata(.get, "CheckPhotos(\(photo))", token: alice).headers[.eTag])
            let replacement = ImageFixtures.jpeg(scanBytes: 6_000)
            let put = """
                {"requests":[{"id":"v","method":"PUT","url":"CheckPhotos(\(photo))/$value","headers":{"content-type":"image/jpeg","if-match":"\(etag.replacingOccurrences(of: "\"", with: "\\\""))"},"body":"\(Data(replacement).base64URLEncoded)"}]}
                """
            let replaced = try await client.odata(.post, "$batch", token: alice, body: put)
            let status = (replaced.json["responses"] as? [[String: Any]])?.first?["status"] as? Int
            #expect(status == 200 || status == 204, "\(replaced.text)")
            let now = try await client.media(.get, "CheckPhotos(\(photo))/$value", token: alice)
            #expect(now.bytes == (try Self.expected(replacement)).bytes)

            // Multipart: the bytes as they are, both ways.
            let second = Fixtures.id(704)
            var body = Array(
                """
                --b\r
                Content-Type: application/http\r
                Content-ID: 1\r
                \r
                POST CheckPhotos HTTP/1.1\r
                Content-Type: image/jpeg\r
                Slug: \(slug(second, check: check))\r
                \r

                """.utf8)
            body += jpeg
            body += Array(
                """
                \r
                --b\r
                Content-Type: application/http\r
                Content-ID: 2\r
                \r
                GET CheckPhotos(\(second))/$value HTTP/1.1\r
                \r
                \r
                --b--\r

                """.utf8)
            let multipart = try await client.execute(
                uri: "/odata/$batch", method: .post,
                headers: [.authorization: "Bearer \(alice)", .contentType: "multipart/mixed; boundary=b"],
                body: ByteBuffer(bytes: body)
            ) { ($0.headers[.contentType] ?? "", Array(buffer: $0.body)) }
            let parts = try MultipartBatch.decodeResponses(
                multipart.1, boundary: try MultipartBatch.boundary(fromContentType: multipart.0))
            #expect(parts.map(\.status) == [201, 200], "\(String(decoding: multipart.1.prefix(600), as: UTF8.self))")
            #expect(parts.last?.header("Content-Type") == "image/jpeg")
            #expect(
                parts.last?.body?.stringValue.flatMap { Data(base64URLEncoded: $0) }.map(Array.init) == expected.bytes)
            #expect(multipart.1.firstRange(of: expected.bytes) != nil)
        }
    }

    /// Photos read in a `$batch` count their base64 answers, and what came before, against the batch's budget.
    @Test func photosReadInABatchKeepWithinItsAnswerBudget() async throws {
        let jpeg = ImageFixtures.jpeg(scanBytes: 12_000)
        try await Self.world(backend: .sqlite, configure: { $0.dataService.maximumBatchResponseSize = 20_000 }) {
            _, client, alice, _, _ in
            for index in [720, 721] {
                #expect(
                    try await client.media(
                        .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: jpeg,
                        headers: [("Slug", Self.slug(id: Fixtures.id(index)))]
                    ).status == .created)
            }
            let batch =
                #"{"requests":[{"id":"1","method":"GET","url":"CheckPhotos(\#(Fixtures.id(720)))/$value"},{"id":"2","method":"GET","url":"CheckPhotos(\#(Fixtures.id(721)))/$value"}]}"#
            let answer = try await client.odata(.post, "$batch", token: alice, body: batch)
            let statuses = (answer.json["responses"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? Int }
            #expect(statuses == [200, 413], "\(answer.text.prefix(300))")
        }
    }

    /// The photos one person took hold at most their quota (on PostgreSQL the sum was read as no number at all).
    @Test(arguments: StorageBackend.allCases) func aPersonsPhotosKeepWithinTheirQuota(backend: StorageBackend)
        async throws
    {
        let size = Int64(ImageFixtures.jpeg().count)
        try await Self.world(backend: backend, configure: { $0.dataService.mediaQuotaPerUser = size + 10 }) {
            _, client, alice, _, _ in
            let first = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: Fixtures.id(710)))])
            #expect(first.status == .created, "\(first.text)")
            let second = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: Fixtures.id(711)))])
            #expect(second.status == .contentTooLarge, "\(second.text)")
            #expect(second.json.error == "MediaQuotaExceeded")
        }
    }

    /// The photos recorded on one tablet hold at most the device's quota, whoever took them.
    @Test(arguments: StorageBackend.allCases) func aTabletsPhotosKeepWithinItsQuota(backend: StorageBackend)
        async throws
    {
        let size = Int64(ImageFixtures.jpeg().count)
        try await Self.world(backend: backend, configure: { $0.dataService.mediaQuotaPerDevice = size + 10 }) {
            _, client, alice, _, _ in
            let registration = try await client.execute(
                uri: "/devices/tablet-7/registration", method: .put,
                headers: [.authorization: "Bearer \(alice)", .contentType: "application/json"],
                body: ByteBuffer(
                    string: DeviceKeys.body(
                        device: "tablet-7", token: alice,
                        publicKey: P256.Signing.PrivateKey().publicKey.x963Representation.base64EncodedString()))
            ) { $0.status }
            #expect(registration == .ok)
            let first = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: Fixtures.id(700))), ("Baton-Device", "tablet-7")])
            #expect(first.status == .created, "\(first.text)")
            let second = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: Fixtures.id(701))), ("Baton-Device", "tablet-7")])
            #expect(second.status == .contentTooLarge, "\(second.text)")
            #expect(second.json.error == "MediaQuotaExceeded")
            #expect(second.text.contains("tablet-7"))
        }
    }

    /// `Content-Digest` is read by byte: a mark combined with a `,` or `:` neither hides a member's end nor makes
    /// a value.
    @Test func aContentDigestIsReadByByte() {
        let digest = Array(SHA256.hash(data: Data("tyre".utf8)))
        let text = Data(digest).base64EncodedString()
        #expect(ODataRoutes.sha256(contentDigest: "sha-256=:\(text):") == digest)
        #expect(ODataRoutes.sha256(contentDigest: "md5=:AAAA:, SHA-256 = :\(text):") == digest)
        #expect(ODataRoutes.sha256(contentDigest: "md5=:AAAA:,\u{301}sha-256=:\(text):") == nil)
        #expect(ODataRoutes.sha256(contentDigest: "sha-256=:\(text):\u{301}") == nil)
        #expect(ODataRoutes.sha256(contentDigest: "sha-256=:AAAA:") == nil, "not 32 bytes")
    }

    /// A repeated upload (the same Repeatability-Request-ID) applies the photo once.
    @Test(arguments: StorageBackend.allCases) func aRepeatedUploadAppliesThePhotoOnce(backend: StorageBackend)
        async throws
    {
        try await Self.world(backend: backend) { _, client, alice, _, _ in
            let headers = [
                ("Slug", Self.slug(id: Fixtures.id(200))), ("Repeatability-Request-ID", UUID().uuidString.lowercased()),
                ("Repeatability-First-Sent", "Fri, 27 Nov 2026 05:10:00 GMT"),
            ]
            let first = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: headers)
            let again = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: headers)
            #expect(first.status == .created)
            #expect(again.status == .created)
            #expect(again.headers[HTTPField.Name("Repeatability-Result")!] == "accepted")
            let photos = try await client.odata(.get, "CheckPhotos", token: alice)
            #expect((photos.json["value"] as? [Any])?.count == 1)
        }
    }

    /// A photo sent again after it was applied gets its stored answer even when judging it again would refuse it
    /// (the quota is full now: with the photo itself).
    @Test(arguments: StorageBackend.allCases) func aRepeatedUploadIsAnsweredNotJudgedAgain(backend: StorageBackend)
        async throws
    {
        let photo = ImageFixtures.jpeg(scanBytes: 10_000)
        let quota = Int64(photo.count * 3 / 2)
        try await Self.world(backend: backend, configure: { $0.dataService.mediaQuotaPerUser = quota }) {
            _, client, alice, _, _ in
            let headers = [
                ("Slug", Self.slug(id: Fixtures.id(210))), ("Repeatability-Request-ID", "quota-210"),
                ("Repeatability-First-Sent", "Fri, 27 Nov 2026 05:10:00 GMT"),
            ]
            let first = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: photo, headers: headers)
            #expect(first.status == .created)
            let again = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: photo, headers: headers)
            #expect(again.status == .created)
            #expect(again.headers[HTTPField.Name("Repeatability-Result")!] == "accepted")
            // A new photo is refused by the quota.
            let other = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: photo,
                headers: [("Slug", Self.slug(id: Fixtures.id(211)))])
            #expect(other.status == .contentTooLarge)
        }
    }

    /// Bytes no entity names any more (a replaced photo's, a deleted one's) go once they are an hour old; named
    /// ones stay.
    @Test(arguments: StorageBackend.allCases) func unnamedBytesAreSweptAfterTheGraceAndNamedOnesStay(
        backend: StorageBackend
    ) async throws {
        try await Self.world(backend: backend) { server, client, alice, _, _ in
            let id = Fixtures.id(400)
            let created = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", Self.slug(id: id))])
            let replaced = try await client.media(
                .put, "CheckPhotos(\(id))/$value", token: alice, contentType: "image/png", body: ImageFixtures.png(),
                headers: [("If-Match", try #require(created.headers[.eTag]))])
            #expect(replaced.status == .noContent)
            #expect(try await server.server.sweepMedia() == 0, "within the grace, nothing goes")
            server.clock.advance(by: 2 * 3600)
            #expect(try await server.server.sweepMedia() == 1, "the JPEG no entity names")
            // Two hours on, alice's access token has expired: she signs in again.
            let alice = try await client.signIn("alice").access
            let png = try await client.media(.get, "CheckPhotos(\(id))/$value", token: alice)
            #expect(png.status == .ok)
            #expect(png.bytes == (try Self.expected(ImageFixtures.png())).bytes)
            let etag = try #require(try await client.odata(.get, "CheckPhotos(\(id))", token: alice).headers[.eTag])
            #expect(
                try await client.odata(.delete, "CheckPhotos(\(id))", token: alice, headers: [("If-Match", etag)])
                    .status == .noContent)
            server.clock.advance(by: 2 * 3600)
            #expect(try await server.server.sweepMedia() == 1, "the deleted photo's PNG")
            #expect(try await server.server.sweepMedia() == 0)
        }
    }

    /// What a stolen disk or a backup holds of a photo: no location; and bytes changed on disk are caught.
    @Test func storedBytesHoldNoLocationAndDamageIsCaught() async throws {
        try await Self.world(backend: .sqlite) { server, client, alice, _, _ in
            let id = Fixtures.id(300)
            let created = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/png", body: ImageFixtures.png(),
                headers: [("Slug", Self.slug(id: id))])
            let sha256 = try #require(created.json["SHA256"] as? String)
            let file = server.directory.appendingPathComponent("media").appendingPathComponent(String(sha256.prefix(2)))
                .appendingPathComponent(sha256)
            var onDisk = Array(try Data(contentsOf: file))
            #expect(!ImageFixtures.contains(onDisk, ImageFixtures.locationBytes))
            let uploads = server.directory.appendingPathComponent("media/uploads")
            #expect(try FileManager.default.contentsOfDirectory(atPath: uploads.path).isEmpty, "no upload left over")
            onDisk[onDisk.count / 2] ^= 0xFF
            try Data(onDisk).write(to: file)
            let damaged = try await client.media(.get, "CheckPhotos(\(id))/$value", token: alice)
            #expect(damaged.status == .internalServerError)
            #expect(damaged.json.error == "MediaCorrupt")
        }
    }
}

struct MediaReply {
    var status: HTTPResponse.Status
    var headers: HTTPFields
    var bytes: [UInt8]
    var text: String { String(decoding: bytes, as: UTF8.self) }
    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]) ?? [:]
    }
}

extension Dictionary where Key == String, Value == Any {
    /// The OData error code of an error answer.
    var error: String? { (self["error"] as? [String: Any])?["code"] as? String }
}

extension TestClientProtocol {
    /// Sends bytes (or nothing) to the data service and returns the raw answer.
    func media(
        _ method: HTTPRequest.Method, _ path: String, token: String, contentType: String? = nil, body: [UInt8]? = nil,
        headers: [(String, String)] = []
    ) async throws -> MediaReply {
        var fields: HTTPFields = [.authorization: "Bearer \(token)"]
        if let contentType { fields[.contentType] = contentType }
        for (name, value) in headers { if let field = HTTPField.Name(name) { fields[field] = value } }
        return try await execute(
            uri: "/odata/" + path, method: method, headers: fields, body: body.map { ByteBuffer(bytes: $0) }
        ) { MediaReply(status: $0.status, headers: $0.headers, bytes: Array(buffer: $0.body)) }
    }
}
