import Foundation

/// A value of an Edm primitive type, or null: what a literal in a URL denotes and what a property holds.
public enum PrimitiveValue: Sendable, Hashable {
    case null
    case boolean(Bool)
    /// Any integer type; the declaring property or literal gives the exact Edm type.
    case integer(Int64)
    /// An exact decimal (`Edm.Decimal`).
    case decimal(Decimal)
    /// `Edm.Double` or `Edm.Single`, including `INF`, `-INF` and `NaN`.
    case double(Double)
    case string(String)
    case guid(UUID)
    case date(ODataDate)
    case dateTimeOffset(ODataDateTimeOffset)
    case timeOfDay(ODataTimeOfDay)
    case duration(ODataDuration)
    case binary([UInt8])

    /// The Edm type a literal of this value has on its own; `nil` for null.
    public var literalType: EdmPrimitiveType? {
        switch self {
        case .null: nil
        case .boolean: .boolean
        case .integer(let value): Int32(exactly: value) != nil ? .int32 : .int64
        case .decimal: .decimal
        case .double: .double
        case .string: .string
        case .guid: .guid
        case .date: .date
        case .dateTimeOffset: .dateTimeOffset
        case .timeOfDay: .timeOfDay
        case .duration: .duration
        case .binary: .binary
        }
    }

    /// Whether this is ``null``.
    public var isNull: Bool { self == .null }

    /// The value as an exact decimal, for numeric values that have one.
    var decimalValue: Decimal? {
        switch self {
        case .integer(let value): Decimal(value)
        case .decimal(let value): value
        case .double(let value) where value.isFinite: Decimal(string: "\(value)")
        default: nil
        }
    }

    /// The value as a `Double`, for numeric values.
    var doubleValue: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .decimal(let value): NSDecimalNumber(decimal: value).doubleValue
        case .double(let value): value
        default: nil
        }
    }
}
