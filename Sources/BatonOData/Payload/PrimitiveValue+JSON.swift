import Foundation

extension PrimitiveValue {
    /// Reads a JSON value as a value of `property`'s type, checking nullability and facets.
    ///
    /// Numbers keep their exact text: an `Edm.Decimal` never passes through `Double`. Decimals and 64-bit
    /// integers are also accepted as JSON strings (IEEE754Compatible clients).
    ///
    /// - Throws: ``ODataError`` (`invalidPayload`) naming the property and what it expects. The message
    ///   quotes the JSON kind received, never the value.
    public init(json: JSONValue, for property: Property) throws(ODataError) {
        func fail(_ expectation: String) -> ODataError {
            ODataError(
                .invalidPayload,
                "Property '\(property.name)' expects \(expectation), but the payload has \(json.kindName)",
                target: property.name)
        }
        if case .null = json {
            guard property.isNullable else {
                throw ODataError(
                    .invalidPayload, "Property '\(property.name)' is not nullable; give it a value",
                    target: property.name)
            }
            self = .null
            return
        }
        switch property.type {
        case .boolean:
            guard let value = json.boolValue else { throw fail("true or false") }
            self = .boolean(value)
        case .byte, .sbyte, .int16, .int32, .int64:
            let text: String
            switch json {
            case .number(let number): text = number
            case .string(let string) where property.type == .int64: text = string
            default: throw fail("an integer (\(property.type.rawValue))")
            }
            guard let value = Int64(text), property.type.integerRange?.contains(value) == true else {
                throw ODataError(
                    .invalidPayload,
                    "Property '\(property.name)' expects an integer in the range of \(property.type.rawValue)",
                    target: property.name)
            }
            self = .integer(value)
        case .decimal:
            let text: String
            switch json {
            case .number(let number): text = number
            case .string(let string): text = string
            default: throw fail("a decimal number")
            }
            guard !text.utf8.contains(where: { $0 == UInt8(ascii: "e") || $0 == UInt8(ascii: "E") }),
                text.utf8.first != UInt8(ascii: "+")
            else {
                throw fail("a decimal number written without an exponent")
            }
            // Up to 18 digits the fast parser is exact by construction; longer numerals take Foundation's
            // parser and must read back to the same canonical text (no digit may be lost).
            if let value = Decimal.parsePlain(text) {
                try Self.checkDecimalFacets(text, property)
                self = .decimal(value)
                return
            }
            guard let value = Decimal(string: text, locale: Locale.posix),
                Decimal(string: text, locale: Locale.posix)?.description
                    == Self.canonicalDecimal(text)
            else { throw fail("a decimal number written without an exponent") }
            try Self.checkDecimalFacets(text, property)
            self = .decimal(value)
        case .double, .single:
            switch json {
            case .number(let text):
                guard let value = Double(text) else { throw fail("a floating-point number") }
                // A numeral beyond the type's range is not infinity, nor (for a Single) zero.
                guard value.isFinite, property.type == .double || value.fitsSingle else {
                    throw ODataError(
                        .invalidPayload,
                        "Property '\(property.name)' expects a number in the range of \(property.type.rawValue)",
                        target: property.name)
                }
                self = .double(value)
            case .string("INF"): self = .double(.infinity)
            case .string("-INF"): self = .double(-.infinity)
            case .string("NaN"): self = .double(.nan)
            default: throw fail("a floating-point number")
            }
        case .string:
            if let enumType = property.enumType {
                let names = enumType.members.map { $0.name }.joined(separator: ", ")
                guard let value = json.stringValue, enumType.member(named: value) != nil else {
                    throw fail("a member of \(enumType.qualifiedName) (\(names)) by name")
                }
                self = .string(value)
                return
            }
            guard let value = json.stringValue else { throw fail("a string") }
            if let maxLength = property.maxLength, value.unicodeScalars.count > maxLength {
                throw ODataError(
                    .invalidPayload,
                    "Property '\(property.name)' allows at most \(maxLength) characters, "
                        + "but the value has \(value.unicodeScalars.count)", target: property.name)
            }
            self = .string(value)
        case .guid:
            guard let text = json.stringValue, let value = UUID(canonicalText: text) else {
                throw fail("a GUID string like \"01234567-89ab-cdef-0123-456789abcdef\"")
            }
            self = .guid(value)
        case .date:
            guard let text = json.stringValue, let value = ODataDate(parsing: text) else {
                throw fail("a date string like \"2026-11-21\"")
            }
            self = .date(value)
        case .dateTimeOffset:
            guard let text = json.stringValue, let value = ODataDateTimeOffset(parsing: text) else {
                throw fail("a date-time string with offset like \"2026-11-21T08:00:00Z\"")
            }
            self = .dateTimeOffset(value)
        case .timeOfDay:
            guard let text = json.stringValue, let value = ODataTimeOfDay(parsing: text) else {
                throw fail("a time string like \"08:30:00\"")
            }
            self = .timeOfDay(value)
        case .duration:
            guard let text = json.stringValue, let value = ODataDuration(parsing: text) else {
                throw fail("a duration string like \"PT2H30M\"")
            }
            self = .duration(value)
        case .binary:
            guard let text = json.stringValue else { throw fail("a base64url string") }
            var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while base64.count % 4 != 0 { base64 += "=" }
            guard let data = Data(base64Encoded: base64) else { throw fail("a base64url string") }
            if let maxLength = property.maxLength, data.count > maxLength {
                throw ODataError(
                    .invalidPayload, "Property '\(property.name)' allows at most \(maxLength) bytes",
                    target: property.name)
            }
            self = .binary(Array(data))
        }
    }

