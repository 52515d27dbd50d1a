extension ODataExpression {
    /// Parses a common expression (`commonExpr`), still percent-encoded, against an entity type.
    ///
    /// - Parameters:
    ///   - text: the expression, as it appears in the URL.
    ///   - entityType: the type whose properties the expression names.
    ///   - model: the model the type belongs to.
    ///   - boolean: require a boolean expression, as `$filter` does.
    /// - Throws: ``ODataError`` with the position of the first problem.
    public init(parsing text: String, for entityType: EntityType, in model: ServiceModel, boolean: Bool = false)
        throws(ODataError)
    {
        var parser = ExpressionParser(source: try SourceText(raw: text), model: model, entityType: entityType)
        if boolean {
            self = try parser.parseFilter()
        } else {
            self = try parser.parseCommonExpression()
            try parser.expectEnd()
        }
    }
}

extension QueryOptions {
    /// Parses a query string (`$filter=…&$top=5`, still percent-encoded) against an entity type.
    ///
    /// - Throws: ``ODataError`` with the position of the first problem in `query`.
    public init(parsing query: String, for entityType: EntityType, in model: ServiceModel) throws(ODataError) {
        self = try QueryOptionsParser(model: model, entityType: entityType).parse(Substring(query), baseOffset: 0)
    }
}

extension PrimitiveValue {
    /// Parses a complete URL literal (`'O''Neil'`, `42`, `2026-11-21`, `duration'PT1H'`, `null`), still
    /// percent-encoded.
    ///
    /// - Throws: ``ODataError`` (`syntax`) with the position where the literal stops making sense.
    public init(parsingLiteral text: String) throws(ODataError) {
        let source = try SourceText(raw: text)
        let empty = EntityType(
            name: "Literal", key: ["K"], properties: [Property(name: "K", type: .int32, isNullable: false)])
        let model = try ServiceModel(namespace: "Literal", entityTypes: [empty], entitySets: [])
        var parser = ExpressionParser(source: source, model: model, entityType: empty)
        guard case .literal(let value) = try parser.parsePrimaryLiteral() else {
            throw parser.error(.syntax, "Expected a literal \(parser.foundDescription)", at: 0)
        }
        try parser.expectEnd()
        self = value
    }
}

extension ExpressionParser {
    /// A literal at the current position, allowing a leading sign.
    mutating func parsePrimaryLiteral() throws(ODataError) -> ODataExpression {
        if peek() == "'" { return .literal(.string(try parseQuotedString())) }
        if let literal = try parseBareLiteral() { return .literal(literal) }
        let primary = try parsePrimary()
        guard case .literal = primary else {
            throw error(.syntax, "Expected a literal", at: 0)
        }
        return primary
    }
}
