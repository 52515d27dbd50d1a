/// The canonical functions Baton evaluates in `$filter` and `$orderby` (URL Conventions §5.1.1.5–§5.1.1.9).
public enum FilterFunction: String, Sendable, Hashable, CaseIterable {
    case contains, startswith, endswith, indexof, length, substring, concat, tolower, toupper, trim
    case year, month, day, hour, minute, second, fractionalseconds, date, time, now
    case round, floor, ceiling

    /// The allowed argument counts.
    var arity: ClosedRange<Int> {
        switch self {
        case .now: 0...0
        case .contains, .startswith, .endswith, .indexof, .concat: 2...2
        case .substring: 2...3
        default: 1...1
        }
    }

    /// The Edm types each argument position accepts.
    func accepts(_ type: EdmPrimitiveType, at position: Int) -> Bool {
        switch self {
        case .contains, .startswith, .endswith, .indexof, .concat, .length, .tolower, .toupper, .trim:
            type == .string
        case .substring: position == 0 ? type == .string : type.isIntegral
        case .year, .month, .day: type == .date || type == .dateTimeOffset
        case .hour, .minute, .second, .fractionalseconds: type == .timeOfDay || type == .dateTimeOffset
        case .date, .time: type == .dateTimeOffset
        case .round, .floor, .ceiling: type.isNumeric
        case .now: false
        }
    }

    /// A description of the accepted arguments, for error messages.
    var signature: String {
        switch self {
        case .contains, .startswith, .endswith, .indexof, .concat: "\(rawValue)(Edm.String, Edm.String)"
        case .length, .tolower, .toupper, .trim: "\(rawValue)(Edm.String)"
        case .substring: "substring(Edm.String, Edm.Int32[, Edm.Int32])"
        case .year, .month, .day: "\(rawValue)(Edm.Date or Edm.DateTimeOffset)"
        case .hour, .minute, .second, .fractionalseconds: "\(rawValue)(Edm.TimeOfDay or Edm.DateTimeOffset)"
        case .date, .time: "\(rawValue)(Edm.DateTimeOffset)"
        case .round, .floor, .ceiling: "\(rawValue)(a numeric value)"
        case .now: "now()"
        }
    }

    /// The result type, given the first argument's type.
    func resultType(_ first: EdmPrimitiveType?) -> EdmPrimitiveType {
        switch self {
        case .contains, .startswith, .endswith: .boolean
        case .indexof, .length, .year, .month, .day, .hour, .minute, .second: .int32
        case .substring, .concat, .tolower, .toupper, .trim: .string
        case .fractionalseconds: .decimal
        case .date: .date
        case .time: .timeOfDay
        case .now: .dateTimeOffset
        case .round, .floor, .ceiling: first ?? .decimal
        }
    }

    /// Functions of the OData standard that Baton recognises but does not implement.
    static let notImplemented: Set<String> = [
        "matchespattern", "hassubset", "hassubsequence", "hassequence", "totaloffsetminutes", "totalseconds",
        "maxdatetime",
        "mindatetime", "cast", "isof", "case", "geo.distance", "geo.intersects", "geo.length",
    ]
}
