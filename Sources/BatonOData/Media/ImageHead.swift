/// The image types a media entity accepts, recognised by their first bytes (never by a `Content-Type` a client
/// declares), and the removal of the location an image's Exif metadata records.
///
/// Both ends use it: the tablet removes the location when a photo is taken, before the author signs the photo's
/// SHA-256, and the server removes it again on upload (a no-op for a photo the tablet prepared), so both hold the
/// same bytes and the same hash.
public enum ImageKind: String, Sendable, Hashable, CaseIterable, Codable {
    case jpeg = "image/jpeg"
    case png = "image/png"
    case heic = "image/heic"

    /// The kind the first bytes of a file announce, or `nil` for anything else (HTML, SVG, a PDF, an empty file).
    /// Twelve bytes decide; fewer never match.
    public init?(sniffing head: some Collection<UInt8>) {
        let bytes = Array(head.prefix(12))
        guard bytes.count >= 12 else { return nil }
        if bytes[0] == 0xFF, bytes[1] == 0xD8, bytes[2] == 0xFF {
            self = .jpeg
        } else if bytes[0..<8].elementsEqual([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            self = .png
        } else if bytes[4..<8].elementsEqual(Array("ftyp".utf8)),
            ["heic", "heix", "heim", "heis", "mif1", "msf1"].contains(String(decoding: bytes[8..<12], as: UTF8.self))
        {
            self = .heic
        } else {
            return nil
        }
    }

    /// Whether a file of this kind ending in `tail` (its last bytes) ends as a whole one does: a JPEG with its
    /// end-of-image marker, a PNG with its `IEND` chunk (a HEIC has no trailer).
    public func endsComplete(_ tail: some Collection<UInt8>) -> Bool {
        let tail = Array(tail.suffix(12))
        switch self {
        case .jpeg: return tail.count >= 2 && tail.suffix(2).elementsEqual([0xFF, 0xD9])
        case .png:
            return tail.count == 12
                && tail.elementsEqual([0, 0, 0, 0, 0x49, 0x45, 0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82])
        case .heic: return true
        }
    }

    /// The file name extension.
    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .png: "png"
        case .heic: "heic"
        }
    }

    /// The kind a `Content-Type` names (parameters ignored, ASCII case-insensitive), or `nil`. Read byte by byte
    /// (`HeaderScanner.mediaType(of:)`): a mark combined with a `;` or a space does not hide it.
    public init?(contentType: String) {
        switch HeaderScanner.mediaType(of: contentType) {
        case "image/jpeg", "image/jpg": self = .jpeg
        case "image/png": self = .png
        case "image/heic", "image/heif": self = .heic
        default: return nil
        }
    }
}

/// The start of an image — the bytes that hold its metadata — and the removal of the location it records.
///
/// A JPEG's Exif lies in an APP1 segment before the image data, a PNG's in an `eXIf` chunk, a HEIC's in an `Exif`
/// item its `meta` box locates. The location is the GPS directory (tag 0x8825) of the Exif's first image directory:
/// every field of it and every value those fields point to is overwritten with zeros and the directory left
/// empty, in place — nothing moves, so every other offset in the file stays right and the rest of the Exif (the
/// orientation a photo is shown in) stays. An Exif block whose structure does not hold together is zeroed whole.
/// XMP, which may record a location too, is blanked whole (a JPEG's XMP segment, a PNG's XMP or Exif text chunks,
/// a HEIC's `mime` items).
///
/// Metadata the head does not reach cannot be cleaned: a JPEG whose image data starts, or a HEIC whose Exif or
/// XMP lies, beyond ``length`` is refused (``Failure/metadataOutOfReach``); a PNG's later chunks are watched as
/// they stream by (``PNGChunkWatcher``) and a metadata chunk among them is refused the same way.
///
/// Every length and offset in the bytes is checked before it is used: hostile headers are refused or zeroed, they
/// never index outside the bytes or overflow.
public struct ImageHead: Sendable {
    /// How many bytes at the start of a file hold the metadata scrubbed here.
    public static let length = 1024 * 1024

    public enum Failure: Error, Sendable, Equatable {
        /// The bytes are not a JPEG, PNG or HEIC image.
        case notAnImage
        /// The image ends inside its own header (a JPEG segment or PNG chunk runs past the end).
        case truncated
        /// Metadata lies beyond ``ImageHead/length`` (or where a HEIC's item locations cannot be followed), where
        /// its location cannot be removed.
        case metadataOutOfReach
    }

