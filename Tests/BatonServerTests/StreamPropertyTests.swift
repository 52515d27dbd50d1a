import BatonOData
import BatonTestSupport
import BatonTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import BatonServer

/// A model of one's own (`--model FILE`) with media entities and stream properties (`Edm.Stream`), over real HTTP
/// on both engines: a stream's bytes are replaced with `PUT` and the entity's ETag, read, removed, refused as a
/// photo is, carried by delta links through the entity's new ETag, and gone with the entity.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct StreamPropertyTests {
    static let model = """
        {"$Version": "4.01", "$EntityContainer": "Hangar.Container",
         "$Reference": {"https://oasis-tcs.github.io/odata-vocabularies/vocabularies/Org.OData.Core.V1.json":
           {"$Include": [{"$Namespace": "Org.OData.Core.V1", "$Alias": "Core"}]}},
         "Hangar": {
          "Inspection": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {"$Type": "Edm.Guid"},
            "Title": {"$Nullable": true}, "Photo": {"$Type": "Edm.Stream", "$Nullable": true},
            "Sketch": {"$Type": "Edm.Stream", "$Nullable": true}},
          "Attachment": {"$Kind": "EntityType", "$Key": ["ID"], "$HasStream": true, "ID": {"$Type": "Edm.Guid"},
            "Note": {"$Nullable": true},
            "SHA256": {"$Nullable": true, "@Core.Computed": true},
            "ContentType": {"$Nullable": true, "@Core.Computed": true},
            "Size": {"$Type": "Edm.Int64", "$Nullable": true, "@Core.Computed": true},
            "TakenBy": {"$Nullable": true, "@Core.Computed": true}},
          "Reading": {"$Kind": "EntityType", "$Key": ["At"], "At": {"$Type": "Edm.DateTimeOffset"},
            "Chart": {"$Type": "Edm.Stream", "$Nullable": true}},
          "Container": {"$Kind": "EntityContainer",
            "Inspections": {"$Collection": true, "$Type": "Hangar.Inspection"},
            "Attachments": {"$Collection": true, "$Type": "Hangar.Attachment"},
            "Readings": {"$Collection": true, "$Type": "Hangar.Reading"}}}}
        """

    static func world(
        backend: StorageBackend, quota: Int64? = nil,
        _ body: @Sendable (TestServer, any TestClientProtocol, _ sam: String) async throws -> Void
    ) async throws {
        let model = try ServiceModel(csdlJSON: Self.model)
        let server = try await TestServer(backend: backend) {
            $0.dataService.model = model
            if let quota { $0.dataService.mediaQuotaPerUser = quota }
        }
        defer { server.remove() }
        try await server.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        try await server.server.application().test(.live) { client in
            try await body(server, client, try await client.signIn("sam").access)
        }
    }

    @Test(arguments: StorageBackend.allCases) func aStreamPropertyIsReplacedReadAndRemoved(backend: StorageBackend)
        async throws
    {
        try await Self.world(backend: backend) { server, client, sam in
            let metadata = try await client.odata(.get, "$metadata", token: sam)
            #expect(metadata.text.contains(#"<Property Name="Photo" Type="Edm.Stream" Nullable="true"/>"#))
            let id = Fixtures.id(800)
            let created = try await client.odata(
                .post, "Inspections", token: sam, body: #"{"ID":"\#(id)","Title":"left main gear"}"#)
            #expect(created.status == .created)
            #expect(created.json["Photo@odata.mediaReadLink"] as? String == "Inspections(\(id))/Photo")
            #expect(created.json["Photo"] == nil)
            let photo = "Inspections(\(id))/Photo"
            #expect(try await client.media(.get, photo, token: sam).status == .noContent)
            let etag = try #require(created.headers[.eTag])
            let jpeg = ImageFixtures.jpeg(scanBytes: 3_000)
            let expected = try MediaTests.expected(jpeg)
            // Without If-Match, with a stale one, with bytes that are no photo: refused, nothing kept.
            #expect(
                try await client.media(.put, photo, token: sam, contentType: "image/jpeg", body: jpeg).status
                    == .preconditionRequired)
            #expect(
                try await client.media(
                    .put, photo, token: sam, contentType: "image/jpeg", body: jpeg,
                    headers: [("If-Match", #"W/"999999""#)]
                ).status == .preconditionFailed)
            #expect(
                try await client.media(
                    .put, photo, token: sam, contentType: "image/jpeg", body: Array("<svg onload=x>".utf8),
                    headers: [("If-Match", etag)]
                ).status == .unsupportedMediaType)
            #expect(try await client.media(.get, photo, token: sam).status == .noContent)

            let tracked = try await client.odata(
                .get, "Inspections", token: sam, headers: [("Prefer", "odata.track-changes")])
            let link = try #require(tracked.json["@odata.deltaLink"] as? String)
            let put = try await client.media(
                .put, photo, token: sam, contentType: "image/jpeg", body: jpeg, headers: [("If-Match", etag)])
            #expect(put.status == .noContent)
            let newETag = try #require(put.headers[.eTag])
            #expect(newETag != etag)
            let read = try await client.media(.get, photo, token: sam)
            #expect(read.status == .ok)
            #expect(read.bytes == expected.bytes)
            #expect(read.headers[.contentType] == "image/jpeg")
            #expect(read.headers[HTTPField.Name("X-Content-Type-Options")!] == "nosniff")
            #expect(try await client.media(.get, "Inspections(\(id))/Sketch", token: sam).status == .noContent)
            // The entity's new ETag goes out with the next delta page.
            let delta = try await client.odata(.get, String(link.split(separator: "/odata/").last ?? ""), token: sam)
            let changed = delta.json["value"] as? [[String: Any]] ?? []
            #expect(changed.map { $0["ID"] as? String } == [id], "\(delta.text)")
            // A stream is no value in a payload.
            let payload = try await client.odata(
                .patch, "Inspections(\(id))", token: sam, headers: [("If-Match", newETag)], body: #"{"Photo":"aGk"}"#)
            #expect(payload.status == .badRequest)
            #expect(payload.text.contains("Photo"))
            // Audited as a change of the inspection.
            let audit = try await server.server.audit.entries(limit: 100)
            #expect(audit.contains { $0.subject == "Inspections(\(id))" && ($0.detail ?? "").contains("stream Photo") })

            let removed = try await client.media(.delete, photo, token: sam, headers: [("If-Match", newETag)])
            #expect(removed.status == .noContent)
            #expect(try await client.media(.get, photo, token: sam).status == .noContent)
            // Kept until the entity goes: then its streams go with it, and the sweep takes their bytes.
            let again = try #require(removed.headers[.eTag])
            #expect(
                try await client.media(
                    .put, photo, token: sam, contentType: "image/jpeg", body: jpeg, headers: [("If-Match", again)]
                ).status == .noContent)
            let current = try #require(try await client.odata(.get, "Inspections(\(id))", token: sam).headers[.eTag])
            #expect(
                try await client.odata(.delete, "Inspections(\(id))", token: sam, headers: [("If-Match", current)])
                    .status == .noContent)
            server.clock.advance(by: MediaStore.grace + 60)
            #expect(try await server.server.sweepMedia() >= 1)
        }
    }

    /// One entity has one stream however its URL spells the key (an instant with or without its offset); a
    /// person's streams hold at most their quota.
    @Test(arguments: StorageBackend.allCases) func aStreamIsTheEntitysWhateverTheKeysSpellingAndWithinTheQuota(
        backend: StorageBackend
    ) async throws {
        let jpeg = ImageFixtures.jpeg(scanBytes: 3_000)
        try await Self.world(backend: backend, quota: Int64(jpeg.count * 3 / 2)) { _, client, sam in
            let created = try await client.odata(.post, "Readings", token: sam, body: #"{"At":"2026-11-27T00:00:00Z"}"#)
            #expect(created.status == .created)
            let etag = try #require(created.headers[.eTag])
            let put = try await client.media(
                .put, "Readings(2026-11-27T01:00:00%2B01:00)/Chart", token: sam, contentType: "image/jpeg", body: jpeg,
                headers: [("If-Match", etag)])
            #expect(put.status == .noContent, "\(put.text)")
            let read = try await client.media(.get, "Readings(2026-11-27T00:00:00Z)/Chart", token: sam)
            #expect(read.status == .ok)
            #expect(read.bytes == (try MediaTests.expected(jpeg)).bytes)
            // A second stream would pass the quota; replacing the first does not.
            let other = try await client.odata(.post, "Readings", token: sam, body: #"{"At":"2026-11-28T00:00:00Z"}"#)
            let second = try await client.media(
                .put, "Readings(2026-11-28T00:00:00Z)/Chart", token: sam, contentType: "image/jpeg", body: jpeg,
                headers: [("If-Match", try #require(other.headers[.eTag]))])
            #expect(second.status == .contentTooLarge)
            #expect(second.json.error == "MediaQuotaExceeded")
            let replaced = try await client.media(
                .put, "Readings(2026-11-27T00:00:00Z)/Chart", token: sam, contentType: "image/jpeg", body: jpeg,
                headers: [("If-Match", try #require(put.headers[.eTag]))])
            #expect(replaced.status == .noContent)
        }
    }

    @Test(arguments: StorageBackend.allCases) func aModelsOwnMediaEntityTakesPhotos(backend: StorageBackend)
        async throws
    {
        try await Self.world(backend: backend) { _, client, sam in
            let id = Fixtures.id(810)
            let slug =
                #"{"ID":"\#(id)","Note":"hydraulic leak"}"#.addingPercentEncoding(
                    withAllowedCharacters: .alphanumerics) ?? ""
            let png = ImageFixtures.png()
            let created = try await client.media(
                .post, "Attachments", token: sam, contentType: "image/png", body: png, headers: [("Slug", slug)])
            #expect(created.status == .created, "\(created.text)")
            #expect(created.json["@odata.mediaReadLink"] as? String == "Attachments(\(id))/$value")
            let read = try await client.media(.get, "Attachments(\(id))/$value", token: sam)
            #expect(read.bytes == (try MediaTests.expected(png)).bytes)
        }
    }

    /// A media entity type must say where the server records its bytes, or the server does not start.
    @Test func aMediaEntityWithoutItsRecordIsRefusedAtStart() async throws {
        let bare = Self.model.replacingOccurrences(
            of: #""SHA256": {"$Nullable": true, "@Core.Computed": true},"#, with: "")
        let model = try ServiceModel(csdlJSON: bare)
        await #expect {
            _ = try await TestServer { $0.dataService.model = model }
        } throws: { "\($0)".contains("needs a property 'SHA256'") }
    }
}
