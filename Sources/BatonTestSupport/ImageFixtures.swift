/// Images built byte by byte for tests: a JPEG and a PNG whose Exif metadata records where they were taken, a
/// HEIC whose `meta` box locates such an Exif item, and what the scrub must leave of each. Their pixel data is a
/// placeholder (the server never decodes pixels); their structure — segments, chunks, boxes, checksums — is
/// real.
public enum ImageFixtures {
    /// The latitude and longitude bytes the fixtures' GPS fields hold (rationals), to look for after a scrub.
    public static let locationBytes: [UInt8] = [
        0, 0, 0, 50, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0, 1, 0, 0, 0x13, 0x88, 0, 0, 0, 100,
    ]

    /// A TIFF block (big-endian) whose first directory has an orientation and a GPS pointer, and whose GPS
    /// directory holds a latitude reference and latitude (three rationals, ``locationBytes``).
    public static func exifTIFF() -> [UInt8] {
        var tiff: [UInt8] = [0x4D, 0x4D, 0, 42, 0, 0, 0, 8]
        // IFD0 at 8: two entries, then the next-IFD pointer (0).
        tiff += u16(2)
        tiff += u16(0x0112) + u16(3) + u32(1) + u16(6) + u16(0)  // Orientation = 6 (rotate 90°)
        tiff += u16(0x8825) + u16(4) + u32(1) + u32(38)  // GPSInfo → 38
        tiff += u32(0)
        // GPS IFD at 38: two entries, next 0; the latitude's rationals at 68.
        tiff += u16(2)
        tiff += u16(0x0001) + u16(2) + u32(2) + Array("N".utf8) + [0, 0, 0]  // GPSLatitudeRef "N"
        tiff += u16(0x0002) + u16(5) + u32(3) + u32(68)  // GPSLatitude → 68
        tiff += u32(0)
        tiff += locationBytes
        return tiff
    }

    /// A JPEG: SOI, an APP1 Exif segment with ``exifTIFF()``, a scan (placeholder data), EOI.
    public static func jpeg(scanBytes: Int = 64) -> [UInt8] {
        let exif = Array("Exif".utf8) + [0, 0] + exifTIFF()
        var bytes: [UInt8] = [0xFF, 0xD8]
        bytes += [0xFF, 0xE1] + u16(exif.count + 2) + exif
        bytes += [0xFF, 0xDA] + u16(8) + [1, 1, 0, 0, 63, 0]
        bytes += (0..<scanBytes).map { UInt8(truncatingIfNeeded: $0 * 7 + 1) & 0xFE }
        bytes += [0xFF, 0xD9]
        return bytes
    }

    /// A 1×1 PNG with an `eXIf` chunk holding ``exifTIFF()``, every chunk with its CRC.
    public static func png() -> [UInt8] {
        var bytes: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]
        bytes += chunk("IHDR", u32(1) + u32(1) + [8, 2, 0, 0, 0])
        bytes += chunk("eXIf", exifTIFF())
        // zlib, one stored block: the scanline (filter 0, one RGB pixel), then its Adler-32.
        let scanline: [UInt8] = [0, 0xC0, 0x40, 0x20]
        let idat: [UInt8] = [0x78, 0x01, 0x01] + [4, 0, 0xFB, 0xFF] + scanline + adler32(scanline)
        bytes += chunk("IDAT", idat)
        bytes += chunk("IEND", [])
        return bytes
    }

    /// A HEIC's structure: `ftyp`, a `meta` box whose `iinf` names an `Exif` item (id 2) and whose `iloc` places it
    /// in `mdat`, which holds the item (offset, "Exif\0\0", ``exifTIFF()``) and placeholder image data.
    public static func heic() -> [UInt8] {
        let ftyp = box("ftyp", Array("heic".utf8) + u32(0) + Array("mif1heic".utf8))
        let exifItem = u32(6) + Array("Exif".utf8) + [0, 0] + exifTIFF()
        let image: [UInt8] = Array(repeating: 0x5A, count: 32)
        func meta(exifOffset: Int) -> [UInt8] {
            let hdlr = box("hdlr", u32(0) + u32(0) + Array("pict".utf8) + u32(0) + u32(0) + u32(0) + [0])
            let infe1 = box("infe", [2, 0, 0, 0] + u16(1) + u16(0) + Array("hvc1".utf8) + [0])
            let infe2 = box("infe", [2, 0, 0, 0] + u16(2) + u16(0) + Array("Exif".utf8) + [0])
            let iinf = box("iinf", [0, 0, 0, 0] + u16(2) + infe1 + infe2)
            // version 0, offset size 4, length size 4, base offset size 0; two items of one extent each.
            var iloc: [UInt8] = [0, 0, 0, 0, 0x44, 0x00] + u16(2)
            iloc += u16(1) + u16(0) + u16(1) + u32(exifOffset + exifItem.count) + u32(image.count)
            iloc += u16(2) + u16(0) + u16(1) + u32(exifOffset) + u32(exifItem.count)
            return box("meta", [0, 0, 0, 0] + hdlr + iinf + box("iloc", iloc))
        }
        let metaLength = meta(exifOffset: 0).count
        let exifOffset = ftyp.count + metaLength + 8
        return ftyp + meta(exifOffset: exifOffset) + box("mdat", exifItem + image)
    }

    public static func u16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }

    public static func u32(_ value: Int) -> [UInt8] {
        [UInt8(value >> 24 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    static func box(_ type: String, _ content: [UInt8]) -> [UInt8] {
        u32(content.count + 8) + Array(type.utf8) + content
    }

    static func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
        let typed = Array(type.utf8) + data
        return u32(data.count) + typed + u32(Int(crc32(typed)))
    }

    /// CRC-32 as PNG computes it, bit by bit (the fixtures' own, independent of the code under test).
    public static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }

    static func adler32(_ bytes: [UInt8]) -> [UInt8] {
        var a: UInt32 = 1
        var b: UInt32 = 0
        for byte in bytes {
            a = (a + UInt32(byte)) % 65521
            b = (b + a) % 65521
        }
        return u32(Int(b << 16 | a))
    }

    /// Whether `bytes` contain `pattern`.
    public static func contains(_ bytes: [UInt8], _ pattern: [UInt8]) -> Bool {
        guard pattern.count <= bytes.count else { return false }
        return (0...(bytes.count - pattern.count)).contains { bytes[$0..<$0 + pattern.count].elementsEqual(pattern) }
    }
}
