/// The escapers of every output language Baton writes user text into: HTML (text and attribute values), XML, and
/// CSV cells. There is one per language, and every page, template, CSDL document and export goes through it.
///
/// Each works on Unicode scalars (UTF-8 bytes for the ASCII it replaces), never on Swift `Character`s. A
/// `Character` is an extended grapheme cluster: U+0600 ARABIC NUMBER SIGN before `<`, or U+0338 COMBINING LONG
/// SOLIDUS OVERLAY after `>`, makes one `Character` that is not `<`, while a browser, an XML parser or a
/// spreadsheet reads code points and sees the `<` (or the CR LF, or the quote). Comparing `Character`s would copy
/// it through unescaped.
package enum Markup {
    /// `text` for HTML text or a quoted attribute value (single or double quotes): `&`, `<`, `>`, `"` and `'`
    /// become character references, and U+0000 becomes U+FFFD (what a browser makes of it anyway).
    package static func html(_ text: String) -> String {
        escape(text, replacing: htmlReplacement)
    }

    /// `text` for XML 1.0 text or a quoted attribute value: `&`, `<`, `>`, `"` and `'` become references, a tab,
    /// line feed or carriage return a numeric reference (so attribute-value normalisation keeps it), and a code
    /// point XML 1.0 does not allow (the other C0 controls, U+FFFE, U+FFFF) becomes U+FFFD, since no reference
    /// can stand for it.
    package static func xml(_ text: String) -> String {
        var needed = false
        for scalar in text.unicodeScalars where xmlReplacement(scalar) != nil {
            needed = true
            break
        }
        guard needed else { return text }
        var escaped = String.UnicodeScalarView()
        escaped.reserveCapacity(text.utf8.count + 16)
        for scalar in text.unicodeScalars {
            if let replacement = xmlReplacement(scalar) {
                escaped.append(contentsOf: replacement.unicodeScalars)
            } else {
                escaped.append(scalar)
            }
        }
        return String(escaped)
    }

    /// `value` as one cell of a CSV file (RFC 4180) that a spreadsheet opens as text: a value whose first code
    /// point is `=`, `+`, `-`, `@`, a tab or a carriage return (a formula, or what hides one) gets a leading `'`,
    /// and a value holding a comma, a quote, a carriage return or a line feed anywhere is quoted with its quotes
    /// doubled.
    package static func csvCell(_ value: String) -> String {
        var value = value
        if let first = value.unicodeScalars.first, formulaStarts.contains(first) { value = "'" + value }
        guard value.utf8.contains(where: { csvSpecial.contains($0) }) else { return value }
        var quoted = [UInt8]()
        quoted.reserveCapacity(value.utf8.count + 2)
        quoted.append(UInt8(ascii: "\""))
        for byte in value.utf8 {
            quoted.append(byte)
            if byte == UInt8(ascii: "\"") { quoted.append(byte) }
        }
        quoted.append(UInt8(ascii: "\""))
        return String(decoding: quoted, as: UTF8.self)
    }

    static let formulaStarts: Set<Unicode.Scalar> = ["=", "+", "-", "@", "\t", "\r"]
    static let csvSpecial: Set<UInt8> = [UInt8(ascii: ","), UInt8(ascii: "\""), UInt8(ascii: "\r"), UInt8(ascii: "\n")]

    static func htmlReplacement(_ byte: UInt8) -> StaticString? {
        switch byte {
        case UInt8(ascii: "&"): "&amp;"
        case UInt8(ascii: "<"): "&lt;"
        case UInt8(ascii: ">"): "&gt;"
        case UInt8(ascii: "\""): "&quot;"
        case UInt8(ascii: "'"): "&#39;"
        case 0: "\u{FFFD}"
        default: nil
        }
    }

    static func xmlReplacement(_ scalar: Unicode.Scalar) -> String? {
        switch scalar {
        case "&": "&amp;"
        case "<": "&lt;"
        case ">": "&gt;"
        case "\"": "&quot;"
        case "'": "&apos;"
        case "\t": "&#9;"
        case "\n": "&#10;"
        case "\r": "&#13;"
        case "\u{0}"..."\u{1F}", "\u{FFFE}", "\u{FFFF}": "\u{FFFD}"
        default: nil
        }
    }

    /// `text`'s UTF-8 bytes with each byte that `replacing` names replaced; all of them are ASCII, so a byte is
    /// a whole scalar and never part of a longer one.
    static func escape(_ text: String, replacing: (UInt8) -> StaticString?) -> String {
        guard text.utf8.contains(where: { replacing($0) != nil }) else { return text }
        var escaped = [UInt8]()
        escaped.reserveCapacity(text.utf8.count + 16)
        for byte in text.utf8 {
            if let replacement = replacing(byte) {
                replacement.withUTF8Buffer { escaped.append(contentsOf: $0) }
            } else {
                escaped.append(byte)
            }
        }
        return String(decoding: escaped, as: UTF8.self)
    }
}