    /// Removes the location from `head`, the first bytes of an image (all of it, or at least ``length`` bytes),
    /// and returns the image's kind.
    ///
    /// - Parameters:
    ///   - head: the bytes, changed in place.
    ///   - isWhole: whether `head` is the whole file (then a header that runs past its end is truncation).
    /// - Returns: the image's kind.
    /// - Throws: ``Failure``.
    public static func scrubLocation(_ head: inout [UInt8], isWhole: Bool) throws(Failure) -> ImageKind {
        try scrub(&head, isWhole: isWhole).kind
    }

    /// ``scrubLocation(_:isWhole:)``, and for a PNG whose chunks go on past `head`, the watcher of the rest.
    ///
    /// - Parameters:
    ///   - head: the bytes, changed in place.
    ///   - isWhole: whether `head` is the whole file.
    /// - Returns: the image's kind, and a watcher for the bytes after `head` (PNG only).
    /// - Throws: ``Failure``.
    public static func scrub(_ head: inout [UInt8], isWhole: Bool) throws(Failure) -> (
        kind: ImageKind, watcher: PNGChunkWatcher?
    ) {
        guard let kind = ImageKind(sniffing: head) else { throw .notAnImage }
        switch kind {
        case .jpeg:
            try scrubJPEG(&head, isWhole: isWhole)
            return (kind, nil)
        case .png:
            return (kind, try scrubPNG(&head, isWhole: isWhole))
        case .heic:
            try scrubHEIC(&head)
            return (kind, nil)
        }
    }

    /// Removes the location from a whole file exactly as a server does while the file streams in (its first
    /// ``length`` bytes cleaned, the chunks after them watched) and checks that it ends as a whole image does:
    /// what a tablet runs on a photo before its author signs the bytes' SHA-256.
    ///
    /// - Parameter bytes: the whole file, changed in place.
    /// - Returns: the image's kind.
    /// - Throws: ``Failure``.
    public static func scrubFile(_ bytes: inout [UInt8]) throws(Failure) -> ImageKind {
        guard bytes.count > length else {
            let kind = try scrubLocation(&bytes, isWhole: true)
            guard kind.endsComplete(bytes.suffix(12)) else { throw .truncated }
            return kind
        }
        var head = Array(bytes[..<length])
        var (kind, watcher) = try scrub(&head, isWhole: false)
        bytes.replaceSubrange(..<length, with: head)
        try watcher?.feed(bytes[length...], at: length)
        guard kind.endsComplete(bytes.suffix(12)) else { throw .truncated }
        return kind
    }

    /// The image's kind, after checking its header holds together, without changing a byte.
    public static func inspect(_ head: [UInt8], isWhole: Bool) throws(Failure) -> ImageKind {
        var copy = head
        return try scrubLocation(&copy, isWhole: isWhole)
    }

    // MARK: JPEG

    static let exifMark: [UInt8] = Array("Exif".utf8) + [0, 0]
    static let xmpMark: [UInt8] = Array("http://ns.adobe.com/xap/1.0/".utf8) + [0]

    static func scrubJPEG(_ bytes: inout [UInt8], isWhole: Bool) throws(Failure) {
        var index = 2
        while index + 4 <= bytes.count {
            guard bytes[index] == 0xFF else { throw .notAnImage }
            let marker = bytes[index + 1]
            if marker == 0xFF {  // fill byte
                index += 1
                continue
            }
            // Start of scan: the image data follows, no more metadata segments. End of image: nothing follows.
            if marker == 0xDA || marker == 0xD9 { return }
            if (0xD0...0xD7).contains(marker) || marker == 0x01 {
                index += 2
                continue
            }
            let length = Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
            guard length >= 2 else { throw .notAnImage }
            let start = index + 4
            let end = index + 2 + length
            guard end <= bytes.count else { throw isWhole ? .truncated : .metadataOutOfReach }
            if marker == 0xE1, end - start >= 6, bytes[start..<start + 6].elementsEqual(exifMark) {
                scrubTIFF(&bytes, range: start + 6..<end)
            } else if marker == 0xE1, end - start >= xmpMark.count,
                bytes[start..<start + xmpMark.count].elementsEqual(xmpMark)
            {
                blank(&bytes, start + xmpMark.count..<end)
            }
            index = end
        }
        throw isWhole ? .truncated : .metadataOutOfReach
    }

