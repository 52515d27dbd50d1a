import BatonSQL
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

extension PostgresSQLConnection {
    /// `arguments` bound as PostgreSQL reads them: integers as `int8`, reals as `float8`, text, bytes as `bytea`.
    static func bindings(_ arguments: [SQLValue]) -> PostgresBindings {
        var binds = PostgresBindings(capacity: arguments.count)
        for argument in arguments {
            switch argument {
            case .null: binds.appendNull()
            case .integer(let number): binds.append(number)
            case .real(let number): binds.append(number)
            case .text(let text): binds.append(text)
            case .blob(let bytes): binds.append(ByteBuffer(bytes: bytes))
            }
        }
        return binds
    }

    /// The value of a cell as Baton reads it: integers, reals, text and bytes; a boolean as 0 or 1; numerics,
    /// instants, dates and times as the canonical text ``BatonSQL/SQLDialect/decode(_:as:column:)`` reads (from
    /// PostgreSQL's binary forms, exactly: microseconds stay microseconds); anything else as its text.
    static func value(_ cell: PostgresCell) throws -> SQLValue {
        guard var bytes = cell.bytes else { return .null }
        switch cell.dataType {
        case .int2, .int4, .int8: return .integer(try cell.decode(Int64.self))
        case .float4, .float8: return .real(try cell.decode(Double.self))
        case .bool: return .integer(try cell.decode(Bool.self) ? 1 : 0)
        case .bytea: return .blob(Array(buffer: try cell.decode(ByteBuffer.self)))
        case .numeric:
            guard let text = numericText(&bytes) else { break }
            return .text(text)
        case .uuid: return .text(try cell.decode(UUID.self).uuidString.lowercased())
        case .timestamptz, .timestamp:
            // ±infinity (written by hand: Baton writes none) have no date; they are refused below, not crashed on.
            guard let micros = bytes.readInteger(as: Int64.self), micros != .min, micros != .max else { break }
            return .text(instantText(microsecondsSince2000: micros))
        case .date:
            guard let days = bytes.readInteger(as: Int32.self), days != .min, days != .max else { break }
            return .text(dateText(daysSince2000: Int64(days)))
        case .time:
            guard let micros = bytes.readInteger(as: Int64.self) else { break }
            return .text(timeText(microseconds: micros))
        default: return .text(try cell.decode(String.self))
        }
        throw StorageError(.other, "A \(cell.dataType) value in column '\(cell.columnName)' is damaged.")
    }

    /// The canonical text of a numeric in PostgreSQL's binary form, as `Decimal`'s description writes it: plain
    /// digits, no exponent, no trailing zeros after the point (which PostgreSQL keeps as the value's scale), `0`
    /// for zero; `nil` for NaN, an infinity or damaged bytes. Read straight from the base-10,000 digit groups:
    /// through `Decimal`, a page of 50 spent a third of its CPU on decimals (perf).
    static func numericText(_ bytes: inout ByteBuffer) -> String? {
        guard let count = bytes.readInteger(as: Int16.self), count >= 0,
            let weight = bytes.readInteger(as: Int16.self).map(Int.init), let sign = bytes.readInteger(as: UInt16.self),
            sign == 0 || sign == 0x4000, bytes.readInteger(as: Int16.self) != nil
        else { return nil }
        var groups: [Int] = []
        groups.reserveCapacity(Int(count))
        for _ in 0..<count {
            guard let group = bytes.readInteger(as: Int16.self), (0..<10_000).contains(group) else { return nil }
            groups.append(Int(group))
        }
        // Group i is worth 10,000^(weight - i).
        func group(atPower power: Int) -> Int {
            let index = weight - power
            return groups.indices.contains(index) ? groups[index] : 0
        }
        var text: [UInt8] = []
        text.reserveCapacity(groups.count * 4 + max(0, weight) * 4 + 8)
        if sign == 0x4000 { text.append(UInt8(ascii: "-")) }
        if weight < 0 {
            text.append(UInt8(ascii: "0"))
        } else {
            appendDigits(Int64(group(atPower: weight)), width: 1, to: &text)
            for power in stride(from: weight - 1, through: 0, by: -1) {
                appendDigits(Int64(group(atPower: power)), width: 4, to: &text)
            }
        }
        let lowest = weight - groups.count + 1
        if lowest < 0 {
            text.append(UInt8(ascii: "."))
            for power in stride(from: -1, through: lowest, by: -1) {
                appendDigits(Int64(group(atPower: power)), width: 4, to: &text)
            }
            while text.last == UInt8(ascii: "0") { text.removeLast() }
            if text.last == UInt8(ascii: ".") { text.removeLast() }
        }
        if text == [UInt8(ascii: "-"), UInt8(ascii: "0")] { return "0" }
        return String(decoding: text, as: UTF8.self)
    }

