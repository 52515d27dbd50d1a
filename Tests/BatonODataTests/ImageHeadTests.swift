import BatonOData
import BatonTestSupport
import Testing

/// Image kinds by their bytes, and the removal of the location their Exif records, on fixtures whose structure is
/// built independently of the code under test.
@Suite struct ImageHeadTests {
    @Test(arguments: [
        (ImageFixtures.jpeg(), ImageKind.jpeg), (ImageFixtures.png(), .png), (ImageFixtures.heic(), .heic),
    ])
    func theLocationGoesAndEverythingElseStays(image: [UInt8], kind: ImageKind) throws {
        #expect(ImageFixtures.contains(image, ImageFixtures.locationBytes))
        var scrubbed = image
        #expect(try ImageHead.scrubLocation(&scrubbed, isWhole: true) == kind)
        #expect(scrubbed.count == image.count, "nothing moves")
        #expect(!ImageFixtures.contains(scrubbed, ImageFixtures.locationBytes), "the latitude is gone")
        // The orientation field (tag 0x0112, SHORT, 1, value 6) is still there.
        #expect(ImageFixtures.contains(scrubbed, [0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6]))
        // Scrubbing again changes nothing: a tablet's prepared photo keeps its hash on the server.
        var again = scrubbed
        _ = try ImageHead.scrubLocation(&again, isWhole: true)
        #expect(again == scrubbed)
    }

    @Test func aPNGsChunkChecksumIsRecomputed() throws {
        var png = ImageFixtures.png()
        _ = try ImageHead.scrubLocation(&png, isWhole: true)
        // Walk the chunks and check every CRC with the fixtures' own CRC-32.
        var index = 8
        var types: [String] = []
        while index + 12 <= png.count {
            let length = png[index..<index + 4].reduce(0) { $0 << 8 | Int($1) }
            let typed = Array(png[index + 4..<index + 8 + length])
            let crc = png[index + 8 + length..<index + 12 + length].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
            #expect(crc == ImageFixtures.crc32(typed), "CRC of \(String(decoding: typed.prefix(4), as: UTF8.self))")
            types.append(String(decoding: typed.prefix(4), as: UTF8.self))
            index += 12 + length
        }
        #expect(types == ["IHDR", "eXIf", "IDAT", "IEND"])
    }

    @Test(arguments: [
        ("<html><script>alert(1)</script></html>", "HTML"), ("%PDF-1.7 whatever follows", "PDF"),
        ("<svg xmlns='http://www.w3.org/2000/svg'/>", "SVG"), ("GIF89a............", "GIF"),
    ])
    func whatIsNotAPhotoIsRefusedByItsBytes(text: String, what: String) {
        var bytes = Array(text.utf8)
        #expect(ImageKind(sniffing: bytes) == nil, "\(what)")
        #expect(throws: ImageHead.Failure.notAnImage) { try ImageHead.scrubLocation(&bytes, isWhole: true) }
    }

    @Test func aPNGHeaderBeforeHTMLIsStillRefusedWhenItsChunksDoNotHold() {
        // The PNG signature, then HTML: the chunk walk finds no IEND before the end.
        var bytes = Array(ImageFixtures.png().prefix(8)) + Array("<html><script>alert(1)</script></html>".utf8)
        #expect(throws: ImageHead.Failure.truncated) { try ImageHead.scrubLocation(&bytes, isWhole: true) }
    }

    @Test func truncatedHeadersAreRefusedWhenTheFileIsWhole() {
        var jpeg = Array(ImageFixtures.jpeg().prefix(40))
        #expect(throws: ImageHead.Failure.truncated) { try ImageHead.scrubLocation(&jpeg, isWhole: true) }
        var empty: [UInt8] = []
        #expect(throws: ImageHead.Failure.notAnImage) { try ImageHead.scrubLocation(&empty, isWhole: true) }
    }

    @Test func declaredTypesAreReadLeniently() {
        #expect(ImageKind(contentType: "IMAGE/JPEG; q=1") == .jpeg)
        #expect(ImageKind(contentType: "image/png") == .png)
        #expect(ImageKind(contentType: "image/heif") == .heic)
        #expect(ImageKind(contentType: "text/html") == nil)
        #expect(ImageKind(contentType: "image/svg+xml") == nil)
    }

    @Test func theBundledModelHasAMediaEntitySetThatRoundTrips() throws {
        let model = try ServiceModel.aircraftChecks
        let photo = try #require(model.entityType(named: "Baton.CheckPhoto"))
        #expect(photo.hasStream)
        #expect(model.entityType(named: "Baton.PreflightCheck")?.hasStream == false)
        let again = try ServiceModel(csdlJSON: model.csdlJSONDocument.serialized)
        #expect(again.entityType(named: "Baton.CheckPhoto")?.hasStream == true)
        #expect(model.csdlXML.contains(#"<EntityType Name="CheckPhoto" HasStream="true">"#))
        let url = try ODataURL(parsing: "CheckPhotos(6f1c7a4e-64c8-4a7e-9d0e-1b2c3d4e5f60)/$value", model: model)
        guard case .resource(let segments) = url.path else { throw ODataError(.syntax, "no resource") }
        #expect(segments.last == .value)
        #expect(throws: ODataError.self) {
            try ODataURL(parsing: "PreflightChecks(6f1c7a4e-64c8-4a7e-9d0e-1b2c3d4e5f60)/$value", model: model)
        }
        #expect(throws: ODataError.self) { try ODataURL(parsing: "CheckPhotos/$value", model: model) }
    }
}