    // MARK: PNG

    /// Walks the chunks in `bytes`; returns the watcher of the chunks after them when `bytes` ends before `IEND`.
    static func scrubPNG(_ bytes: inout [UInt8], isWhole: Bool) throws(Failure) -> PNGChunkWatcher? {
        var index = 8
        while index + 8 <= bytes.count {
            let length = Int(readUInt32(bytes, index, bigEndian: true))
            let type = Array(bytes[index + 4..<index + 8])
            let start = index + 8
            let end = start + length  // at most 2³² past an index of an array: no overflow
            if end + 4 > bytes.count {
                if isWhole { throw .truncated }
                // A metadata chunk the head cuts cannot be cleaned; image data goes on in the stream.
                if PNGChunkWatcher.isMetadata(type) { throw .metadataOutOfReach }
                return PNGChunkWatcher(nextChunk: end + 4)
            }
            if type.elementsEqual(Array("eXIf".utf8)) {
                var tiff = start..<end
                if end - start >= 6, bytes[start..<start + 6].elementsEqual(exifMark) { tiff = start + 6..<end }
                scrubTIFF(&bytes, range: tiff)
                writeCRC(&bytes, chunk: index, end: end)
            } else if PNGChunkWatcher.isMetadata(type) {
                // Text that may hold XMP or Exif (a location): blanked, and the chunk renamed to a private,
                // ignorable one so no reader takes the blanks for text.
                zero(&bytes, start..<end)
                bytes.replaceSubrange(index + 4..<index + 8, with: Array("bpNx".utf8))
                writeCRC(&bytes, chunk: index, end: end)
            }
            if type.elementsEqual(Array("IEND".utf8)) { return nil }
            index = end + 4
        }
        if isWhole { throw .truncated }
        return PNGChunkWatcher(nextChunk: index, header: Array(bytes[index...]))
    }

    static func writeCRC(_ bytes: inout [UInt8], chunk index: Int, end: Int) {
        writeUInt32(&bytes, end, CRC32.checksum(bytes[index + 4..<end]), bigEndian: true)
    }

    // MARK: HEIC

    /// The most items and extents a HEIC's `iloc` may list before it is refused.
    static let maximumItems = 4096
    static let maximumExtents = 64

    static func scrubHEIC(_ bytes: inout [UInt8]) throws(Failure) {
        // The top-level boxes: ftyp, meta (the items and where they lie), mdat (their bytes).
        guard let meta = box("meta", in: bytes, range: 0..<bytes.count) else { throw .metadataOutOfReach }
        // meta is a full box: four bytes of version and flags before its children.
        guard meta.count >= 4 else { throw .notAnImage }
        let children = meta.lowerBound + 4..<meta.upperBound
        guard let itemInfo = box("iinf", in: bytes, range: children) else { return }
        let metadataItems = itemIDs(bytes, itemInfo, types: ["Exif", "mime"])
        guard !metadataItems.isEmpty else { return }
        guard let locations = box("iloc", in: bytes, range: children),
            let extents = itemExtents(bytes, locations, items: Set(metadataItems.keys))
        else { throw .metadataOutOfReach }
        for extent in extents {
            guard extent.length > 0, extent.offset <= bytes.count, extent.length <= bytes.count - extent.offset else {
                throw .metadataOutOfReach
            }
            let range = extent.offset..<extent.offset + extent.length
            guard metadataItems[extent.item] == "Exif" else {
                zero(&bytes, range)  // XMP or another mime item: blanked whole
                continue
            }
            // An Exif item starts with the offset of its TIFF header (after "Exif\0\0").
            guard range.count >= 4 else { continue }
            let skip = Int(readUInt32(bytes, range.lowerBound, bigEndian: true))
            guard skip <= range.count - 4 else {
                zero(&bytes, range.lowerBound + 4..<range.upperBound)
                continue
            }
            scrubTIFF(&bytes, range: range.lowerBound + 4 + skip..<range.upperBound)
        }
    }

