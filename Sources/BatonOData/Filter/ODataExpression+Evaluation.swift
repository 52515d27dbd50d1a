import Foundation

extension ODataExpression {
    /// Evaluates the expression in memory, the reference semantics that SQL translations must match.
    ///
    /// - Null: `eq`/`ne` treat null as a value (null eq null is true); `gt ge lt le` with a null operand are
    ///   false; arithmetic and functions with a null argument are null; `and`, `or`, `not` follow
    ///   three-valued (Kleene) logic. A filter keeps an entity only when the result is `true`.
    /// - Strings compare by Unicode scalar values (as SQL's binary collation does), not by canonical
    ///   equivalence. `DateTimeOffset` functions (`year`, `hour`, `date`, …) work on the UTC value.
    /// - Integer and decimal division or modulo by zero yields null.
    ///
    /// - Parameters:
    ///   - now: the value of `now()`.
    ///   - resolve: the value of a property path for the entity being tested.
    /// - Returns: the expression's value; `.null` when it is unknown.
    /// - Throws: ``ODataError`` (`limitExceeded`) on integer overflow.
    public func evaluate(
        now: ODataDateTimeOffset = ODataDateTimeOffset(Date()),
        resolve: (PropertyPath) -> PrimitiveValue
    ) throws(ODataError) -> PrimitiveValue {
        switch self {
        case .literal(let value):
            return value
        case .property(let path):
            return resolve(path)
        case .not(let operand):
            switch try operand.evaluate(now: now, resolve: resolve) {
            case .boolean(let value): return .boolean(!value)
            default: return .null
            }
        case .negate(let operand):
            switch try operand.evaluate(now: now, resolve: resolve) {
            case .integer(let value):
                let (result, overflow) = Int64(0).subtractingReportingOverflow(value)
                guard !overflow else { throw ODataError(.limitExceeded, "Integer overflow in negation") }
                return .integer(result)
            case .decimal(let value): return .decimal(-value)
            case .double(let value): return .double(-value)
            case .duration(let value): return .duration(ODataDuration(seconds: -value.seconds))
            default: return .null
            }
        case .comparison(let op, let lhs, let rhs):
            let left = try lhs.evaluate(now: now, resolve: resolve)
            let right = try rhs.evaluate(now: now, resolve: resolve)
            return .boolean(Self.compare(op, left, right))
        case .logical(let op, let lhs, let rhs):
            let left = try lhs.evaluate(now: now, resolve: resolve)
            let right = try rhs.evaluate(now: now, resolve: resolve)
            return Self.kleene(op, left, right)
        case .arithmetic(let op, let lhs, let rhs):
            let left = try lhs.evaluate(now: now, resolve: resolve)
            let right = try rhs.evaluate(now: now, resolve: resolve)
            return try Self.arithmetic(op, left, right)
        case .in(let lhs, let elements):
            let left = try lhs.evaluate(now: now, resolve: resolve)
            for element in elements where Self.compare(.eq, left, try element.evaluate(now: now, resolve: resolve)) {
                return .boolean(true)
            }
            return .boolean(false)
        case .function(let function, let arguments):
            var values: [PrimitiveValue] = []
            for argument in arguments { values.append(try argument.evaluate(now: now, resolve: resolve)) }
            return Self.call(function, values, now: now)
        }
    }

    /// Whether an entity passes this filter: the expression evaluates to `true` (not false, not null).
    public func matches(
        now: ODataDateTimeOffset = ODataDateTimeOffset(Date()), resolve: (PropertyPath) -> PrimitiveValue
    ) throws(ODataError) -> Bool {
        try evaluate(now: now, resolve: resolve) == .boolean(true)
    }

    static func kleene(_ op: LogicalOperator, _ lhs: PrimitiveValue, _ rhs: PrimitiveValue) -> PrimitiveValue {
        let left: Bool? = if case .boolean(let value) = lhs { value } else { nil }
        let right: Bool? = if case .boolean(let value) = rhs { value } else { nil }
        switch op {
        case .and:
            if left == false || right == false { return .boolean(false) }
            if let left, let right { return .boolean(left && right) }
            return .null
        case .or:
            if left == true || right == true { return .boolean(true) }
            if let left, let right { return .boolean(left || right) }
            return .null
        }
    }

