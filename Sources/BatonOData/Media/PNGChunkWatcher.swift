/// Follows a PNG's chunks in the bytes after its head as they stream by, and refuses a chunk that may hold a
/// location (Exif or XMP text), which can no longer be cleaned there.
public struct PNGChunkWatcher: Sendable {
    /// The offset in the file where the next chunk header starts.
    var nextChunk: Int
    /// The bytes of a chunk header read so far (a header may be split between two reads).
    var header: [UInt8] = []
    /// Whether `IEND` went by.
    public private(set) var ended = false

    init(nextChunk: Int, header: [UInt8] = []) {
        self.nextChunk = nextChunk
        self.header = header
    }

    static func isMetadata(_ type: [UInt8]) -> Bool {
        ["eXIf", "iTXt", "zTXt", "tEXt"].contains { type.elementsEqual(Array($0.utf8)) }
    }

    /// Follows `bytes`, which start at `offset` in the file (right after the bytes fed or scrubbed before).
    ///
    /// - Throws: ``ImageHead/Failure/metadataOutOfReach`` for a metadata chunk.
    public mutating func feed(_ bytes: some Collection<UInt8>, at offset: Int) throws(ImageHead.Failure) {
        let array = Array(bytes)
        // Where, in `array`, the next header byte wanted lies.
        var local = nextChunk + header.count - offset
        while !ended, local >= 0, local < array.count {
            let take = min(8 - header.count, array.count - local)
            header += array[local..<local + take]
            local += take
            guard header.count == 8 else { return }
            let length = header[0..<4].reduce(0) { $0 << 8 | Int($1) }
            let type = Array(header[4..<8])
            if Self.isMetadata(type) { throw .metadataOutOfReach }
            if type.elementsEqual(Array("IEND".utf8)) { ended = true }
            nextChunk = offset + local + length + 4
            header = []
            local = nextChunk - offset
        }
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
