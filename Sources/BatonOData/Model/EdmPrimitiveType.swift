/// The Edm primitive types Baton understands.
public enum EdmPrimitiveType: String, Sendable, Hashable, CaseIterable {
    case binary = "Edm.Binary"
    case boolean = "Edm.Boolean"
    case byte = "Edm.Byte"
    case date = "Edm.Date"
    case dateTimeOffset = "Edm.DateTimeOffset"
    case decimal = "Edm.Decimal"
    case double = "Edm.Double"
    case duration = "Edm.Duration"
    case guid = "Edm.Guid"
    case int16 = "Edm.Int16"
    case int32 = "Edm.Int32"
    case int64 = "Edm.Int64"
    case sbyte = "Edm.SByte"
    case single = "Edm.Single"
    case string = "Edm.String"
    case timeOfDay = "Edm.TimeOfDay"

    /// Whether the type is an integer type (`Byte`, `SByte`, `Int16`, `Int32`, `Int64`).
    public var isIntegral: Bool {
        switch self {
        case .byte, .sbyte, .int16, .int32, .int64: true
        default: false
        }
    }

    /// Whether the type takes part in arithmetic (integers, `Decimal`, `Single`, `Double`).
    public var isNumeric: Bool { isIntegral || self == .decimal || self == .double || self == .single }

    /// The inclusive range of an integer type.
    var integerRange: ClosedRange<Int64>? {
        switch self {
        case .byte: 0...255
        case .sbyte: -128...127
        case .int16: Int64(Int16.min)...Int64(Int16.max)
        case .int32: Int64(Int32.min)...Int64(Int32.max)
        case .int64: Int64.min...Int64.max
        default: nil
        }
    }

    /// The type an arithmetic operation over two numeric operands yields (URL Conventions §5.1.1.2).
    static func promoted(_ lhs: EdmPrimitiveType, _ rhs: EdmPrimitiveType) -> EdmPrimitiveType {
        if lhs == .double || rhs == .double || lhs == .single || rhs == .single { return .double }
        if lhs == .decimal || rhs == .decimal { return .decimal }
        return .int64
    }
}