    /// OData comparison: two-valued, null equal only to null, ordering comparisons with null false.
    static func compare(_ op: ComparisonOperator, _ lhs: PrimitiveValue, _ rhs: PrimitiveValue) -> Bool {
        if lhs.isNull || rhs.isNull {
            switch op {
            case .eq: return lhs.isNull && rhs.isNull
            case .ne: return lhs.isNull != rhs.isNull
            default: return false
            }
        }
        guard let order = ordering(lhs, rhs) else { return op == .ne }
        switch op {
        case .eq: return order == 0
        case .ne: return order != 0
        case .gt: return order > 0
        case .ge: return order >= 0
        case .lt: return order < 0
        case .le: return order <= 0
        }
    }

    /// -1, 0 or 1; `nil` when the values cannot be ordered (different kinds, or NaN).
    static func ordering(_ lhs: PrimitiveValue, _ rhs: PrimitiveValue) -> Int? {
        func sign<T: Comparable>(_ a: T, _ b: T) -> Int { a < b ? -1 : (a == b ? 0 : 1) }
        switch (lhs, rhs) {
        case (.integer(let a), .integer(let b)): return sign(a, b)
        case (.double, _), (_, .double):
            guard let a = lhs.doubleValue, let b = rhs.doubleValue, !a.isNaN, !b.isNaN else { return nil }
            return sign(a, b)
        case (.decimal, _), (_, .decimal):
            guard let a = lhs.decimalValue, let b = rhs.decimalValue else { return nil }
            return sign(a, b)
        case (.string(let a), .string(let b)):
            let x = a.unicodeScalars.map { $0.value }
            let y = b.unicodeScalars.map { $0.value }
            return x == y ? 0 : (x.lexicographicallyPrecedes(y) ? -1 : 1)
        case (.boolean(let a), .boolean(let b)): return sign(a ? 1 : 0, b ? 1 : 0)
        case (.guid(let a), .guid(let b)): return sign(a.lowercasedString, b.lowercasedString)
        case (.date(let a), .date(let b)): return sign(a, b)
        case (.dateTimeOffset(let a), .dateTimeOffset(let b)): return sign(a, b)
        case (.timeOfDay(let a), .timeOfDay(let b)): return sign(a, b)
        case (.duration(let a), .duration(let b)): return sign(a, b)
        case (.binary(let a), .binary(let b)): return a == b ? 0 : (a.lexicographicallyPrecedes(b) ? -1 : 1)
        default: return nil
        }
    }

    static func arithmetic(_ op: ArithmeticOperator, _ lhs: PrimitiveValue, _ rhs: PrimitiveValue) throws(ODataError)
        -> PrimitiveValue
    {
        if lhs.isNull || rhs.isNull { return .null }
        if case .integer(let a) = lhs, case .integer(let b) = rhs, op != .divby {
            let result: (Int64, Bool)
            switch op {
            case .add: result = a.addingReportingOverflow(b)
            case .sub: result = a.subtractingReportingOverflow(b)
            case .mul: result = a.multipliedReportingOverflow(by: b)
            case .div:
                guard b != 0 else { return .null }
                result = a.dividedReportingOverflow(by: b)
            case .mod:
                guard b != 0 else { return .null }
                result = a.remainderReportingOverflow(dividingBy: b)
            case .divby: result = (0, true)
            }
            guard !result.1 else { throw ODataError(.limitExceeded, "Integer overflow in '\(op.rawValue)'") }
            return .integer(result.0)
        }
        let involvesDouble: Bool
        switch (lhs, rhs) {
        case (.double, _), (_, .double): involvesDouble = true
        default: involvesDouble = false
        }
        if !involvesDouble, let a = lhs.decimalValue, let b = rhs.decimalValue {
            switch op {
            case .add: return .decimal(a + b)
            case .sub: return .decimal(a - b)
            case .mul: return .decimal(a * b)
            case .div, .divby:
                guard b != 0 else { return .null }
                return .decimal(a / b)
            case .mod:
                guard b != 0 else { return .null }
                var quotient = a / b
                var truncated = Decimal()
                NSDecimalRound(&truncated, &quotient, 0, quotient < 0 ? .up : .down)
                return .decimal(a - b * truncated)
            }
        }
        guard let a = lhs.doubleValue, let b = rhs.doubleValue else { return .null }
        switch op {
        case .add: return .double(a + b)
        case .sub: return .double(a - b)
        case .mul: return .double(a * b)
        case .div, .divby: return .double(a / b)
        case .mod: return .double(a.truncatingRemainder(dividingBy: b))
        }
    }

