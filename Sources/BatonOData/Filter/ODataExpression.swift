/// A typed `$filter` / `$orderby` expression, bound to a service model.
///
/// Every property reference is resolved and carries its Edm type, so ``type`` is known for every node and
/// translators (SQL, the in-memory evaluator) need no model.
public indirect enum ODataExpression: Sendable, Hashable {
    /// A literal; `.null` has no type of its own.
    case literal(PrimitiveValue)
    /// A primitive property, possibly reached through single-valued navigation properties.
    case property(PropertyPath)
    /// Logical negation (`not`).
    case not(ODataExpression)
    /// Arithmetic negation (unary `-`).
    case negate(ODataExpression)
    /// `eq ne gt ge lt le`.
    case comparison(ComparisonOperator, ODataExpression, ODataExpression)
    /// `and or`.
    case logical(LogicalOperator, ODataExpression, ODataExpression)
    /// `add sub mul div divby mod`.
    case arithmetic(ArithmeticOperator, ODataExpression, ODataExpression)
    /// `x in (a, b, …)`.
    case `in`(ODataExpression, [ODataExpression])
    /// A canonical function call.
    case function(FilterFunction, [ODataExpression])

    /// The Edm type of the expression's value; `nil` for the `null` literal.
    public var type: EdmPrimitiveType? {
        switch self {
        case .literal(let value): value.literalType
        case .property(let path): path.type
        case .not, .comparison, .logical, .in: .boolean
        case .negate(let operand): operand.type
        case .arithmetic(let op, let lhs, let rhs):
            op == .divby
                ? (lhs.type == .double || rhs.type == .double ? .double : .decimal)
                : EdmPrimitiveType.promoted(lhs.type ?? .int64, rhs.type ?? .int64)
        case .function(let function, let arguments): function.resultType(arguments.first?.type)
        }
    }
}

/// A comparison operator.
public enum ComparisonOperator: String, Sendable, Hashable, CaseIterable {
    case eq, ne, gt, ge, lt, le
}

/// A logical operator.
public enum LogicalOperator: String, Sendable, Hashable, CaseIterable {
    case and, or
}

/// An arithmetic operator.
public enum ArithmeticOperator: String, Sendable, Hashable, CaseIterable {
    case add, sub, mul, div, divby, mod
}

/// A primitive property reached from the query's entity type, possibly through single-valued navigations.
public struct PropertyPath: Sendable, Hashable, CustomStringConvertible {
    /// The single-valued navigation properties walked first, in order.
    public var navigation: [String]
    /// The primitive property at the end of the path.
    public var property: String
    /// The property's Edm type.
    public var type: EdmPrimitiveType
    /// Whether the value can be null (the property is nullable, or a navigation on the way is).
    public var isNullable: Bool

    /// Creates a path.
    public init(navigation: [String] = [], property: String, type: EdmPrimitiveType, isNullable: Bool) {
        self.navigation = navigation
        self.property = property
        self.type = type
        self.isNullable = isNullable
    }

    public var description: String { (navigation + [property]).joined(separator: "/") }
}
