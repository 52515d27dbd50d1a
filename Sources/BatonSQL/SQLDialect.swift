import BatonOData
import Foundation

/// The SQL dialects BatonSQL writes.
public enum SQLDialect: Sendable, Hashable {
    /// SQLite 3: decimals and temporal values are stored as text chosen so that comparison and order are
    /// right (see ``columnType(for:)``).
    case sqlite
    /// PostgreSQL: native `numeric`, `timestamptz`, `date`, `time`, `uuid`, `boolean` and `bytea` columns.
    case postgres

    /// Quotes an identifier (`"Name"`, with embedded quotes doubled).
    public func quote(_ identifier: String) -> String {
        // Model identifiers never contain quotes; only pay for the replacement when one does.
        guard identifier.utf8.contains(UInt8(ascii: "\"")) else { return "\"" + identifier + "\"" }
        return "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }

    /// The column type that stores an Edm type.
    ///
    /// SQLite: integers and booleans `INTEGER`, doubles `REAL`, binary `BLOB`; everything else `TEXT` —
    /// decimals as their exact text (compared as `REAL`), dates `YYYY-MM-DD`, date-times as fixed-width UTC
    /// text, times `HH:MM:SS.ffffffffffff`, GUIDs lower-case, durations as decimal seconds.
    public func columnType(for type: EdmPrimitiveType) -> String {
        switch self {
        case .sqlite:
            switch type {
            case .boolean, .byte, .sbyte, .int16, .int32, .int64: "INTEGER"
            case .double, .single: "REAL"
            case .binary: "BLOB"
            default: "TEXT"
            }
        case .postgres:
            switch type {
            case .boolean: "boolean"
            case .byte, .sbyte, .int16: "smallint"
            case .int32: "integer"
            case .int64: "bigint"
            case .double: "double precision"
            case .single: "real"
            case .decimal, .duration: "numeric"
            case .binary: "bytea"
            case .guid: "uuid"
            case .date: "date"
            case .dateTimeOffset: "timestamptz"
            case .timeOfDay: "time"
            case .string: "text"
            }
        }
    }

    /// The SQL value that stores `value` in a column of `type`.
    public func encode(_ value: PrimitiveValue, as type: EdmPrimitiveType) -> SQLValue {
        switch value {
        case .null: return .null
        case .boolean(let flag): return self == .sqlite ? .integer(flag ? 1 : 0) : .text(flag ? "true" : "false")
        case .integer(let number):
            switch type {
            case .double, .single: return .real(Double(number))
            case .decimal: return .text(String(number))
            default: return .integer(number)
            }
        case .decimal(let number):
            if type == .double || type == .single { return .real(NSDecimalNumber(decimal: number).doubleValue) }
            return .text(PrimitiveValue.decimal(number).urlLiteral)
        case .double(let number): return .real(number)
        case .string(let text): return .text(text)
        case .guid(let uuid): return .text(uuid.lowercasedString)
        case .date(let date): return .text(date.description)
        case .dateTimeOffset(let instant): return .text(self == .sqlite ? instant.sortableUTCText : instant.description)
        case .timeOfDay(let time):
            return .text(self == .sqlite ? time.sortableText : time.description)
        case .duration(let duration): return .text(PrimitiveValue.decimal(duration.seconds).urlLiteral)
        case .binary(let bytes): return .blob(bytes)
        }
    }

    /// The stored form of an `Edm.Decimal` from its canonical text (`PrimitiveValue/canonicalDecimal(_:)` of a
    /// numeral `PrimitiveValue(json:for:)` accepted): the same as encoding the decimal, without formatting it.
    public func encodeDecimal(canonicalText: String) -> SQLValue { .text(canonicalText) }

    /// Reads a stored SQL value back as a value of `type`.
    ///
    /// - Throws: ``BatonSQLError`` when the stored value does not decode as `type` (a corrupt or foreign row).
    public func decode(_ value: SQLValue, as type: EdmPrimitiveType, column: String) throws(BatonSQLError)
        -> PrimitiveValue
    {
        func fail() -> BatonSQLError {
            BatonSQLError(.corruptValue, "Column '\(column)' holds a value that is not a valid \(type.rawValue)")
        }
        switch (value, type) {
        case (.null, _): return .null
        case (.integer(let number), .boolean): return .boolean(number != 0)
        case (.text(let text), .boolean): return .boolean(text == "true" || text == "t")
        case (.integer(let number), _) where type.isIntegral: return .integer(number)
        case (.integer(let number), .double), (.integer(let number), .single): return .double(Double(number))
        case (.real(let number), .double), (.real(let number), .single): return .double(number)
        case (.integer(let number), .decimal): return .decimal(Decimal(number))
        case (.text(let text), .decimal):
            guard let number = Decimal(odataText: text) else { throw fail() }
            return .decimal(number)
        case (.text(let text), .string): return .string(text)
        case (.text(let text), .guid):
            guard let uuid = UUID(canonicalText: text) else { throw fail() }
            return .guid(uuid)
        case (.text(let text), .date):
            guard let date = ODataDate(parsing: text) else { throw fail() }
            return .date(date)
        case (.text(let text), .dateTimeOffset):
            guard let instant = ODataDateTimeOffset(parsing: text) else { throw fail() }
            return .dateTimeOffset(instant)
        case (.text(let text), .timeOfDay):
            guard let time = ODataTimeOfDay(parsing: text) else { throw fail() }
            return .timeOfDay(time)
        case (.text(let text), .duration):
            guard let seconds = Decimal(odataText: text) else { throw fail() }
            return .duration(ODataDuration(seconds: seconds))
        case (.blob(let bytes), .binary): return .binary(bytes)
        default: throw fail()
        }
    }
}

extension ODataTimeOfDay {
    /// Fixed-width text (`08:30:00.000000000000`) whose order is chronological.
    public var sortableText: String {
        let fraction = String(picoseconds)
        return "\(hour < 10 ? "0" : "")\(hour):\(minute < 10 ? "0" : "")\(minute):\(second < 10 ? "0" : "")\(second)."
            + String(repeating: "0", count: 12 - fraction.count) + fraction
    }
}
