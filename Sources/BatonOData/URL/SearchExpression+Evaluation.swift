extension SearchExpression {
    /// Whether an entity matches: a term matches when any string property contains it, ignoring ASCII case
    /// (as BatonSQL's translation does); `AND`, `OR` and `NOT` combine as usual. Null properties never match.
    ///
    /// - Parameters:
    ///   - type: the entity's type, whose string properties are searched.
    ///   - value: the value of a property of the entity.
    /// - Returns: whether the entity matches.
    public func matches(_ type: EntityType, value: (String) -> PrimitiveValue) -> Bool {
        switch self {
        case .term(let term):
            let needle = Self.asciiLowercased(Array(term.unicodeScalars))
            return type.properties.contains { property in
                guard property.type == .string, case .string(let text) = value(property.name) else { return false }
                return ODataExpression.indexOf(needle, in: Self.asciiLowercased(Array(text.unicodeScalars))) != nil
            }
        case .not(let inner): return !inner.matches(type, value: value)
        case .and(let lhs, let rhs): return lhs.matches(type, value: value) && rhs.matches(type, value: value)
        case .or(let lhs, let rhs): return lhs.matches(type, value: value) || rhs.matches(type, value: value)
        }
    }

    /// Lower-cases ASCII letters only, as SQLite's `lower` does.
    static func asciiLowercased(_ scalars: [Unicode.Scalar]) -> [Unicode.Scalar] {
        scalars.map { ("A"..."Z").contains($0) ? Unicode.Scalar(UInt8($0.value + 32)) : $0 }
    }
}
