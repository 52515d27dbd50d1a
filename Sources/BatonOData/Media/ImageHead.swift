/// The image types a media entity accepts, recognised by their first bytes (never by a `Content-Type` a client
/// declares), and the removal of the location an image's Exif metadata records.
///
/// Both ends use it: the tablet removes the location when a photo is taken, before the author signs the photo's
/// SHA-256, and the server removes it again on upload (a no-op for a photo the tablet prepared), so both hold the
/// same bytes and the same hash.
public enum ImageKind: String, Sendable, Hashable, CaseIterable {
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

    /// The file name extension.
    public var fileExtension: String {
        switch self {
        case .jpeg: "jpg"
        case .png: "png"
        case .heic: "heic"
        }
    }

    /// The kind a `Content-Type` names (parameters ignored, case-insensitive), or `nil`.
    public init?(contentType: String) {
        let essence = contentType.utf8.split(separator: UInt8(ascii: ";"), maxSplits: 1).first.map {
            String(decoding: $0, as: UTF8.self)
        }
        let trimmed = (essence ?? "").lowercased().filter { $0 != " " && $0 != "\t" }
        switch trimmed {
        case "image/jpeg", "image/jpg": self = .jpeg
        case "image/png": self = .png
        case "image/heic", "image/heif": self = .heic
        default: return nil
        }
    }
}

/// The start of an image — the bytes that hold its metadata — and the removal of the location its Exif records.
///
/// A JPEG's Exif lies in an APP1 segment before the image data, a PNG's in an `eXIf` chunk, a HEIC's in an `Exif`
/// item its `meta` box locates. The location is the GPS directory (tag 0x8825) of the Exif's first image directory:
/// every field of it and every value those fields point to is overwritten with zeros and the directory left
/// empty, in place — nothing moves, so every other offset in the file stays right and the rest of the metadata (the
/// orientation a photo is shown in) stays. An Exif block whose structure does not hold together is zeroed whole.
public struct ImageHead: Sendable {
    /// How many bytes at the start of a file hold the metadata scrubbed here: an Exif block found later is not
    /// looked for, and a HEIC whose Exif item lies beyond it is refused unless the location is kept.
    public static let length = 256 * 1024

    public enum Failure: Error, Sendable, Equatable {
        /// The bytes are not a JPEG, PNG or HEIC image.
        case notAnImage
        /// The image ends inside its own header (a JPEG segment or PNG chunk runs past the end).
        case truncated
        /// A HEIC's Exif item lies beyond ``ImageHead/length``, where its location cannot be removed.
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
        guard let kind = ImageKind(sniffing: head) else { throw .notAnImage }
        switch kind {
        case .jpeg: try scrubJPEG(&head, isWhole: isWhole)
        case .png: try scrubPNG(&head, isWhole: isWhole)
        case .heic: try scrubHEIC(&head)
        }
        return kind
    }

    /// The image's kind, after checking its header holds together, without changing a byte.
    public static func inspect(_ head: [UInt8], isWhole: Bool) throws(Failure) -> ImageKind {
        var copy = head
        let kind = try scrubLocation(&copy, isWhole: isWhole)
        return kind
    }

