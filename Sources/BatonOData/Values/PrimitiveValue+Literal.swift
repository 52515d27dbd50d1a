import Foundation

extension PrimitiveValue {
    /// The value written as an OData URL literal (`'O''Neil'`, `2026-11-21`, `12.5`, `null`), not
    /// percent-encoded.
    public var urlLiteral: String {
        switch self {
        case .null: "null"
        case .boolean(let value): value ? "true" : "false"
        case .integer(let value): String(value)
        case .decimal(let value): Self.decimalText(value)
        case .double(let value): Self.doubleText(value)
        case .string(let value): Self.quoted(value)
        case .guid(let value): value.lowercasedString
        case .date(let value): value.description
        case .dateTimeOffset(let value): value.description
        case .timeOfDay(let value): value.description
        case .duration(let value): "duration'\(value)'"
        case .binary(let bytes):
            "binary'\(Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"))'"
        }
    }

    /// `'text'` with every quote doubled — by Unicode scalar: a quote with a combining mark after it is one Swift
    /// `Character`, which a `String` replacement would not find, and the literal would end there.
    static func quoted(_ text: String) -> String {
        var scalars = String.UnicodeScalarView()
        scalars.append("'")
        for scalar in text.unicodeScalars {
            scalars.append(scalar)
            if scalar == "'" { scalars.append("'") }
        }
        scalars.append("'")
        return String(scalars)
    }

    static func decimalText(_ value: Decimal) -> String {
        let text = value.description
        // Scanning the UTF-8 bytes: `String.contains(_:)` goes through NSString on Linux and was a tenth of a
        // download's time.
        return text.utf8.contains(UInt8(ascii: "e")) ? NSDecimalNumber(decimal: value).stringValue : text
    }

    static func doubleText(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value < 0 ? "-INF" : "INF" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) + ".0" }
        return "\(value)"
    }

    /// Converts this value to one a property of `type` can hold, if the conversion is exact: an integer
    /// literal to `Edm.Decimal` or `Edm.Double`, a decimal literal to `Edm.Double`, a string to an enum-like
    /// text, and integers within the range of the target integer type.
    ///
    /// - Returns: `nil` when the value does not fit `type`.
    public func converted(to type: EdmPrimitiveType) -> PrimitiveValue? {
        switch (self, type) {
        case (.null, _): return .null
        case (.integer(let value), _) where type.isIntegral:
            return type.integerRange?.contains(value) == true ? self : nil
        case (.integer(let value), .decimal): return .decimal(Decimal(value))
        // Every Int64 fits a Single's range (rounded, never to zero).
        case (.integer(let value), .double), (.integer(let value), .single): return .double(Double(value))
        case (.decimal, .decimal): return self
        case (.decimal(let value), .double): return .double(NSDecimalNumber(decimal: value).doubleValue)
        case (.decimal(let value), .single):
            let double = NSDecimalNumber(decimal: value).doubleValue
            return double.fitsSingle ? .double(double) : nil
        case (.double(let value), .decimal):
            guard value.isFinite, let decimal = Decimal(string: "\(value)") else { return nil }
            return .decimal(decimal)
        case (.double, .double): return self
        case (.double(let value), .single): return value.fitsSingle ? self : nil
        case (.boolean, .boolean), (.string, .string), (.guid, .guid), (.date, .date),
            (.dateTimeOffset, .dateTimeOffset), (.timeOfDay, .timeOfDay), (.duration, .duration),
            (.binary, .binary):
            return self
        default: return nil
        }
    }
}

extension Double {
    /// Whether an `Edm.Single` (a 32-bit float) holds this value: not beyond its range, and not so small that it
    /// would be stored as zero. Infinities and NaN are Singles too.
    var fitsSingle: Bool {
        let single = Float(self)
        return !isFinite || (single.isFinite && (single != 0 || self == 0))
    }
}