    /// The characters `trim` removes: space, tab, line feed, carriage return.
    static let trimmed: Set<Unicode.Scalar> = [" ", "\t", "\n", "\r"]

    static func call(_ function: FilterFunction, _ arguments: [PrimitiveValue], now: ODataDateTimeOffset)
        -> PrimitiveValue
    {
        if function == .now { return .dateTimeOffset(now) }
        if arguments.contains(where: { $0.isNull }) { return .null }
        func string(_ index: Int) -> [Unicode.Scalar] {
            if case .string(let text) = arguments[index] { return Array(text.unicodeScalars) }
            return []
        }
        func text(_ scalars: some Sequence<Unicode.Scalar>) -> PrimitiveValue {
            var view = String.UnicodeScalarView()
            view.append(contentsOf: scalars)
            return .string(String(view))
        }
        func integer(_ index: Int) -> Int64 {
            if case .integer(let value) = arguments[index] { return value }
            return 0
        }
        switch function {
        case .contains: return .boolean(string(1).isEmpty || indexOf(string(1), in: string(0)) != nil)
        case .startswith: return .boolean(string(0).starts(with: string(1)))
        case .endswith: return .boolean(string(0).reversed().starts(with: string(1).reversed()))
        case .indexof: return .integer(Int64(indexOf(string(1), in: string(0)) ?? -1))
        case .length: return .integer(Int64(string(0).count))
        case .substring:
            let scalars = string(0)
            let start = Int(clamping: max(0, min(integer(1), Int64(scalars.count))))
            var end = scalars.count
            if arguments.count == 3 {
                // Saturating: a huge length must not overflow (the filter comes from the request).
                let sum = Int64(start).addingReportingOverflow(max(0, integer(2)))
                end = Int(clamping: min(Int64(scalars.count), sum.overflow ? Int64.max : sum.partialValue))
            }
            return text(scalars[start..<max(start, end)])
        case .concat: return text(string(0) + string(1))
        case .tolower: return text(SearchExpression.asciiLowercased(string(0)))
        case .toupper:
            return text(string(0).map { ("a"..."z").contains($0) ? Unicode.Scalar(UInt8($0.value - 32)) : $0 })
        case .trim:
            let scalars = string(0)
            guard let first = scalars.firstIndex(where: { !trimmed.contains($0) }),
                let last = scalars.lastIndex(where: { !trimmed.contains($0) })
            else { return .string("") }
            return text(scalars[first...last])
        case .year, .month, .day:
            let date: ODataDate
            switch arguments[0] {
            case .date(let value): date = value
            case .dateTimeOffset(let value): date = value.utc.date
            default: return .null
            }
            return .integer(Int64(function == .year ? date.year : function == .month ? date.month : date.day))
        case .hour, .minute, .second, .fractionalseconds:
            let time: ODataTimeOfDay
            switch arguments[0] {
            case .timeOfDay(let value): time = value
            case .dateTimeOffset(let value): time = value.utc.time
            default: return .null
            }
            switch function {
            case .hour: return .integer(Int64(time.hour))
            case .minute: return .integer(Int64(time.minute))
            case .second: return .integer(Int64(time.second))
            default: return .decimal(time.fractionalSeconds)
            }
        case .date:
            guard case .dateTimeOffset(let value) = arguments[0] else { return .null }
            return .date(value.utc.date)
        case .time:
            guard case .dateTimeOffset(let value) = arguments[0] else { return .null }
            return .timeOfDay(value.utc.time)
        case .round, .floor, .ceiling:
            switch arguments[0] {
            case .integer: return arguments[0]
            case .double(let value):
                return .double(
                    value.rounded(function == .round ? .toNearestOrAwayFromZero : function == .floor ? .down : .up))
            case .decimal(var value):
                var result = Decimal()
                let mode: NSDecimalNumber.RoundingMode = function == .round ? .plain : function == .floor ? .down : .up
                NSDecimalRound(&result, &value, 0, mode)
                return .decimal(result)
            default: return .null
            }
        case .now: return .dateTimeOffset(now)
        }
    }

    static func indexOf(_ needle: [Unicode.Scalar], in haystack: [Unicode.Scalar]) -> Int? {
        guard !needle.isEmpty else { return 0 }
        guard needle.count <= haystack.count else { return nil }
        for start in 0...(haystack.count - needle.count)
        where haystack[start..<start + needle.count].elementsEqual(needle) {
            return start
        }
        return nil
    }
}
