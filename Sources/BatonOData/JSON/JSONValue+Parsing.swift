extension JSONValue {
    /// The deepest nesting of arrays and objects a parsed document may have.
    public static let maximumDepth = 128

    /// Parses a complete JSON text (RFC 8259).
    ///
    /// - Throws: ``ODataError`` with code `syntax` and the byte offset of the problem, `limitExceeded` when
    ///   nesting passes ``maximumDepth``, or `invalidPayload` for a duplicate member name.
    public init(parsing text: some StringProtocol) throws(ODataError) {
        try self.init(parsing: Array(text.utf8))
    }

    /// Parses a complete JSON text from UTF-8 bytes.
    public init(parsing bytes: [UInt8]) throws(ODataError) {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.parseValue(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else {
            throw parser.error("Unexpected text after the end of the JSON value")
        }
        self = value
    }
}

/// A recursive-descent JSON reader over UTF-8 bytes.
struct JSONParser {
    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    func error(_ message: String, at position: Int? = nil) -> ODataError {
        ODataError(.syntax, "\(message) in JSON", position: position ?? index)
    }

    mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    mutating func parseValue(depth: Int) throws(ODataError) -> JSONValue {
        guard depth <= JSONValue.maximumDepth else {
            throw ODataError(
                .limitExceeded, "JSON nests deeper than \(JSONValue.maximumDepth) levels", position: index)
        }
        guard index < bytes.count else { throw error("Unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectWord("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectWord("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectWord("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try parseNumber())
        default: throw error("Unexpected character '\(Character(Unicode.Scalar(bytes[index])))'")
        }
    }

    mutating func expectWord(_ word: String) throws(ODataError) {
        let start = index
        for byte in word.utf8 {
            guard index < bytes.count, bytes[index] == byte else { throw error("Invalid literal", at: start) }
            index += 1
        }
    }

    mutating func parseObject(depth: Int) throws(ODataError) -> JSONValue {
        index += 1
        var members: [(String, JSONValue)] = []
        var seen: Set<String> = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                throw error("Expected a quoted member name")
            }
            let keyStart = index
            let key = try parseString()
            // Small objects (entities) compare names directly; a set takes over for large ones.
            let duplicate: Bool
            if members.count < 24 {
                duplicate = members.contains { $0.0 == key }
            } else {
                if seen.isEmpty { seen = Set(members.map(\.0)) }
                duplicate = !seen.insert(key).inserted
            }
            guard !duplicate else {
                throw ODataError(.invalidPayload, "Duplicate JSON member '\(key)'", position: keyStart, target: key)
            }
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw error("Expected ':'") }
            index += 1
            skipWhitespace()
            members.append((key, try parseValue(depth: depth + 1)))
            skipWhitespace()
            guard index < bytes.count else { throw error("Unterminated object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "}") else { throw error("Expected ',' or '}'") }
            index += 1
            return .object(members)
        }
    }

    mutating func parseArray(depth: Int) throws(ODataError) -> JSONValue {
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            skipWhitespace()
            elements.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw error("Unterminated array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            guard bytes[index] == UInt8(ascii: "]") else { throw error("Expected ',' or ']'") }
            index += 1
            return .array(elements)
        }
    }

    mutating func parseNumber() throws(ODataError) -> String {
        let start = index
        func digits() -> Int {
            let from = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            return index - from
        }
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        if index < bytes.count, bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if digits() == 0 {
            throw error("Invalid number", at: start)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw error("Expected digits after '.'") }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard digits() > 0 else { throw error("Expected digits in exponent") }
        }
        return String(decoding: bytes[start..<index], as: UTF8.self)
    }

    mutating func parseString() throws(ODataError) -> String {
        let start = index
        index += 1
        // Most strings have no escapes: one scan, one String.
        let contentStart = index
        // The bytes' high bits together: none set, the string is ASCII and needs no UTF-8 validation.
        var highBits: UInt8 = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return try text(contentStart..<(index - 1), isASCII: highBits < 0x80)
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("Unescaped control character in string") }
            highBits |= byte
            index += 1
        }
        var scalars = String.UnicodeScalarView()
        var chunkStart = contentStart
        func flush(_ upTo: Int) throws(ODataError) {
            if upTo > chunkStart { scalars.append(contentsOf: try text(chunkStart..<upTo).unicodeScalars) }
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                try flush(index)
                index += 1
                return String(scalars)
            }
            if byte < 0x20 { throw error("Unescaped control character in string") }
            if byte == UInt8(ascii: "\\") {
                try flush(index)
                index += 1
                guard index < bytes.count else { break }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{08}")
                case UInt8(ascii: "f"): scalars.append("\u{0C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    var code = try parseHex4()
                    if (0xD800...0xDBFF).contains(code) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw error("Unpaired surrogate escape") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("Unpaired surrogate escape") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw error("Invalid \\u escape") }
                    // PostgreSQL stores no NUL in text, and the device's store reads text as a C string: refused.
                    guard code != 0 else { throw error("\\u0000 (NUL) is not allowed in a string") }
                    scalars.append(scalar)
                default: throw error("Invalid escape '\\\(Character(Unicode.Scalar(escape)))'")
                }
                chunkStart = index
                continue
            }
            index += 1
        }
        throw error("Unterminated string", at: start)
    }

    /// The bytes of `range` as text; invalid UTF-8 is refused, never replaced.
    ///
    /// ASCII (`isASCII`, which the caller saw while scanning) is valid as it stands and is made a `String` without a
    /// second look; `String(validating:as:)` is generic and looked up the runtime's metadata for its result type on
    /// every string, 40% of parsing a batch's JSON under `perf`.
    func text(_ range: Range<Int>, isASCII: Bool = false) throws(ODataError) -> String {
        if isASCII {
            return bytes.withUnsafeBufferPointer {
                String(decoding: UnsafeBufferPointer(rebasing: $0[range]), as: UTF8.self)
            }
        }
        guard let text = String(validating: bytes[range], as: UTF8.self) else {
            throw error("The string is not valid UTF-8", at: range.lowerBound)
        }
        return text
    }

    mutating func parseHex4() throws(ODataError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw error("Truncated \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard let digit = hexDigitValue(bytes[index]) else { throw error("Invalid hex digit in \\u escape") }
            value = value * 16 + UInt32(digit)
            index += 1
        }
        return value
    }
}

/// The value of an ASCII hex digit, or `nil`.
func hexDigitValue(_ byte: UInt8) -> UInt8? {
    switch byte {
    case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
    case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
    case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
    default: nil
    }
}
