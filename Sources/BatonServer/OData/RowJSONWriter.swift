import BatonOData
import BatonSQL
import Foundation
import GRDB

/// Writes entities as OData JSON straight from SQLite rows.
///
/// Baton's SQLite storage keeps decimals, GUIDs, dates and times as canonical text, so most values can be
/// copied into the response after a strict shape check, without decoding them into `PrimitiveValue`s and
/// formatting them again. Anything that does not match the expected shape takes the general path (decode,
/// then ``BatonOData/PrimitiveValue/json(as:)``), so the output is the same either way.
struct RowJSONWriter {
    let columns: [(index: Int, property: Property)]
    let sequenceIndex: Int

    /// A writer for rows of a `select` whose columns are `names` (the last one `$seq`).
    init(names: [String], type: EntityType) {
        columns = names.enumerated().compactMap { index, name in type.property(named: name).map { (index, $0) } }
        sequenceIndex = names.count - 1
    }

    func write(_ row: Row, to out: inout [UInt8]) throws {
        let sequence: Int64 = row[sequenceIndex]
        out += Array(#"{"@odata.etag":"W/\""#.utf8)
        out += Array(String(sequence).utf8)
        out += Array(#"\"""#.utf8)
        for (index, property) in columns {
            out.append(UInt8(ascii: ","))
            Self.string(property.name, to: &out)
            out.append(UInt8(ascii: ":"))
            let value: DatabaseValue = row[index]
            try Self.value(value, property: property, to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    static func value(_ value: DatabaseValue, property: Property, to out: inout [UInt8]) throws {
        switch (value.storage, property.type) {
        case (.null, _):
            out += Array("null".utf8)
            return
        case (.string(let text), .string):
            string(text, to: &out)
            return
        case (.int64(let number), .boolean):
            out += Array((number != 0 ? "true" : "false").utf8)
            return
        case (.int64(let number), let type) where type.isIntegral:
            out += Array(String(number).utf8)
            return
        case (.string(let text), .decimal) where isPlainJSONNumber(text):
            out += Array(text.utf8)
            return
        case (.string(let text), .guid) where text.utf8.count == 36 && text.utf8.allSatisfy(isLowerHexOrDash):
            out.append(UInt8(ascii: "\""))
            out += Array(text.utf8)
            out.append(UInt8(ascii: "\""))
            return
        case (.string(let text), .dateTimeOffset):
            let bytes = Array(text.utf8)
            if bytes.count == 33, bytes[19] == UInt8(ascii: "."), bytes[32] == UInt8(ascii: "Z"),
                bytes[..<19].allSatisfy(isDateTimeByte)
            {
                out.append(UInt8(ascii: "\""))
                out += bytes[..<19]
                appendFraction(bytes[20..<32], to: &out)
                out += Array("Z\"".utf8)
                return
            }
        case (.string(let text), .date) where text.utf8.count == 10 && text.utf8.allSatisfy(isDateTimeByte):
            string(text, to: &out)
            return
        default:
            break
        }
        // The general path, for everything else.
        let decoded = try SQLDialect.sqlite.decode(SQLValue(value), as: property.type, column: property.name)
        out += decoded.json(as: property.type).serializedBytes
    }

    /// `.fffffffffff` without trailing zeros, or nothing when the fraction is zero.
    static func appendFraction(_ digits: ArraySlice<UInt8>, to out: inout [UInt8]) {
        var end = digits.endIndex
        while end > digits.startIndex, digits[end - 1] == UInt8(ascii: "0") { end -= 1 }
        guard end > digits.startIndex else { return }
        out.append(UInt8(ascii: "."))
        out += digits[digits.startIndex..<end]
    }

    static func isLowerHexOrDash(_ byte: UInt8) -> Bool {
        (48...57).contains(byte) || (97...102).contains(byte) || byte == UInt8(ascii: "-")
    }

    static func isDateTimeByte(_ byte: UInt8) -> Bool {
        (48...57).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ":") || byte == UInt8(ascii: "T")
    }

    /// Whether `text` is a JSON number without exponent: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`.
    static func isPlainJSONNumber(_ text: String) -> Bool {
        var bytes = Substring(text).utf8[...]
        if bytes.first == UInt8(ascii: "-") { bytes = bytes.dropFirst() }
        let integer = bytes.prefix { (48...57).contains($0) }
        guard !integer.isEmpty, integer.count == 1 || integer.first != UInt8(ascii: "0") else { return false }
        bytes = bytes.dropFirst(integer.count)
        guard let point = bytes.first else { return true }
        guard point == UInt8(ascii: "."), bytes.count > 1 else { return false }
        return bytes.dropFirst().allSatisfy { (48...57).contains($0) }
    }

    /// A JSON string, copied as is when nothing needs escaping.
    static func string(_ text: String, to out: inout [UInt8]) {
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            out.append(UInt8(ascii: "\""))
            out += Array(text.utf8)
            out.append(UInt8(ascii: "\""))
        } else {
            out += JSONValue.string(text).serializedBytes
        }
    }
}
