/// Reads the parts of HTTP header values (RFC 9110): tokens, quoted strings, entity tags. Works on the value's
/// UTF-8 bytes — header syntax is ASCII; other bytes are only ever inside quoted strings, kept as they are.
package struct HeaderScanner {
    let bytes: [UInt8]
    var index = 0

    init(_ text: String) { bytes = Array(text.utf8) }

    var isAtEnd: Bool { index >= bytes.count }

    func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func take(_ character: Unicode.Scalar) -> Bool {
        guard character.isASCII, peek() == UInt8(character.value) else { return false }
        index += 1
        return true
    }

    mutating func skipSpaces() {
        while let byte = peek(), byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") { index += 1 }
    }

    /// `byte` with an ASCII capital letter made small (header names and tokens compare case-insensitively).
    package static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte) ? byte + 32 : byte
    }

    /// `text` with its ASCII capital letters made small and every other byte kept: how names that compare without
    /// case (header names, query option names, media types) are folded. Unicode's lower-casing would make a Kelvin
    /// sign a `k`.
    package static func asciiLowercased(_ text: some StringProtocol) -> String {
        String(decoding: text.utf8.map(asciiLowercased), as: UTF8.self)
    }

    /// `text` with its ASCII small letters made capital and every other byte kept: a request's method (a token).
    /// Unicode's upper-casing would make `poſt` a `POST`.
    package static func asciiUppercased(_ text: some StringProtocol) -> String {
        String(decoding: text.utf8.map { $0 &- UInt8(ascii: "a") < 26 ? $0 - 32 : $0 }, as: UTF8.self)
    }

    /// Whether two header names are the same name: ASCII letters compared without case, every other byte exactly
    /// (RFC 9110 §5.1: a name is a case-insensitive token, so ASCII). A Unicode lower-casing would make a
    /// name that is no token (a Kelvin sign for a `k`) equal to one, and costs two strings per comparison.
    package static func sameName(_ first: String, _ second: String) -> Bool {
        first.utf8.count == second.utf8.count
            && first.utf8.elementsEqual(second.utf8) { asciiLowercased($0) == asciiLowercased($1) }
    }

    /// A media type's `type/subtype`, ASCII lower-cased (leading spaces skipped); `nil` when the value does not
    /// start with one. The scanner stops after it, at the parameters — or, `inList` (an `Accept` value), at the `,`
    /// before the next one.
    mutating func mediaType(inList: Bool = false) -> String? {
        skipSpaces()
        let start = index
        guard let type = token(), take("/"), let subtype = token(),
            endsParameter() || (inList && peek() == UInt8(ascii: ","))
        else {
            index = start
            return nil
        }
        return Self.asciiLowercased("\(type)/\(subtype)")
    }

    /// The media type `type/subtype` a `Content-Type` value starts with, ASCII lower-cased; `nil` without one (a missing
    /// value, or one whose type is not a token pair ending where a parameter may). Compared by byte: Unicode
    /// lower-casing and `Character` prefixes read a value glued to a combining mark, or a Kelvin sign, as another.
    package static func mediaType(of value: String?) -> String? {
        guard let value else { return nil }
        var scanner = HeaderScanner(value)
        return scanner.mediaType()
    }

    /// The weight, in thousandths, that an `Accept` value gives `mediaType` (`type/subtype`, lower-case): the `q` of
    /// its most specific matching range — `type/subtype` over `type/*` over `*/*` — 1000 without one, 0 when no range
    /// matches (RFC 9110 §12.5.1). `nil` when the value is not a list of media ranges, each with optional parameters
    /// and an optional weight (RFC 9110 §12.4.2: `0` to `1` with at most three decimals). Read by byte, ASCII letters
    /// folded: a range glued to a combining mark, or spelled with a Kelvin sign, matches nothing.
    package static func acceptWeight(_ accept: String, for mediaType: String) -> Int? {
        var scanner = HeaderScanner(accept)
        var best: (specificity: Int, weight: Int) = (0, 0)
        while true {
            scanner.skipSpaces()
            if scanner.isAtEnd { return best.weight }
            if scanner.take(",") { continue }
            guard let range = scanner.mediaType(inList: true) else { return nil }
            var weight = 1000
            while true {
                scanner.skipSpaces()
                guard scanner.take(";") else { break }
                scanner.skipSpaces()
                guard let name = scanner.token(), scanner.take("=") else { return nil }
                if sameName(name, "q") {
                    guard let value = scanner.token(), let parsed = qualityValue(value) else { return nil }
                    weight = parsed
                } else {
                    guard scanner.token() != nil || scanner.quotedString() != nil else { return nil }
                }
            }
            scanner.skipSpaces()
            guard scanner.isAtEnd || scanner.take(",") else { return nil }
            let specificity: Int
            if range == mediaType {
                specificity = 3
            } else if range == "*/*" {
                specificity = 1
            } else if range.utf8.suffix(2).elementsEqual("/*".utf8), mediaType.utf8.starts(with: range.utf8.dropLast())
            {
                specificity = 2
            } else {
                specificity = 0
            }
            if specificity > best.specificity { best = (specificity, weight) }
        }
    }

    /// An RFC 9110 `qvalue` in thousandths: `0`, `0.` and up to three digits, `1`, or `1.` and up to three zeros.
    static func qualityValue(_ text: String) -> Int? {
        let bytes = Array(text.utf8)
        guard let first = bytes.first, first == UInt8(ascii: "0") || first == UInt8(ascii: "1") else { return nil }
        guard bytes.count > 1 else { return first == UInt8(ascii: "1") ? 1000 : 0 }
        guard bytes[1] == UInt8(ascii: "."), bytes.count <= 5 else { return nil }
        var thousandths = 0
        var scale = 100
        for byte in bytes[2...] {
            guard byte &- UInt8(ascii: "0") < 10 else { return nil }
            thousandths += Int(byte &- UInt8(ascii: "0")) * scale
            scale /= 10
        }
        if first == UInt8(ascii: "1") { return thousandths == 0 ? 1000 : nil }
        return thousandths
    }

    /// Whether what was just read ends where a parameter may end: at the end, a space or tab, or a `;` (anything
    /// else — a combining mark, a CR — glued to a token makes the whole value malformed, not the token shorter).
    func endsParameter() -> Bool {
        guard let byte = peek() else { return true }
        return byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") || byte == UInt8(ascii: ";")
    }

    /// Whether `byte` is an RFC 9110 `tchar` (visible ASCII except the delimiters).
    static func isTokenByte(_ byte: UInt8) -> Bool {
        guard byte > 32, byte < 127 else { return false }
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "("), UInt8(ascii: ")"), UInt8(ascii: ","), UInt8(ascii: "/"),
            UInt8(ascii: ":"), UInt8(ascii: ";"), UInt8(ascii: "<"), UInt8(ascii: "="), UInt8(ascii: ">"),
            UInt8(ascii: "?"), UInt8(ascii: "@"), UInt8(ascii: "["), UInt8(ascii: "\\"), UInt8(ascii: "]"),
            UInt8(ascii: "{"), UInt8(ascii: "}"):
            return false
        default:
            return true
        }
    }

    /// An RFC 9110 token.
    mutating func token() -> String? {
        let start = index
        while let byte = peek(), Self.isTokenByte(byte) { index += 1 }
        return index > start ? String(decoding: bytes[start..<index], as: UTF8.self) : nil
    }

    /// A quoted string, unescaped.
    mutating func quotedString() -> String? {
        let start = index
        guard take("\"") else { return nil }
        var text: [UInt8] = []
        while let byte = peek() {
            index += 1
            if byte == UInt8(ascii: "\"") { return String(decoding: text, as: UTF8.self) }
            if byte == UInt8(ascii: "\\"), let next = peek() {
                index += 1
                text.append(next)
            } else {
                text.append(byte)
            }
        }
        index = start
        return nil
    }

    mutating func etag() -> ETag? {
        let start = index
        var weak = false
        if peek() == UInt8(ascii: "W"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "/") {
            weak = true
            index += 2
        }
        guard take("\"") else {
            index = start
            return nil
        }
        let opaqueStart = index
        while let byte = peek(), byte != UInt8(ascii: "\"") {
            // etagc: %x21 / %x23-7E (RFC 9110; obs-text is not accepted).
            guard byte == 0x21 || (byte >= 0x23 && byte < 0x7F) else {
                index = start
                return nil
            }
            index += 1
        }
        guard take("\"") else {
            index = start
            return nil
        }
        return ETag(String(decoding: bytes[opaqueStart..<index - 1], as: UTF8.self), isWeak: weak)
    }
}
