import BatonOData
import BatonSQL
import BatonSQLGRDB
import GRDB
import GRDBSQLite
import Synchronization

/// Writes entities as OData JSON straight from SQLite's column buffers.
///
/// Baton's SQLite storage keeps decimals, GUIDs, dates and times as canonical text, so most values can be
/// copied into the response after a strict shape check, without making Swift strings, decoding them into
/// `PrimitiveValue`s and formatting them again. Anything that does not match the expected shape (non-ASCII
/// text, text that needs escaping, an unexpected storage class) takes the general path — decode, then
/// ``BatonOData/PrimitiveValue/json(as:)`` — so the output is the same either way for every value the server stored.
/// The shape check reads a date's and a time's digits, not their ranges: a hand-edited row holding `2026-13-45` is
/// copied as it stands, where the general path would refuse it as a value it cannot read.
///
/// A class: one writer serves every row of a statement, and a reference is retained once where a struct of three
/// arrays retained each of them (twelve atomic operations a row, on arrays both event loops share).
final class RowJSONWriter: Sendable {
    /// A column's place in the statement and in ``keys``: plain values, so the per-row loop copies no
    /// reference (copying a `Property` per value retained and released its strings, a tenth of a page).
    struct Column: Sendable {
        /// The column's position in the statement.
        let index: Int32
        let type: EdmPrimitiveType
        /// Where `,"Name":`, written before the value, is in ``keys``.
        let key: Range<Int>
    }

    let columns: [Column]
    /// Each column's `,"Name":`, one after the other.
    let keys: [UInt8]
    /// Each column's property name, for the general path.
    let names: [String]
    let sequenceIndex: Int32

    /// Writers by statement: a statement's columns, and so its writer, never change, and making one looks up
    /// every column's property and spells its key. Bounded: emptied when it reaches `capacity` statements.
    final class Cache: Sendable {
        let storage = Mutex<[String: RowJSONWriter]>([:])
        static let capacity = 512

        /// The writer for the statement `sql` (which names its entity set, so its type), made once.
        func writer(for sql: String, make: () -> RowJSONWriter) -> RowJSONWriter {
            if let writer = storage.withLock({ $0[sql] }) { return writer }
            let writer = make()
            storage.withLock { writers in
                if writers.count >= Self.capacity { writers.removeAll(keepingCapacity: true) }
                writers[sql] = writer
            }
            return writer
        }
    }

    /// A writer for the rows of a `select` whose columns are `names` (the last one `$seq`).
    init(names columnNames: [String], type: EntityType) {
        var columns: [Column] = []
        var keys: [UInt8] = []
        var names: [String] = []
        for (index, name) in columnNames.enumerated() {
            guard let property = type.property(named: name) else { continue }
            let start = keys.count
            keys.append(UInt8(ascii: ","))
            JSONValue.writeString(property.name, to: &keys)
            keys.append(UInt8(ascii: ":"))
            columns.append(Column(index: Int32(index), type: property.type, key: start..<keys.count))
            names.append(property.name)
        }
        self.columns = columns
        self.keys = keys
        self.names = names
        sequenceIndex = Int32(columnNames.count - 1)
    }

