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

#if canImport(Glibc)
    import Glibc
#endif

/// Resumable photo uploads over real HTTP on both engines: created with `Upload-Complete: ?0`, continued with
/// `PATCH` at the offset the server confirms, a broken connection keeping what arrived, chunks out of order or
/// sent again refused with nothing changed, and the photo written exactly once however often it completes.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ResumableUploadTests {
    /// A photo of several 256 KiB parts.
    static let photo = ImageFixtures.jpeg(scanBytes: 700_000)

    static func digest(_ bytes: [UInt8]) -> String {
        "sha-256=:" + Data(SHA256.hash(data: bytes)).base64EncodedString() + ":"
    }

    /// Creates an upload of `bytes` (none sent yet) and returns the answer and the upload's path under `/odata/`.
    static func create(
        _ client: any TestClientProtocol, token: String, id: String, bytes: [UInt8] = photo,
        requestID: String? = UUID().uuidString.lowercased(), extra: [(String, String)] = []
    ) async throws -> (reply: MediaReply, path: String?) {
        var headers = [
            ("Upload-Complete", "?0"), ("Upload-Length", String(bytes.count)), ("Slug", MediaTests.slug(id: id)),
            ("Content-Digest", digest(bytes)),
        ]
        if let requestID {
            headers += [
                ("Repeatability-Request-ID", requestID), ("Repeatability-First-Sent", "Fri, 27 Nov 2026 05:10:00 GMT"),
            ]
        }
        let reply = try await client.media(
            .post, "CheckPhotos", token: token, contentType: "image/jpeg", body: [], headers: headers + extra)
        let path = reply.headers[.location].flatMap { location in
            location.range(of: "/odata/").map { String(location[$0.upperBound...]) }
        }
        return (reply, path)
    }

    static func patch(
        _ client: any TestClientProtocol, _ path: String, token: String, offset: Int, _ bytes: ArraySlice<UInt8>,
        complete: Bool? = nil
    ) async throws -> MediaReply {
        var headers = [("Upload-Offset", String(offset))]
        if let complete { headers.append(("Upload-Complete", complete ? "?1" : "?0")) }
        return try await client.media(
            .patch, path, token: token, contentType: "application/partial-upload", body: Array(bytes),
            headers: headers)
    }

    static func offset(_ client: any TestClientProtocol, _ path: String, token: String) async throws -> Int? {
        let reply = try await client.media(.head, path, token: token)
        guard reply.status == .noContent else { return nil }
        return reply.headers[.uploadOffset].flatMap { Int($0) }
    }

    static func photoCount(_ client: any TestClientProtocol, token: String) async throws -> Int? {
        (try await client.odata(.get, "CheckPhotos", token: token).json["value"] as? [Any])?.count
    }

    @Test(arguments: StorageBackend.allCases) func aPhotoSentInPiecesIsStoredOnceWhateverIsSentTwice(
        backend: StorageBackend
    ) async throws {
        try await MediaTests.world(backend: backend) { _, client, alice, _, _ in
            let id = Fixtures.id(300)
            let photo = Self.photo
            let (created, found) = try await Self.create(client, token: alice, id: id, requestID: "photo-300")
            #expect(created.status == .created)
            #expect(created.headers[.uploadOffset] == "0")
            #expect(created.headers[.uploadComplete] == "?0")
            let path = try #require(found)
            #expect(path.hasPrefix("$uploads/"))
            #expect(try await Self.offset(client, path, token: alice) == 0)

            let first = try await Self.patch(client, path, token: alice, offset: 0, photo[0..<300_000])
            #expect(first.status == .noContent)
            #expect(first.headers[.uploadOffset] == "300000")
            // The same chunk again, and a chunk out of order: 409 with the offset the server holds; nothing moves.
            for (offset, range) in [(0, 0..<300_000), (500_000, 500_000..<600_000), (299_999, 299_999..<300_100)] {
                let refused = try await Self.patch(client, path, token: alice, offset: offset, photo[range])
                #expect(refused.status == .conflict)
                #expect(refused.json.error == "MismatchingUploadOffset")
                #expect(refused.headers[.uploadOffset] == "300000")
            }
            #expect(try await Self.offset(client, path, token: alice) == 300_000)
            // The creation sent again (its answer was lost) finds the same upload where it stands.
            let again = try await Self.create(client, token: alice, id: id, requestID: "photo-300")
            #expect(again.reply.status == .created)
            #expect(again.path == path)
            #expect(again.reply.headers[.uploadOffset] == "300000")
            #expect(try await Self.photoCount(client, token: alice) == 0)

            let last = try await Self.patch(
                client, path, token: alice, offset: 300_000, photo[300_000...], complete: true)
            #expect(last.status == .created)
            #expect(last.headers[.uploadComplete] == "?1")
            let entity = try #require(try JSONSerialization.jsonObject(with: Data(last.bytes)) as? [String: Any])
            let expected = try MediaTests.expected(photo)
            #expect(entity["SHA256"] as? String == expected.sha256)
            #expect(entity["TakenBy"] as? String == "alice")
            let read = try await client.media(.get, "CheckPhotos(\(id))/$value", token: alice)
            #expect(read.bytes == expected.bytes)
            // The last chunk sent again, the creation sent again: the stored answer, never a second photo.
            let replayed = try await Self.patch(
                client, path, token: alice, offset: 300_000, photo[300_000...], complete: true)
            #expect(replayed.status == .created)
            #expect(replayed.headers[HTTPField.Name("Repeatability-Result")!] == "accepted")
            let recreated = try await Self.create(client, token: alice, id: id, requestID: "photo-300")
            #expect(recreated.reply.status == .created)
            #expect(recreated.reply.headers[HTTPField.Name("Repeatability-Result")!] == "accepted")
            #expect(try await Self.photoCount(client, token: alice) == 1)
        }
    }

    /// The creation may carry bytes: all of them (the photo is written at once), or the first ones.
    @Test(arguments: StorageBackend.allCases) func aCreationCarriesTheFirstBytesOrAll(backend: StorageBackend)
        async throws
    {
        try await MediaTests.world(backend: backend) { _, client, alice, _, _ in
            let photo = Self.photo
            let headers = { (id: String) in
                [
                    ("Upload-Complete", "?0"), ("Upload-Length", String(photo.count)),
                    ("Slug", MediaTests.slug(id: id)), ("Content-Digest", Self.digest(photo)),
                ]
            }
            let whole = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: photo,
                headers: headers(Fixtures.id(305)))
            #expect(whole.status == .created)
            #expect(whole.headers[.uploadComplete] == "?1")
            #expect(whole.json["SHA256"] as? String == (try MediaTests.expected(photo)).sha256)
            let first = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: Array(photo[0..<400_000]),
                headers: headers(Fixtures.id(306)))
            #expect(first.status == .created)
            #expect(first.headers[.uploadOffset] == "400000")
            let location = try #require(first.headers[.location])
            let path = String(location[try #require(location.range(of: "/odata/")).upperBound...])
            let rest = try await Self.patch(client, path, token: alice, offset: 400_000, photo[400_000...])
            #expect(rest.status == .created)
            let read = try await client.media(.get, "CheckPhotos(\(Fixtures.id(306)))/$value", token: alice)
            #expect(read.bytes == (try MediaTests.expected(photo)).bytes)
            #expect(try await Self.photoCount(client, token: alice) == 2)
        }
    }

    /// The connection breaks halfway through a chunk: the bytes that arrived are kept (two whole parts and the
    /// rest of a third) and the offset says so; the upload goes on from there and the photo arrives whole.
    @Test(arguments: StorageBackend.allCases) func aBrokenConnectionKeepsWhatArrived(backend: StorageBackend)
        async throws
    {
        try await MediaTests.world(backend: backend) { _, client, alice, _, _ in
            let id = Fixtures.id(301)
            let photo = Self.photo
            let path = try #require(try await Self.create(client, token: alice, id: id, requestID: nil).path)
            let port = try #require(client.port)
            let sent = 600_000
            try await offThePool {
                let socket = try SecurityTests.connect(port: port)
                defer { close(socket) }
                let head =
                    "PATCH /odata/\(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(alice)\r\n"
                    + "Upload-Offset: 0\r\nContent-Type: application/partial-upload\r\n"
                    + "Content-Length: \(photo.count)\r\n\r\n"
                let bytes = Array(head.utf8) + photo[0..<sent]
                var written = 0
                while written < bytes.count {
                    let count = bytes[written...].withUnsafeBytes { send(socket, $0.baseAddress, $0.count, 0) }
                    guard count > 0 else { throw TestFailure("send() failed") }
                    written += count
                }
                // Then the connection closes before the body's end (a close, not a reset: a reset would also drop
                // what the server's kernel holds unread, and the test could not know how much arrived).
            }
            var held = 0
            for _ in 0..<100 {
                held = try await Self.offset(client, path, token: alice) ?? -1
                if held == sent { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(held == sent)
            // A connection that breaks before the first dozen bytes arrived tells nothing of what they are: the
            // upload stays, at 0, for the next attempt.
            let early = try #require(
                try await Self.create(client, token: alice, id: Fixtures.id(302), requestID: nil).path)
            try await offThePool {
                let socket = try SecurityTests.connect(port: port)
                defer { close(socket) }
                let bytes =
                    Array(
                        ("PATCH /odata/\(early) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(alice)\r\n"
                            + "Upload-Offset: 0\r\nContent-Length: \(photo.count)\r\n\r\n").utf8) + photo[0..<5]
                _ = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, 0) }
            }
            try await Task.sleep(for: .milliseconds(300))
            #expect(try await Self.offset(client, early, token: alice) == 0)
            let rest = try await Self.patch(client, path, token: alice, offset: held, photo[held...], complete: true)
            #expect(rest.status == .created)
            let read = try await client.media(.get, "CheckPhotos(\(id))/$value", token: alice)
            #expect(read.bytes == (try MediaTests.expected(photo)).bytes)
        }
    }

    @Test(arguments: StorageBackend.allCases) func anotherUsersUploadIsNotFoundAndStaysAsItWas(
        backend: StorageBackend
    ) async throws {
        try await MediaTests.world(backend: backend) { _, client, alice, bob, sam in
            let photo = Self.photo
            let path = try #require(try await Self.create(client, token: alice, id: Fixtures.id(302)).path)
            #expect(try await Self.patch(client, path, token: alice, offset: 0, photo[0..<70_000]).status == .noContent)
            for token in [bob, sam] {
                #expect(try await client.media(.head, path, token: token).status == .notFound)
                #expect(
                    try await Self.patch(client, path, token: token, offset: 70_000, photo[70_000...]).status
                        == .notFound)
                #expect(try await client.media(.delete, path, token: token).status == .notFound)
            }
            #expect(try await Self.offset(client, path, token: alice) == 70_000)
            // An id that is none is not echoed back, whatever it carries.
            let hostile = "$uploads/a" + String(repeating: "%CC%81", count: 400) + "%0D%0A%3Cscript%3E"
            let refused = try await client.media(.head, path, token: alice)
            #expect(refused.status == .noContent)
            let made = try await client.media(.patch, hostile, token: alice, headers: [("Upload-Offset", "0")])
            #expect(made.status == .notFound)
            #expect(!made.text.contains("script") && made.bytes.count < 400, "\(made.text.prefix(200))")
            // A malformed Upload-Complete is refused, not taken as absent.
            let combined = try await Self.patch(client, path, token: alice, offset: 70_000, photo[70_000..<140_000])
            #expect(combined.status == .noContent)
            let marked = try await client.media(
                .patch, path, token: alice, contentType: "application/partial-upload", body: Array(photo[140_000...]),
                headers: [("Upload-Offset", "140000"), ("Upload-Complete", "?1\u{301}")])
            #expect(marked.status == .badRequest)
            #expect(try await Self.offset(client, path, token: alice) == 140_000)
            // Nor does a made-up id reach anything, however it is spelled.
            for made in [
                "$uploads/..%2F..%2Fdata.sqlite", "$uploads/1", "$uploads/" + String(repeating: "a", count: 36),
            ] {
                #expect(try await client.media(.head, made, token: alice).status == .notFound)
            }
            #expect(try await Self.photoCount(client, token: alice) == 0)
        }
    }

    @Test(arguments: StorageBackend.allCases) func badUploadsAreRefusedAndChangeNothing(backend: StorageBackend)
        async throws
    {
        try await MediaTests.world(backend: backend) { server, client, alice, _, _ in
            let photo = Self.photo
            // What the creation must say.
            let unsized = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: [],
                headers: [("Upload-Complete", "?0"), ("Slug", MediaTests.slug(id: Fixtures.id(310)))])
            #expect(unsized.status == .badRequest)
            let empty = try await Self.create(client, token: alice, id: Fixtures.id(311), bytes: [])
            #expect(empty.reply.status == .badRequest)
            let huge = [UInt8](repeating: 0xFF, count: 20 * 1024 * 1024 + 1)
            #expect(
                try await Self.create(client, token: alice, id: Fixtures.id(312), bytes: huge).reply.status
                    == .contentTooLarge)
            let malformed = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: [],
                headers: [("Upload-Complete", "yes"), ("Upload-Length", "10")])
            #expect(malformed.status == .badRequest)

            // What a chunk must say, and where it must end.
            let path = try #require(try await Self.create(client, token: alice, id: Fixtures.id(313)).path)
            let noOffset = try await client.media(
                .patch, path, token: alice, contentType: "application/partial-upload", body: [1, 2, 3])
            #expect(noOffset.status == .badRequest)
            let tooLong = try await Self.patch(client, path, token: alice, offset: 0, photo[...] + [0, 0])
            #expect(tooLong.status == .badRequest)
            let short = try await Self.patch(client, path, token: alice, offset: 0, photo[0..<10], complete: true)
            #expect(short.status == .badRequest)
            let typed = try await client.media(
                .patch, path, token: alice, contentType: "text/html", body: [1], headers: [("Upload-Offset", "0")])
            #expect(typed.status == .unsupportedMediaType)
            #expect(try await Self.offset(client, path, token: alice) == 0)

            // Bytes that are no photo, or not the bytes the digest names: refused when complete, the upload gone.
            let html = Array("<html><script>alert(1)</script></html>".utf8)
            var wrongDigest = photo
            wrongDigest[wrongDigest.count / 2] ^= 0xFF
            for (index, bytes) in [(314, html), (315, wrongDigest)] {
                let created = try await Self.create(
                    client, token: alice, id: Fixtures.id(index), bytes: bytes,
                    extra: index == 315 ? [("Content-Digest", Self.digest(photo))] : [])
                let upload = try #require(created.path)
                let done = try await Self.patch(client, upload, token: alice, offset: 0, bytes[...], complete: true)
                #expect(done.status == (index == 314 ? .unsupportedMediaType : .badRequest))
                #expect(try await client.media(.head, upload, token: alice).status == .notFound)
            }

            // Cancelled: gone.
            #expect(try await client.media(.delete, path, token: alice).status == .noContent)
            #expect(try await client.media(.head, path, token: alice).status == .notFound)

            // No more than sixteen unfinished at once.
            for index in 0..<16 {
                #expect(
                    try await Self.create(client, token: alice, id: Fixtures.id(400 + index)).reply.status == .created)
            }
            let seventeenth = try await Self.create(client, token: alice, id: Fixtures.id(420))
            #expect(seventeenth.reply.status == .tooManyRequests)
            #expect(seventeenth.reply.json.error == "TooManyUploads")
            #expect(try await Self.photoCount(client, token: alice) == 0)

            // Untouched for a day, they go with the media sweep.
            server.clock.advance(by: ResumableUploadStore.expiry + 60)
            _ = try await server.server.sweepMedia()
            let later = try await client.signIn("alice").access
            #expect(try await Self.create(client, token: later, id: Fixtures.id(421)).reply.status == .created)
        }
    }

    /// Sends `head` and `body` on a connection of its own and returns the answer's status line (the server answers
    /// before it reads a body it refuses).
    static func raw(port: Int, _ head: String, body: [UInt8]) async throws -> String {
        try await offThePool {
            let socket = try SecurityTests.connect(port: port)
            defer { close(socket) }
            let bytes = Array(head.utf8) + body
            _ = bytes.withUnsafeBytes { send(socket, $0.baseAddress, $0.count, 0) }
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = recv(socket, &buffer, buffer.count, 0)
            return String(decoding: buffer.prefix(max(0, count)), as: UTF8.self).split(separator: "\r\n").first
                .map(String.init) ?? ""
        }
    }

    /// A declared length near Int64's end is refused, never added to: the server answers and stays up.
    @Test(arguments: StorageBackend.allCases) func aHugeDeclaredLengthIsRefusedAndTheServerStaysUp(
        backend: StorageBackend
    ) async throws {
        try await MediaTests.world(backend: backend) { _, client, alice, _, _ in
            let port = try #require(client.port)
            let huge = "Content-Length: 9223372036854775807\r\n"
            let path = try #require(try await Self.create(client, token: alice, id: Fixtures.id(340)).path)
            #expect(
                try await Self.patch(client, path, token: alice, offset: 0, Self.photo[0..<70_000]).status == .noContent
            )
            let patched = try await Self.raw(
                port: port,
                "PATCH /odata/\(path) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(alice)\r\nUpload-Offset: 70000\r\n"
                    + "Content-Type: application/partial-upload\r\n\(huge)\r\n", body: [0xFF])
            #expect(patched.contains(" 400 "), "\(patched)")
            // A plain upload, by someone who has photos already (the quota adds the declared length).
            let first = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: ImageFixtures.jpeg(),
                headers: [("Slug", MediaTests.slug(id: Fixtures.id(341)))])
            #expect(first.status == .created)
            let posted = try await Self.raw(
                port: port,
                "POST /odata/CheckPhotos HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(alice)\r\n"
                    + "Content-Type: image/jpeg\r\nSlug: \(MediaTests.slug(id: Fixtures.id(342)))\r\n\(huge)\r\n",
                body: [0xFF, 0xD8])
            #expect(posted.contains(" 413 "), "\(posted)")
            #expect(try await Self.offset(client, path, token: alice) == 70_000)
            #expect(try await client.odata(.get, "CheckPhotos", token: alice).status == .ok)
        }
    }

    /// Creations sent at once cannot pass the limit of open uploads; chunks too small to be worth a row, and bytes
    /// that are no photo, are refused before anything is kept.
    @Test(arguments: StorageBackend.allCases) func uploadsAreBoundedInNumberAndPieces(backend: StorageBackend)
        async throws
    {
        try await MediaTests.world(backend: backend) { _, client, alice, _, _ in
            for index in 0..<15 {
                #expect(
                    try await Self.create(client, token: alice, id: Fixtures.id(500 + index)).reply.status == .created)
            }
            let statuses = try await withThrowingTaskGroup(of: HTTPResponse.Status.self) { group in
                for index in 0..<12 {
                    group.addTask {
                        try await Self.create(client, token: alice, id: Fixtures.id(520 + index)).reply.status
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses.filter { $0 == .created }.count == 1, "\(statuses)")
            #expect(statuses.allSatisfy { $0 == .created || $0 == .tooManyRequests }, "\(statuses)")
            let more = try await Self.create(client, token: alice, id: Fixtures.id(540))
            #expect(more.reply.json.error == "TooManyUploads")
        }
        try await MediaTests.world(backend: backend) { _, client, alice, _, _ in
            let photo = Self.photo
            let path = try #require(try await Self.create(client, token: alice, id: Fixtures.id(541)).path)
            // A chunk that does not end the upload is at least 64 KiB.
            let tiny = try await Self.patch(client, path, token: alice, offset: 0, photo[0..<1])
            #expect(tiny.status == .badRequest)
            #expect(tiny.headers[.uploadLimit]?.contains("min-append-size=65536") != false)
            #expect(try await Self.offset(client, path, token: alice) == 0)
            // Bytes that are no photo, in the creation or the first chunk: refused, and the upload goes.
            let html = Array("<html><body>not a photo</body></html>".utf8) + [UInt8](repeating: 0x20, count: 70_000)
            let created = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: html,
                headers: [
                    ("Upload-Complete", "?0"), ("Upload-Length", String(photo.count)),
                    ("Slug", MediaTests.slug(id: Fixtures.id(542))),
                ])
            #expect(created.status == .unsupportedMediaType)
            let first = try await Self.patch(client, path, token: alice, offset: 0, html[...])
            #expect(first.status == .unsupportedMediaType)
            #expect(try await client.media(.head, path, token: alice).status == .notFound)
            // A PNG declared as a JPEG.
            let typed = try #require(try await Self.create(client, token: alice, id: Fixtures.id(543)).path)
            let png = ImageFixtures.png() + [UInt8](repeating: 0, count: 70_000)
            #expect(
                try await Self.patch(client, typed, token: alice, offset: 0, png[...]).status == .unsupportedMediaType)
        }
    }

    /// The same creation sent again must be the same request: another author, device or type is a conflict.
    @Test(arguments: StorageBackend.allCases) func aCreationSentAgainMustAskTheSame(backend: StorageBackend)
        async throws
    {
        try await MediaTests.world(backend: backend) { _, client, alice, _, _ in
            let id = Fixtures.id(550)
            #expect(try await Self.create(client, token: alice, id: id, requestID: "same-550").reply.status == .created)
            for extra in [[("Baton-Author", "bob")], [("Baton-Device", "device-other")]] {
                let again = try await Self.create(client, token: alice, id: id, requestID: "same-550", extra: extra)
                #expect(again.reply.status == .conflict || again.reply.status == .forbidden, "\(extra)")
            }
            let png = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/png", body: [],
                headers: [
                    ("Upload-Complete", "?0"), ("Upload-Length", String(Self.photo.count)),
                    ("Slug", MediaTests.slug(id: id)), ("Content-Digest", Self.digest(Self.photo)),
                    ("Repeatability-Request-ID", "same-550"),
                    ("Repeatability-First-Sent", "Fri, 27 Nov 2026 05:10:00 GMT"),
                ])
            #expect(png.json.error == "UploadConflict")
            // Repeatability headers that are malformed are refused at once.
            let half = try await client.media(
                .post, "CheckPhotos", token: alice, contentType: "image/jpeg", body: [],
                headers: [
                    ("Upload-Complete", "?0"), ("Upload-Length", "100"),
                    ("Slug", MediaTests.slug(id: Fixtures.id(551))),
                    ("Repeatability-Request-ID", "only-the-id"),
                ])
            #expect(half.status == .badRequest)
        }
    }

    /// No token reaches the database with a recorded upload.
    @Test(arguments: StorageBackend.allCases) func anUploadRecordsNoCredentials(backend: StorageBackend) async throws {
        try await MediaTests.world(backend: backend) { server, client, alice, _, _ in
            _ = try await Self.create(client, token: alice, id: Fixtures.id(330))
            let recorded = try await server.server.data.store.storage.read { db in
                try await db.fetchAll(#"SELECT request FROM "$resumable""#, []).compactMap { $0[0].text }
            }
            #expect(recorded.count == 1)
            #expect(recorded.allSatisfy { !$0.contains(alice) && !$0.lowercased().contains("authorization") })
        }
    }
}