    /// How `Decimal.description` writes the plain numeral `text` (sign, no leading zeros, no trailing
    /// fraction zeros) — to detect digits Foundation would drop, and to store an accepted decimal's text
    /// without formatting the `Decimal` again (which costs more than the rest of decoding it).
    public static func canonicalDecimal(_ text: String) -> String {
        var bytes = Array(text.utf8)
        let negative = bytes.first == UInt8(ascii: "-")
        if negative { bytes.removeFirst() }
        var point = bytes.firstIndex(of: UInt8(ascii: ".")) ?? bytes.count
        if point < bytes.count {
            while bytes.last == UInt8(ascii: "0") { bytes.removeLast() }
            if bytes.last == UInt8(ascii: ".") { bytes.removeLast() }
        }
        var leading = 0
        while leading < point - 1, bytes[leading] == UInt8(ascii: "0") { leading += 1 }
        if point == 0 {
            bytes.insert(UInt8(ascii: "0"), at: 0)
            point = 1
        }
        bytes.removeFirst(leading)
        let isZero = bytes == [UInt8(ascii: "0")]
        if negative, !isZero { bytes.insert(UInt8(ascii: "-"), at: 0) }
        return String(decoding: bytes, as: UTF8.self)
    }

    static func checkDecimalFacets(_ text: String, _ property: Property) throws(ODataError) {
        // One pass over the bytes: digits before the point without leading zeros, after it without
        // trailing zeros.
        var integerDigits = 0
        var fractionDigits = 0
        var fractionZerosPending = 0
        var inFraction = false
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "-"): continue
            case UInt8(ascii: "."): inFraction = true
            case UInt8(ascii: "0") where !inFraction && integerDigits == 0: continue
            case UInt8(ascii: "0") where inFraction: fractionZerosPending += 1
            default:
                if inFraction {
                    fractionDigits += fractionZerosPending + 1
                    fractionZerosPending = 0
                } else {
                    integerDigits += 1
                }
            }
        }
        if let scale = property.scale, fractionDigits > scale {
            throw ODataError(
                .invalidPayload,
                "Property '\(property.name)' allows \(scale) digit(s) after the decimal point, "
                    + "but the value has \(fractionDigits)", target: property.name)
        }
        if let precision = property.precision, integerDigits > precision - (property.scale ?? 0) {
            throw ODataError(
                .invalidPayload,
                "Property '\(property.name)' allows \(precision - (property.scale ?? 0)) digit(s) before the decimal "
                    + "point (Precision \(precision), Scale \(property.scale ?? 0))", target: property.name)
        }
    }

    /// The value as JSON for a property of `type` (numbers exact; `INF`/`NaN` as strings; dates ISO 8601).
    public func json(as type: EdmPrimitiveType) -> JSONValue {
        switch self {
        case .null: .null
        case .boolean(let value): .bool(value)
        case .integer(let value): .number(String(value))
        case .decimal(let value): .number(Self.decimalText(value))
        case .double(let value): value.isFinite ? .number(Self.doubleJSON(value)) : .string(Self.doubleText(value))
        case .string(let value): .string(value)
        case .guid(let value): .string(value.lowercasedString)
        case .date(let value): .string(value.description)
        case .dateTimeOffset(let value): .string(value.description)
        case .timeOfDay(let value): .string(value.description)
        case .duration(let value): .string(value.description)
        case .binary(let bytes):
            .string(
                Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                    .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: ""))
        }
    }

    static func doubleJSON(_ value: Double) -> String {
        let text = "\(value)"
        return text.hasSuffix(".0") ? String(text.dropLast(2)) : text
    }
}