    // MARK: JPEG

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
            guard end <= bytes.count else {
                if isWhole { throw .truncated }
                return
            }
            if marker == 0xE1, end - start >= 6, bytes[start..<start + 6].elementsEqual(Self.exifMark) {
                scrubTIFF(&bytes, range: start + 6..<end)
            }
            index = end
        }
        if isWhole { throw .truncated }
    }

    static let exifMark: [UInt8] = Array("Exif".utf8) + [0, 0]

    // MARK: PNG

    static func scrubPNG(_ bytes: inout [UInt8], isWhole: Bool) throws(Failure) {
        var index = 8
        while index + 8 <= bytes.count {
            let length = Int(readUInt32(bytes, index, bigEndian: true))
            let type = Array(bytes[index + 4..<index + 8])
            let start = index + 8
            let (end, overflow) = start.addingReportingOverflow(length)
            guard !overflow, end + 4 <= bytes.count else {
                if isWhole { throw .truncated }
                return
            }
            if type.elementsEqual(Array("eXIf".utf8)) {
                var tiff = start..<end
                if end - start >= 6, bytes[start..<start + 6].elementsEqual(Self.exifMark) { tiff = start + 6..<end }
                scrubTIFF(&bytes, range: tiff)
                let crc = CRC32.checksum(bytes[index + 4..<end])
                writeUInt32(&bytes, end, crc, bigEndian: true)
            }
            if type.elementsEqual(Array("IEND".utf8)) { return }
            index = end + 4
        }
        if isWhole { throw .truncated }
    }

    // MARK: HEIC

    static func scrubHEIC(_ bytes: inout [UInt8]) throws(Failure) {
        // The top-level boxes: ftyp, meta (the items and where they lie), mdat (their bytes).
        guard let meta = box("meta", in: bytes, range: 0..<bytes.count) else { return }
        // meta is a full box: four bytes of version and flags before its children.
        let children = meta.lowerBound + 4..<meta.upperBound
        guard let itemInfo = box("iinf", in: bytes, range: children),
            let locations = box("iloc", in: bytes, range: children)
        else { return }
        let exifItems = exifItemIDs(bytes, itemInfo)
        guard !exifItems.isEmpty else { return }
        for (offset, length) in itemExtents(bytes, locations, items: exifItems) {
            let (end, overflow) = offset.addingReportingOverflow(length)
            guard !overflow, end <= bytes.count else { throw .metadataOutOfReach }
            // An Exif item starts with the offset of its TIFF header (after "Exif\0\0").
            guard length >= 4 else { continue }
            let skip = Int(readUInt32(bytes, offset, bigEndian: true))
            let (tiffStart, skipOverflow) = (offset + 4).addingReportingOverflow(skip)
            guard !skipOverflow, tiffStart <= end else {
                zero(&bytes, offset + 4..<end)
                continue
            }
            scrubTIFF(&bytes, range: tiffStart..<end)
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
                guard large <= UInt64(Int.max) else { return nil }
                size = Int(large)
                header = 16
            } else if size == 0 {
                size = range.upperBound - index
            }
            guard size >= header, index + size <= range.upperBound else { return nil }
            if bytes[index + 4..<index + 8].elementsEqual(wanted) { return index + header..<index + size }
            index += size
        }
        return nil
    }

    /// The ids of the items of type `Exif` in an `iinf` box.
    static func exifItemIDs(_ bytes: [UInt8], _ info: Range<Int>) -> Set<Int> {
        guard info.count >= 6 else { return [] }
        let version = bytes[info.lowerBound]
        var index = info.lowerBound + 4 + (version == 0 ? 2 : 4)
        var ids: Set<Int> = []
        while index + 8 <= info.upperBound {
            let size = Int(readUInt32(bytes, index, bigEndian: true))
            guard size >= 8, index + size <= info.upperBound else { break }
            if bytes[index + 4..<index + 8].elementsEqual(Array("infe".utf8)), size >= 20 {
                let entryVersion = bytes[index + 8]
                if entryVersion >= 2 {
                    let idStart = index + 12
                    let id =
                        entryVersion == 2
                        ? Int(readUInt16(bytes, idStart)) : Int(readUInt32(bytes, idStart, bigEndian: true))
                    let typeStart = idStart + (entryVersion == 2 ? 2 : 4) + 2
                    if typeStart + 4 <= index + size, bytes[typeStart..<typeStart + 4].elementsEqual(Array("Exif".utf8))
                    {
                        ids.insert(id)
                    }
                }
            }
            index += size
        }
        return ids
    }

    /// The (offset, length) of each extent of `items` in an `iloc` box.
    static func itemExtents(_ bytes: [UInt8], _ locations: Range<Int>, items: Set<Int>) -> [(Int, Int)] {
        var index = locations.lowerBound
        guard index + 8 <= locations.upperBound else { return [] }
        let version = bytes[index]
        index += 4
        let offsetSize = Int(bytes[index] >> 4)
        let lengthSize = Int(bytes[index] & 0x0F)
        let baseOffsetSize = Int(bytes[index + 1] >> 4)
        let indexSize = version >= 1 ? Int(bytes[index + 1] & 0x0F) : 0
        index += 2
        func read(_ size: Int) -> Int? {
            guard index + size <= locations.upperBound else { return nil }
            defer { index += size }
            switch size {
            case 0: return 0
            case 2: return Int(readUInt16(bytes, index))
            case 4: return Int(readUInt32(bytes, index, bigEndian: true))
            case 8:
                let value = readUInt64(bytes, index)
                return value <= UInt64(Int.max) ? Int(value) : nil
            default: return nil
            }
        }
        guard let count = read(version < 2 ? 2 : 4) else { return [] }
        var extents: [(Int, Int)] = []
        for _ in 0..<count {
            guard let id = read(version < 2 ? 2 : 4) else { return extents }
            if version >= 1 { index += 2 }  // construction method
            guard let _ = read(2), let base = read(baseOffsetSize), let extentCount = read(2) else { return extents }
            for _ in 0..<extentCount {
                if indexSize > 0 { guard read(indexSize) != nil else { return extents } }
                guard let offset = read(offsetSize), let length = read(lengthSize) else { return extents }
                if items.contains(id) { extents.append((base + offset, length)) }
            }
        }
        return extents
    }

    // MARK: TIFF (Exif)

    /// Empties the GPS directory of the TIFF structure in `range` (zeroing its fields and their values), or zeroes
    /// the whole range when the structure does not hold together.
    static func scrubTIFF(_ bytes: inout [UInt8], range: Range<Int>) {
        guard !emptyGPS(&bytes, range: range) else { return }
        zero(&bytes, range)
    }

    /// Empties the GPS directory; `false` when the TIFF structure is malformed (nothing is changed then).
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
            let start = base + offset
            guard offset >= 8, start + 2 <= range.upperBound else { return nil }
            let count = u16(start)
            guard start + 2 + count * 12 + 4 <= range.upperBound else { return nil }
            return (start, count)
        }
        guard let first = directory(at: u32(base + 4)) else { return false }
        var gpsOffset: Int?
        for entry in 0..<first.count {
            let at = first.start + 2 + entry * 12
            if u16(at) == 0x8825 { gpsOffset = u32(at + 8) }
        }
        guard let gpsOffset else { return true }
        guard let gps = directory(at: gpsOffset) else { return false }
        let typeSizes = [1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8]
        var valueRanges: [Range<Int>] = []
        for entry in 0..<gps.count {
            let at = gps.start + 2 + entry * 12
            let (size, overflow) = (typeSizes[u16(at + 2)] ?? 1).multipliedReportingOverflow(by: u32(at + 4))
            guard !overflow else { return false }
            if size > 4 {
                let start = base + u32(at + 8)
                guard start >= base + 8, size <= range.upperBound - start else { return false }
                valueRanges.append(start..<start + size)
            }
        }
        for values in valueRanges { zero(&bytes, values) }
        // No fields, no next directory.
        zero(&bytes, gps.start..<gps.start + 2 + gps.count * 12 + 4)
        return true
    }

    static func zero(_ bytes: inout [UInt8], _ range: Range<Int>) {
        for index in range { bytes[index] = 0 }
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

/// CRC-32 (IEEE 802.3, the one PNG chunks carry).
enum CRC32 {
    static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }

    static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