    /// `YYYY-MM-DD` of a day count from 2000-01-01 (PostgreSQL's epoch), proleptic Gregorian.
    static func dateText(daysSince2000 days: Int64) -> String {
        var text: [UInt8] = []
        appendDate(daysSince2000: days, to: &text)
        return String(decoding: text, as: UTF8.self)
    }

    /// `HH:MM:SS.ffffff` of microseconds since midnight.
    static func timeText(microseconds: Int64) -> String {
        var text: [UInt8] = []
        appendTime(microseconds: microseconds, to: &text)
        return String(decoding: text, as: UTF8.self)
    }

    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ` of microseconds since 2000-01-01T00:00:00Z.
    static func instantText(microsecondsSince2000 micros: Int64) -> String {
        let perDay: Int64 = 86_400_000_000
        let days = micros >= 0 ? micros / perDay : (micros - perDay + 1) / perDay
        var text: [UInt8] = []
        text.reserveCapacity(27)
        appendDate(daysSince2000: days, to: &text)
        text.append(UInt8(ascii: "T"))
        appendTime(microseconds: micros - days * perDay, to: &text)
        text.append(UInt8(ascii: "Z"))
        return String(decoding: text, as: UTF8.self)
    }

    private static func appendDate(daysSince2000 days: Int64, to text: inout [UInt8]) {
        // Days from 1970-01-01, then the civil date (Howard Hinnant's days_from_civil, inverted).
        let z = days + 10_957 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shifted = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shifted + 2) / 5 + 1
        let month = shifted < 10 ? shifted + 3 : shifted - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        appendDigits(year, width: 4, to: &text)
        text.append(UInt8(ascii: "-"))
        appendDigits(month, width: 2, to: &text)
        text.append(UInt8(ascii: "-"))
        appendDigits(day, width: 2, to: &text)
    }

    private static func appendTime(microseconds: Int64, to text: inout [UInt8]) {
        let seconds = microseconds / 1_000_000
        appendDigits(seconds / 3_600, width: 2, to: &text)
        text.append(UInt8(ascii: ":"))
        appendDigits(seconds / 60 % 60, width: 2, to: &text)
        text.append(UInt8(ascii: ":"))
        appendDigits(seconds % 60, width: 2, to: &text)
        text.append(UInt8(ascii: "."))
        appendDigits(microseconds % 1_000_000, width: 6, to: &text)
    }

    /// The decimal digits of `number`, zero-padded to `width`, a minus sign first when negative.
    static func appendDigits(_ number: Int64, width: Int, to text: inout [UInt8]) {
        if number < 0 { text.append(UInt8(ascii: "-")) }
        let magnitude = number.magnitude
        var divisor: UInt64 = 1
        var count = 1
        while divisor <= magnitude / 10 {
            divisor *= 10
            count += 1
        }
        for _ in count..<max(count, width) { text.append(UInt8(ascii: "0")) }
        while divisor > 0 {
            text.append(UInt8(ascii: "0") + UInt8(magnitude / divisor % 10))
            divisor /= 10
        }
    }
}
