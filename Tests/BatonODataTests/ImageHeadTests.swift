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
        // Read by byte: a mark combined with the `;` does not hide where the type ends, nor makes a type.
        #expect(ImageKind(contentType: "image/jpeg;\u{301} charset=x") == .jpeg)
        #expect(ImageKind(contentType: "image/png\u{301}") == nil)
        #expect(ImageKind(contentType: "text/html\u{20DD}") == nil)
        // The type is a token pair, whole: spaces inside it or a longer subtype name no image.
        #expect(ImageKind(contentType: "image/ jpeg") == nil)
        #expect(ImageKind(contentType: "image/jpegx") == nil)
        #expect(ImageKind(contentType: " image/png ; q=1") == .png)
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

    // MARK: Hostile headers (each crashed or exhausted the parser before it checked every length)

    static let ftyp: [UInt8] = [0, 0, 0, 0x10] + Array("ftypheic".utf8) + [0, 0, 0, 0]

    @Test func hostileHEICHeadersAreRefusedWithoutCrashing() {
        let cases: [(String, [UInt8])] = [
            ("an empty meta box", Self.ftyp + [0, 0, 0, 8] + Array("meta".utf8)),
            (
                "a box claiming 2⁶³ bytes",
                Self.ftyp + [0, 0, 0, 1] + Array("free".utf8) + [0x7F] + Array(repeating: 0xFF, count: 7)
            ),
            ("a box claiming 2³² − 1 bytes", Self.ftyp + [0xFF, 0xFF, 0xFF, 0xFF] + Array("meta".utf8)),
            ("a box shorter than its header", Self.ftyp + [0, 0, 0, 3] + Array("meta".utf8)),
        ]
        for (what, bytes) in cases {
            var image = bytes
            #expect(throws: ImageHead.Failure.self, "\(what)") { try ImageHead.scrubLocation(&image, isWhole: true) }
            #expect(image == bytes, "\(what): nothing was changed")
        }
    }

    /// An `iloc` that lists its Exif item at offsets near the end of the address space, or tens of thousands of
    /// items with 65,535 extents each, is refused at once.
    @Test func hostileItemLocationsAreRefused() throws {
        func heic(iloc: [UInt8]) -> [UInt8] {
            let infe = Self.box(
                "infe", [2, 0, 0, 0] + ImageFixtures.u16(2) + ImageFixtures.u16(0) + Array("Exif".utf8) + [0])
            let iinf = Self.box("iinf", [0, 0, 0, 0] + ImageFixtures.u16(1) + infe)
            return Self.ftyp + Self.box("meta", [0, 0, 0, 0] + iinf + Self.box("iloc", iloc))
        }
        // Version 1, 8-byte offsets and lengths, 8-byte base offset: base + offset overflows.
        let overflow: [UInt8] =
            [1, 0, 0, 0, 0x88, 0x80] + ImageFixtures.u16(1) + ImageFixtures.u16(2) + ImageFixtures.u16(0)
            + ImageFixtures.u16(0) + [0x7F] + Array(repeating: 0xFF, count: 7) + ImageFixtures.u16(1)
            + [0x7F] + Array(repeating: 0xFF, count: 7) + Array(repeating: 0, count: 7) + [16]
        var first = heic(iloc: overflow)
        #expect(throws: ImageHead.Failure.metadataOutOfReach) { try ImageHead.scrubLocation(&first, isWhole: true) }
        // Zero-size offsets and lengths, 40,000 items of 65,535 extents each, all the Exif item.
        var many: [UInt8] = [0, 0, 0, 0, 0x00, 0x00] + ImageFixtures.u16(40_000)
        for _ in 0..<40_000 { many += ImageFixtures.u16(2) + ImageFixtures.u16(0) + ImageFixtures.u16(65_535) }
        // Refused by the item limit, before any extent is listed (it once listed 2.6 billion of them).
        var second = heic(iloc: many)
        #expect(throws: ImageHead.Failure.metadataOutOfReach) { try ImageHead.scrubLocation(&second, isWhole: true) }
    }

    static func box(_ type: String, _ content: [UInt8]) -> [UInt8] {
        ImageFixtures.u32(content.count + 8) + Array(type.utf8) + content
    }

    /// Random bytes after a valid signature never crash the parsers.
    @Test func randomHeadersNeverCrash() {
        var generator = SystemRandomNumberGenerator()
        let signatures: [[UInt8]] = [[0xFF, 0xD8, 0xFF], Array(ImageFixtures.png().prefix(8)), Self.ftyp]
        for round in 0..<3000 {
            var bytes = signatures[round % 3]
            bytes += (0..<Int.random(in: 0...300, using: &generator)).map { _ in
                UInt8.random(in: 0...255, using: &generator)
            }
            if round % 3 == 2, bytes.count > 40 {
                // A meta box somewhere, to reach the item parsers.
                bytes.replaceSubrange(
                    20..<28, with: ImageFixtures.u32(Int.random(in: 0...200, using: &generator)) + Array("meta".utf8))
            }
            // Whatever the bytes, the scrub refuses them or cleans them in place: the kind is the one the first
            // bytes name, nothing moves, and a whole file it accepts ends as a whole image does.
            var copy = bytes
            if let kind = try? ImageHead.scrubLocation(&copy, isWhole: Bool.random(using: &generator)) {
                #expect(kind == ImageKind(sniffing: bytes))
            }
            #expect(copy.count == bytes.count, "nothing moves")
            var file = bytes
            if let kind = try? ImageHead.scrubFile(&file) {
                #expect(kind == ImageKind(sniffing: bytes))
                #expect(kind.endsComplete(file.suffix(12)))
            }
            #expect(file.count == bytes.count, "nothing moves")
        }
    }

    // MARK: Metadata beyond the first bytes

    @Test func xmpInAJPEGIsBlanked() throws {
        let xmp =
            Array("http://ns.adobe.com/xap/1.0/".utf8) + [0]
            + Array("<x:xmpmeta><exif:GPSLatitude>50,7.0833N</exif:GPSLatitude></x:xmpmeta>".utf8)
        var jpeg = ImageFixtures.jpeg()
        jpeg.insert(contentsOf: [0xFF, 0xE1] + ImageFixtures.u16(xmp.count + 2) + xmp, at: 2)
        _ = try ImageHead.scrubFile(&jpeg)
        #expect(!ImageFixtures.contains(jpeg, Array("GPSLatitude".utf8)))
        #expect(ImageFixtures.contains(jpeg, Array("http://ns.adobe.com/xap/1.0/".utf8)), "the segment stays")
    }

    @Test func aJPEGWhoseMetadataRunsPastTheHeadIsRefused() {
        // An APP2 segment of 64 KiB, nineteen times: the scan starts beyond the first MiB.
        var jpeg: [UInt8] = [0xFF, 0xD8]
        for _ in 0..<17 { jpeg += [0xFF, 0xE2] + ImageFixtures.u16(65_535) + Array(repeating: 0x41, count: 65_533) }
        jpeg += Array(ImageFixtures.jpeg().dropFirst(2))
        #expect(throws: ImageHead.Failure.metadataOutOfReach) { try ImageHead.scrubFile(&jpeg) }
    }

    @Test func aPNGsLocationChunkAfterTheFirstMiBIsRefusedAndPlainDataPasses() throws {
        func png(after: [UInt8]) -> [UInt8] {
            let png = ImageFixtures.png()
            let iend = Array(png.suffix(12))
            let big = Array(repeating: UInt8(0x42), count: 1_200_000)
            let filler =
                ImageFixtures.u32(big.count) + Array("abCd".utf8) + big
                + ImageFixtures.u32(Int(ImageFixtures.crc32(Array("abCd".utf8) + big)))
            return Array(png.dropLast(12)) + filler + after + iend
        }
        let exif = ImageFixtures.exifTIFF()
        let late =
            ImageFixtures.u32(exif.count) + Array("eXIf".utf8) + exif
            + ImageFixtures.u32(Int(ImageFixtures.crc32(Array("eXIf".utf8) + exif)))
        var refused = png(after: late)
        #expect(throws: ImageHead.Failure.metadataOutOfReach) { try ImageHead.scrubFile(&refused) }
        var plain = png(after: [])
        #expect(try ImageHead.scrubFile(&plain) == .png)
        // The same bytes fed in pieces of every size split headers anywhere.
        for piece in [1, 7, 13, 4096] {
            var head = Array(refused.prefix(ImageHead.length))
            var (_, watcher) = try ImageHead.scrub(&head, isWhole: false)
            var offset = ImageHead.length
            var failed = false
            while offset < refused.count {
                let end = min(refused.count, offset + piece)
                do { try watcher?.feed(refused[offset..<end], at: offset) } catch { failed = true; break }
                offset = end
            }
            #expect(failed, "pieces of \(piece)")
        }
    }
}