    private static let etagOpen = Array(#"{"@odata.etag":"W/\""#.utf8)
    private static let etagClose = Array(#"\"""#.utf8)
    private static let null = Array("null".utf8)

    /// Writes the row a cursor is on, and returns its sequence (the entity's ETag): from SQLite's buffers when the
    /// cursor is SQLite's, else from its values — copied when they have the expected shape (PostgreSQL's arrive as the
    /// same canonical text), else decoded in `dialect` and formatted.
    @discardableResult
    func write(_ row: any SQLCursor, dialect: SQLDialect, to out: inout [UInt8]) throws -> Int64 {
        if let statement = row.sqliteStatement { return try write(statement, to: &out) }
        let sequence = row.value(at: Int(sequenceIndex)).integer ?? 0
        out.append(contentsOf: Self.etagOpen)
        out.append(contentsOf: String(sequence).utf8)
        out.append(contentsOf: Self.etagClose)
        for (position, column) in columns.enumerated() {
            out.append(contentsOf: keys[column.key])
            let value = row.value(at: Int(column.index))
            // PostgreSQL's values arrive as the same canonical text (``PostgresSQLConnection/value(_:)``).
            guard !Self.copyValue(value, column: column, to: &out) else { continue }
            try Self.convert(value, column: column, name: names[position], dialect: dialect, to: &out)
        }
        out.append(UInt8(ascii: "}"))
        return sequence
    }

    /// Writes the row `statement` is on, and returns its sequence (the entity's ETag).
    @discardableResult
    func write(_ statement: SQLiteStatement, to out: inout [UInt8]) throws -> Int64 {
        let sequence = sqlite3_column_int64(statement, sequenceIndex)
        out.append(contentsOf: Self.etagOpen)
        out.append(contentsOf: String(sequence).utf8)
        out.append(contentsOf: Self.etagClose)
        try keys.withUnsafeBufferPointer { keys in
            for (position, column) in columns.enumerated() {
                out.append(contentsOf: UnsafeBufferPointer(rebasing: keys[column.key]))
                guard !Self.copyValue(statement, column: column, to: &out) else { continue }
                try Self.convert(
                    SQLValue(sqliteStatement: statement, index: column.index), column: column, name: names[position],
                    dialect: .sqlite, to: &out)
            }
        }
        out.append(UInt8(ascii: "}"))
        return sequence
    }

    /// Writes a value of the expected storage and shape straight from SQLite's buffer; `false` when it needs
    /// ``convert(_:column:name:dialect:to:)``.
    static func copyValue(_ statement: SQLiteStatement, column: Column, to out: inout [UInt8]) -> Bool {
        let index = column.index
        switch sqlite3_column_type(statement, index) {
        case SQLITE_NULL:
            out.append(contentsOf: null)
            return true
        case SQLITE_INTEGER:
            let number = sqlite3_column_int64(statement, index)
            if column.type == .boolean {
                out.append(contentsOf: (number != 0 ? "true" : "false").utf8)
                return true
            }
            if column.type.isIntegral {
                out.append(contentsOf: String(number).utf8)
                return true
            }
            return false
        case SQLITE_TEXT:
            // sqlite3_column_text before sqlite3_column_bytes, as SQLite's documentation asks.
            guard let text = sqlite3_column_text(statement, index) else { return false }
            let bytes = UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, index)))
            return copyText(bytes, as: column.type, to: &out)
        default:
            return false
        }
    }

    /// Writes a value of the expected kind and shape as it is; `false` when it needs decoding and formatting.
    static func copyValue(_ value: SQLValue, column: Column, to out: inout [UInt8]) -> Bool {
        switch value {
        case .null:
            out.append(contentsOf: null)
            return true
        case .integer(let number):
            if column.type == .boolean {
                out.append(contentsOf: (number != 0 ? "true" : "false").utf8)
                return true
            }
            guard column.type.isIntegral else { return false }
            out.append(contentsOf: String(number).utf8)
            return true
        case .text(var text):
            return text.withUTF8 { copyText($0, as: column.type, to: &out) }
        case .real, .blob:
            return false
        }
    }

    /// The general path, for everything else: the value decoded in `dialect`, then formatted.
    static func convert(_ value: SQLValue, column: Column, name: String, dialect: SQLDialect, to out: inout [UInt8])
        throws
    {
        out.append(
            contentsOf: try dialect.decode(value, as: column.type, column: name).json(as: column.type).serializedBytes)
    }

    /// Copies canonical ASCII text of the expected shape; `false`, having written nothing, when the value needs the
    /// general path.
    static func copyText(_ bytes: UnsafeBufferPointer<UInt8>, as type: EdmPrimitiveType, to out: inout [UInt8]) -> Bool
    {
        switch type {
        case .string:
            guard allPlainStringBytes(bytes) else { return false }
            quoted(bytes, to: &out)
        case .decimal:
            guard isPlainJSONNumber(bytes) else { return false }
            out.append(contentsOf: bytes)
        case .guid:
            guard has(bytes, shape: guidShape) else { return false }
            quoted(bytes, to: &out)
        case .dateTimeOffset:
            // SQLite's text has 12 fractional digits, PostgreSQL's (microseconds) 6.
            guard (22...33).contains(bytes.count),
                has(UnsafeBufferPointer(rebasing: bytes[..<19]), shape: dateTimeShape),
                bytes[19] == UInt8(ascii: "."), bytes[bytes.count - 1] == UInt8(ascii: "Z"),
                bytes[20..<(bytes.count - 1)].allSatisfy(isDigit)
            else { return false }
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: bytes[..<19])
            appendFraction(bytes[20..<(bytes.count - 1)], to: &out)
            out.append(UInt8(ascii: "Z"))
            out.append(UInt8(ascii: "\""))
        case .date:
            guard has(bytes, shape: dateShape) else { return false }
            quoted(bytes, to: &out)
        default:
            return false
        }
        return true
    }

    static func quoted(_ bytes: some Collection<UInt8>, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: bytes)
        out.append(UInt8(ascii: "\""))
    }

    /// The point and the fraction's digits without trailing zeros, or nothing when they are all zeros.
    static func appendFraction(_ digits: Slice<UnsafeBufferPointer<UInt8>>, to out: inout [UInt8]) {
        var end = digits.endIndex
        while end > digits.startIndex, digits[end - 1] == UInt8(ascii: "0") { end -= 1 }
        guard end > digits.startIndex else { return }
        out.append(UInt8(ascii: "."))
        out.append(contentsOf: digits[digits.startIndex..<end])
    }

    /// Printable ASCII that JSON strings carry unescaped.
    static func isPlainStringByte(_ byte: UInt8) -> Bool {
        byte >= 0x20 && byte < 0x7F && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "\\")
    }

    /// Whether every byte is ``isPlainStringByte(_:)``, read eight at a time (the rest one by one).
    static func allPlainStringBytes(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var index = 0
        if let base = bytes.baseAddress {
            while index + 8 <= bytes.count {
                let word = UInt64(littleEndian: UnsafeRawPointer(base + index).loadUnaligned(as: UInt64.self))
                guard isPlainStringWord(word) else { return false }
                index += 8
            }
        }
        while index < bytes.count {
            guard isPlainStringByte(bytes[index]) else { return false }
            index += 1
        }
        return true
    }

    /// Whether each of a word's eight bytes is ``isPlainStringByte(_:)``. With every byte below 0x80 (checked
    /// first), subtracting 0x20 from each borrows into a byte's high bit only where it was below 0x20, adding 1 sets
    /// it only where it was 0x7F, and a byte XORed with `"` or `\` is zero only where it was that byte — each test
    /// exact for "any byte of the word".
    static func isPlainStringWord(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let high: UInt64 = 0x8080_8080_8080_8080
        guard word & high == 0 else { return false }
        let control = (word &- ones &* 0x20) & ~word & high
        let delete = (word &+ ones) & high
        let quote = word ^ (ones &* UInt64(UInt8(ascii: "\"")))
        let backslash = word ^ (ones &* UInt64(UInt8(ascii: "\\")))
        let quoteZero = (quote &- ones) & ~quote & high
        let backslashZero = (backslash &- ones) & ~backslash & high
        return control | delete | quoteZero | backslashZero == 0
    }

    // The byte classes are compared with wrapping subtraction and inlined: as `ClosedRange.contains` calls through
    // `allSatisfy`, the checks were a call per byte, a twentieth of a delta page's CPU.

    @inline(__always) static func isDigit(_ byte: UInt8) -> Bool { byte &- UInt8(ascii: "0") < 10 }

    @inline(__always) static func isLowerHex(_ byte: UInt8) -> Bool {
        isDigit(byte) || byte &- UInt8(ascii: "a") < 6
    }

    /// The canonical shapes the copy takes, spelled for ``has(_:shape:)``: a GUID in lower case, a date, a date and
    /// time to the second.
    static let guidShape = Array("ffffffff-ffff-ffff-ffff-ffffffffffff".utf8)
    static let dateShape = Array("9999-99-99".utf8)
    static let dateTimeShape = Array("9999-99-99T99:99:99".utf8)

    /// Whether `bytes` have `shape`, byte for byte: `9` stands for a digit, `f` for a lower-case hexadecimal digit,
    /// any other byte for itself. Text of the right classes in the wrong places (`----------` for a date) is not
    /// canonical: it goes to the general path, which refuses it as a stored value it cannot read, as it would have
    /// without the copy. Digits out of their range (a 13th month) are not looked at: see the type's comment.
    static func has(_ bytes: UnsafeBufferPointer<UInt8>, shape: [UInt8]) -> Bool {
        guard bytes.count == shape.count else { return false }
        for (byte, expected) in zip(bytes, shape) {
            switch expected {
            case UInt8(ascii: "9"): guard isDigit(byte) else { return false }
            case UInt8(ascii: "f"): guard isLowerHex(byte) else { return false }
            default: guard byte == expected else { return false }
            }
        }
        return true
    }

    /// Whether `bytes` are a JSON number without exponent: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`.
    static func isPlainJSONNumber(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        let count = bytes.count
        var index = 0
        if index < count, bytes[index] == UInt8(ascii: "-") { index += 1 }
        let integerStart = index
        while index < count, isDigit(bytes[index]) { index += 1 }
        let integerCount = index - integerStart
        guard integerCount > 0, integerCount == 1 || bytes[integerStart] != UInt8(ascii: "0") else { return false }
        guard index < count else { return true }
        guard bytes[index] == UInt8(ascii: "."), index + 1 < count else { return false }
        index += 1
        while index < count {
            guard isDigit(bytes[index]) else { return false }
            index += 1
        }
        return true
    }

    /// The JSON string of `pieces` joined, without joining them first: escaping goes byte by byte, so each piece
    /// escaped on its own is the same as the whole.
    static func string(joining pieces: String..., to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for piece in pieces { JSONValue.writeStringContent(piece, to: &out) }
        out.append(UInt8(ascii: "\""))
    }
}
