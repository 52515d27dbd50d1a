/// Percent-decoded URL text that remembers, for every decoded character, where it stood in the raw input,
/// so errors point at the character the user wrote.
struct SourceText: Sendable {
    /// The decoded characters (Unicode scalars).
    var scalars: [Unicode.Scalar]
    /// `rawOffsets[i]` is the raw offset of scalar `i`; the last entry is the raw end offset.
    var rawOffsets: [Int]
    /// Whether a percent-encoded delimiter is data, never a separator (RFC 3986). Form encoding escapes every
    /// delimiter, so text read as form-encoded has it `false`. Default: true.
    var escapedDelimitersAreData = true

    /// Decodes `raw`, whose first character stands at `baseOffset` in the whole input. With `plusAsSpace`, an
    /// unescaped `+` is read as a space, as HTML forms and most HTTP libraries' query builders encode it
    /// (`application/x-www-form-urlencoded`); `%2B` is a `+` either way. Offsets are unchanged: one raw `+`, one
    /// decoded space.
    ///
    /// A NUL (`%00`, or a raw zero byte in a `$batch` request line) is refused wherever it stands: in a string
    /// literal, a key or a `$search` word PostgreSQL refuses it (SQLSTATE 22021) where SQLite would store or
    /// compare it, and stored text never holds one (JSON bodies refuse `\u0000`), so both engines answer the same.
    ///
    /// - Throws: ``ODataError`` (`syntax`) for a malformed `%` escape, bytes that are not UTF-8, or a NUL.
    init(raw: some StringProtocol, baseOffset: Int = 0, plusAsSpace: Bool = false) throws(ODataError) {
        var bytes: [UInt8] = []
        var byteOffsets: [Int] = []
        let plus = UInt8(ascii: "+")
        escapedDelimitersAreData = !plusAsSpace
        // Most URLs are plain ASCII without escapes or NULs: one scalar per byte, at its own offset.
        if raw.utf8.allSatisfy({ $0 < 0x80 && $0 != UInt8(ascii: "%") && $0 != 0 }) {
            scalars = raw.utf8.map { plusAsSpace && $0 == plus ? " " : Unicode.Scalar($0) }
            rawOffsets = Array(baseOffset...(baseOffset + scalars.count))
            return
        }
        let rawBytes = Array(raw.utf8)
        // Raw offsets count Unicode scalars of the raw text; map each raw byte to its scalar offset.
        var scalarIndexOfByte: [Int] = []
        scalarIndexOfByte.reserveCapacity(rawBytes.count + 1)
        var scalarCount = 0
        for byte in rawBytes {
            if byte & 0xC0 != 0x80 && !scalarIndexOfByte.isEmpty { scalarCount += 1 }
            scalarIndexOfByte.append(scalarCount)
        }
        let rawScalarTotal = rawBytes.isEmpty ? 0 : scalarCount + 1
        var index = 0
        while index < rawBytes.count {
            let byte = rawBytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < rawBytes.count, let high = hexDigitValue(rawBytes[index + 1]),
                    let low = hexDigitValue(rawBytes[index + 2])
                else {
                    throw ODataError(
                        .syntax, "Malformed percent-encoding: '%' must be followed by two hex digits",
                        position: baseOffset + scalarIndexOfByte[index])
                }
                bytes.append(high * 16 + low)
                byteOffsets.append(baseOffset + scalarIndexOfByte[index])
                index += 3
            } else {
                bytes.append(plusAsSpace && byte == plus ? UInt8(ascii: " ") : byte)
                byteOffsets.append(baseOffset + scalarIndexOfByte[index])
                index += 1
            }
        }
        var scalars: [Unicode.Scalar] = []
        var offsets: [Int] = []
        var decoder = UTF8()
        var iterator = bytes.makeIterator()
        var byteIndex = 0
        loop: while true {
            let start = byteIndex
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar):
                guard scalar != "\u{0}" else {
                    throw ODataError(
                        .syntax, "A URL cannot hold the NUL character (%00); remove it from the value",
                        position: byteOffsets[start])
                }
                scalars.append(scalar)
                offsets.append(byteOffsets[start])
                byteIndex += UTF8.width(scalar)
            case .emptyInput:
                break loop
            case .error:
                throw ODataError(
                    .syntax, "The URL contains bytes that are not valid UTF-8 after percent-decoding",
                    position: start < byteOffsets.count ? byteOffsets[start] : baseOffset)
            }
        }
        offsets.append(baseOffset + rawScalarTotal)
        self.scalars = scalars
        self.rawOffsets = offsets
    }

    /// The decoded text between two scalar indexes.
    func text(_ range: Range<Int>) -> String {
        let slice = scalars[range]
        if slice.allSatisfy({ $0.isASCII }) {
            // Straight into the string's storage (small strings need no allocation at all).
            return String(unsafeUninitializedCapacity: slice.count) { buffer in
                for (offset, scalar) in slice.enumerated() {
                    buffer[offset] = UInt8(truncatingIfNeeded: scalar.value)
                }
                return slice.count
            }
        }
        // Through UTF-8 bytes: appending scalars to a String one by one was a tenth of parsing a key URL.
        var bytes: [UInt8] = []
        bytes.reserveCapacity(range.count)
        for scalar in scalars[range] {
            if scalar.isASCII {
                bytes.append(UInt8(truncatingIfNeeded: scalar.value))
            } else if let encoded = UTF8.encode(scalar) {
                bytes.append(contentsOf: encoded)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Whether scalar `index` may act as a delimiter: it was written as itself, or the text is form-encoded.
    func isDelimiter(at index: Int) -> Bool {
        !escapedDelimitersAreData || rawOffsets[index + 1] - rawOffsets[index] == 1
    }

    /// The whole decoded text.
    var string: String { text(0..<scalars.count) }
}

extension StringProtocol {
    /// `count` (characters), without grapheme breaking when the text is ASCII without a carriage return: then
    /// every byte is one character.
    var characterCount: Int {
        utf8.allSatisfy { $0 < 0x80 && $0 != 0x0D } ? utf8.count : count
    }
}

extension Substring {
    /// Splits at an ASCII separator, keeping empty pieces. Compares bytes: `split(separator:)` compares
    /// characters, a tenth of parsing a query.
    func pieces(separatedBy separator: UInt8) -> [Substring] {
        var pieces: [Substring] = []
        var start = startIndex
        var index = utf8.startIndex
        while index < utf8.endIndex {
            if utf8[index] == separator {
                pieces.append(self[start..<index])
                start = utf8.index(after: index)
            }
            utf8.formIndex(after: &index)
        }
        pieces.append(self[start..<endIndex])
        return pieces
    }

    /// The first position of an ASCII byte.
    func firstIndex(ofByte byte: UInt8) -> Index? { utf8.firstIndex(of: byte) }
}