    /// The content range of the first box of `type` directly in `range`.
    static func box(_ type: String, in bytes: [UInt8], range: Range<Int>) -> Range<Int>? {
        let wanted = Array(type.utf8)
        var index = range.lowerBound
        while index + 8 <= range.upperBound {
            var size = Int(readUInt32(bytes, index, bigEndian: true))
            var header = 8
            if size == 1 {
                guard index + 16 <= range.upperBound else { return nil }
                let large = readUInt64(bytes, index + 8)
                guard large <= UInt64(range.upperBound - index) else { return nil }
                size = Int(large)
                header = 16
            } else if size == 0 {
                size = range.upperBound - index
            }
            guard size >= header, size <= range.upperBound - index else { return nil }
            if bytes[index + 4..<index + 8].elementsEqual(wanted) { return index + header..<index + size }
            index += size
        }
        return nil
    }

    /// The items of the given types in an `iinf` box, by id.
    static func itemIDs(_ bytes: [UInt8], _ info: Range<Int>, types: Set<String>) -> [Int: String] {
        guard info.count >= 6 else { return [:] }
        let version = bytes[info.lowerBound]
        var index = info.lowerBound + 4 + (version == 0 ? 2 : 4)
        var ids: [Int: String] = [:]
        while index + 8 <= info.upperBound {
            let size = Int(readUInt32(bytes, index, bigEndian: true))
            guard size >= 8, size <= info.upperBound - index else { break }
            if bytes[index + 4..<index + 8].elementsEqual(Array("infe".utf8)), size >= 20 {
                let entryVersion = bytes[index + 8]
                if entryVersion >= 2 {
                    let idStart = index + 12
                    let id =
                        entryVersion == 2
                        ? Int(readUInt16(bytes, idStart)) : Int(readUInt32(bytes, idStart, bigEndian: true))
                    let typeStart = idStart + (entryVersion == 2 ? 2 : 4) + 2
                    if typeStart + 4 <= index + size {
                        let type = String(decoding: bytes[typeStart..<typeStart + 4], as: UTF8.self)
                        if types.contains(type) { ids[id] = type }
                    }
                }
            }
            index += size
        }
        return ids
    }

    /// Each extent of `items` in an `iloc` box, as an absolute range of the file; `nil` when one cannot be
    /// followed (it lies in an `idat` box or another file, or the box lists more than the limits allow).
    static func itemExtents(_ bytes: [UInt8], _ locations: Range<Int>, items: Set<Int>) -> [(
        item: Int, offset: Int, length: Int
    )]? {
        var index = locations.lowerBound
        guard index + 8 <= locations.upperBound else { return nil }
        let version = bytes[index]
        index += 4
        let offsetSize = Int(bytes[index] >> 4)
        let lengthSize = Int(bytes[index] & 0x0F)
        let baseOffsetSize = Int(bytes[index + 1] >> 4)
        let indexSize = version >= 1 ? Int(bytes[index + 1] & 0x0F) : 0
        index += 2
        func read(_ size: Int) -> Int? {
            guard size <= locations.upperBound - index else { return nil }
            defer { index += size }
            switch size {
            case 0: return 0
            case 2: return Int(readUInt16(bytes, index))
            case 4: return Int(readUInt32(bytes, index, bigEndian: true))
            case 8:
                let value = readUInt64(bytes, index)
                return value <= UInt64(Int32.max) ? Int(value) : Int.max
            default: return nil
            }
        }
        guard let count = read(version < 2 ? 2 : 4), count <= maximumItems else { return nil }
        var extents: [(item: Int, offset: Int, length: Int)] = []
        for _ in 0..<count {
            guard let id = read(version < 2 ? 2 : 4) else { return nil }
            var method = 0
            if version >= 1 {
                guard let field = read(2) else { return nil }
                method = field & 0x0F
            }
            guard let reference = read(2), let base = read(baseOffsetSize), let extentCount = read(2),
                extentCount <= maximumExtents
            else { return nil }
            for _ in 0..<extentCount {
                if indexSize > 0 { guard read(indexSize) != nil else { return nil } }
                guard let offset = read(offsetSize), let length = read(lengthSize) else { return nil }
                guard items.contains(id) else { continue }
                // Only bytes of this file, placed by offset, are followed.
                guard method == 0, reference == 0, lengthSize > 0 else { return nil }
                let (start, overflow) = base.addingReportingOverflow(offset)
                guard !overflow else { return nil }
                extents.append((id, start, length))
            }
        }
        return extents
    }

    // MARK: TIFF (Exif)

    /// Empties the GPS directories of the TIFF structure in `range` (zeroing their fields and values), or zeroes
    /// the whole range when the structure does not hold together.
    static func scrubTIFF(_ bytes: inout [UInt8], range: Range<Int>) {
        guard !emptyGPS(&bytes, range: range) else { return }
        zero(&bytes, range)
    }

    /// Empties the GPS directories; `false` when the TIFF structure is malformed (nothing is changed then).
    static func emptyGPS(_ bytes: inout [UInt8], range: Range<Int>) -> Bool {
        let base = range.lowerBound
        guard range.count >= 8 else { return false }
        let little: Bool
        if bytes[base] == 0x49, bytes[base + 1] == 0x49, bytes[base + 2] == 42, bytes[base + 3] == 0 {
            little = true
        } else if bytes[base] == 0x4D, bytes[base + 1] == 0x4D, bytes[base + 2] == 0, bytes[base + 3] == 42 {
            little = false
        } else {
            return false
        }
        func u16(_ at: Int) -> Int {
            little ? Int(bytes[at]) | Int(bytes[at + 1]) << 8 : Int(bytes[at]) << 8 | Int(bytes[at + 1])
        }
        func u32(_ at: Int) -> Int { Int(readUInt32(bytes, at, bigEndian: !little)) }
        /// A directory's start and entry count, if it lies inside the range.
        func directory(at offset: Int) -> (start: Int, count: Int)? {
            guard offset >= 8, offset <= range.count - 2 else { return nil }
            let start = base + offset
            let count = u16(start)
            guard 2 + count * 12 + 4 <= range.upperBound - start else { return nil }
            return (start, count)
        }
        guard let first = directory(at: u32(base + 4)) else { return false }
        var gpsOffsets: [Int] = []
        for entry in 0..<first.count {
            let at = first.start + 2 + entry * 12
            if u16(at) == 0x8825 { gpsOffsets.append(u32(at + 8)) }
        }
        let typeSizes = [1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8]
        var cleared: [Range<Int>] = []
        for gpsOffset in gpsOffsets {
            guard let gps = directory(at: gpsOffset) else { return false }
            for entry in 0..<gps.count {
                let at = gps.start + 2 + entry * 12
                let (size, overflow) = (typeSizes[u16(at + 2)] ?? 1).multipliedReportingOverflow(by: u32(at + 4))
                guard !overflow else { return false }
                if size > 4 {
                    let offset = u32(at + 8)
                    guard offset >= 8, offset <= range.count, size <= range.count - offset else { return false }
                    cleared.append(base + offset..<base + offset + size)
                }
            }
            // No fields, no next directory.
            cleared.append(gps.start..<gps.start + 2 + gps.count * 12 + 4)
        }
        for values in cleared { zero(&bytes, values) }
        return true
    }

    static func zero(_ bytes: inout [UInt8], _ range: Range<Int>) {
        for index in range { bytes[index] = 0 }
    }

    /// Overwrites with spaces (XMP's own padding).
    static func blank(_ bytes: inout [UInt8], _ range: Range<Int>) {
        for index in range { bytes[index] = 0x20 }
    }

    static func readUInt16(_ bytes: [UInt8], _ at: Int) -> UInt16 {
        UInt16(bytes[at]) << 8 | UInt16(bytes[at + 1])
    }

    static func readUInt32(_ bytes: [UInt8], _ at: Int, bigEndian: Bool) -> UInt32 {
        let value = (0..<4).reduce(UInt32(0)) { $0 << 8 | UInt32(bytes[at + $1]) }
        return bigEndian ? value : value.byteSwapped
    }

    static func readUInt64(_ bytes: [UInt8], _ at: Int) -> UInt64 {
        (0..<8).reduce(UInt64(0)) { $0 << 8 | UInt64(bytes[at + $1]) }
    }

    static func writeUInt32(_ bytes: inout [UInt8], _ at: Int, _ value: UInt32, bigEndian: Bool) {
        let ordered = bigEndian ? value : value.byteSwapped
        for index in 0..<4 { bytes[at + index] = UInt8(truncatingIfNeeded: ordered >> (24 - 8 * index)) }
    }
}
