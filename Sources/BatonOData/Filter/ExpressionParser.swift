import Foundation

/// A recursive-descent parser for OData common expressions, binding names against an entity type as it goes.
///
/// Operator precedence follows URL Conventions §5.1.1.17: primary (`/`, `in`, calls), unary (`-`, `not`),
/// multiplicative, additive, relational, equality, `and`, `or`. Operator and function names are
/// case-insensitive (OData 4.01). Unsupported constructs (lambdas, casts, `$it`, aliases, enum and geo
/// literals) raise `notImplemented` at their position; nothing is ever silently mis-parsed.
struct ExpressionParser {
    let source: SourceText
    let model: ServiceModel
    let entityType: EntityType
    var index: Int
    /// Recursion depth guard: deeply nested input is refused, never a stack overflow.
    var depth = 0
    static let maximumDepth = 100
    /// Work guard: the operands, list items and expanded properties parsed so far. A flat chain
    /// (`true or true or …`) nests no brackets but still costs the translator, the evaluator and the database
    /// work in proportion to its length, so the whole expression — every option of a URL that shares this
    /// parser — is bounded.
    var nodes = 0
    /// The most operands, list items and expanded properties one query option may hold.
    public static let maximumNodes = 200

    /// Counts one node and refuses the expression once it holds more than ``maximumNodes``.
    mutating func countNode() throws(ODataError) {
        nodes += 1
        guard nodes <= Self.maximumNodes else {
            throw error(
                .limitExceeded,
                "The expression has more than \(Self.maximumNodes) terms (operands, list items and expanded properties); this server's limit is \(Self.maximumNodes). Split the request or filter with fewer terms"
            )
        }
    }

    init(source: SourceText, model: ServiceModel, entityType: EntityType, index: Int = 0) {
        self.source = source
        self.model = model
        self.entityType = entityType
        self.index = index
    }

    // MARK: Errors and scanning

    func position(_ scalarIndex: Int) -> Int {
        source.rawOffsets[min(scalarIndex, source.rawOffsets.count - 1)]
    }

    func error(_ code: ODataError.Code, _ message: String, at scalarIndex: Int? = nil, target: String? = nil)
        -> ODataError
    {
        ODataError(code, message, position: position(scalarIndex ?? index), target: target)
    }

    var isAtEnd: Bool { index >= source.scalars.count }

    func peek(_ offset: Int = 0) -> Unicode.Scalar? {
        index + offset < source.scalars.count ? source.scalars[index + offset] : nil
    }

    /// Skips spaces and tabs; returns how many.
    @discardableResult
    mutating func skipSpaces() -> Int {
        let start = index
        while let scalar = peek(), scalar == " " || scalar == "\t" { index += 1 }
        return index - start
    }

    mutating func take(_ scalar: Unicode.Scalar) -> Bool {
        guard peek() == scalar else { return false }
        index += 1
        return true
    }

    mutating func expect(_ scalar: Unicode.Scalar, _ what: String) throws(ODataError) {
        guard take(scalar) else { throw error(.syntax, "Expected \(what) \(foundDescription)") }
    }

    var foundDescription: String {
        guard !isAtEnd else { return "but the expression ended" }
        let end = min(source.scalars.count, wordEnd(from: index) > index ? wordEnd(from: index) : index + 1)
        return "but found '\(source.text(index..<end))'"
    }

    static func isWordStart(_ scalar: Unicode.Scalar) -> Bool {
        // ASCII first: the Unicode property lookup was a fifth of parsing a filter.
        if scalar.isASCII {
            return scalar == "_" || scalar == "$" || ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar)
        }
        return scalar.properties.isAlphabetic
    }

    static func isWordPart(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.isASCII {
            return scalar == "_" || ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar)
                || ("0"..."9").contains(scalar)
        }
        return scalar.properties.isAlphabetic
    }

    /// The end of the (possibly dotted) word starting at `start`, or `start` when there is none.
    func wordEnd(from start: Int) -> Int {
        guard start < source.scalars.count, Self.isWordStart(source.scalars[start]) else { return start }
        var end = start + 1
        while end < source.scalars.count {
            let scalar = source.scalars[end]
            if Self.isWordPart(scalar) {
                end += 1
            } else if scalar == ".", end + 1 < source.scalars.count, Self.isWordStart(source.scalars[end + 1]) {
                end += 1
            } else {
                break
            }
        }
        return end
    }

    /// The word at the current index, without consuming it.
    func peekWord() -> String? {
        let end = wordEnd(from: index)
        return end > index ? source.text(index..<end) : nil
    }

    /// Consumes `RWS keyword RWS` when the next word (after whitespace) is `keyword` in any case.
    mutating func takeInfix(_ keywords: [String]) -> String? {
        let start = index
        guard skipSpaces() > 0, let word = peekWord()?.lowercased(), keywords.contains(word) else {
            index = start
            return nil
        }
        let afterWord = index + word.unicodeScalars.count
        guard afterWord < source.scalars.count, source.scalars[afterWord] == " " || source.scalars[afterWord] == "\t"
        else {
            index = start
            return nil
        }
        index = afterWord
        skipSpaces()
        return word
    }

    // MARK: Entry points

    /// Parses a complete boolean expression (`$filter`).
    mutating func parseFilter() throws(ODataError) -> ODataExpression {
        let start = index
        let expression = try parseCommonExpression()
        try expectEnd()
        guard expression.type == .boolean || expression.type == nil else {
            throw error(
                .typeMismatch,
                "$filter must be a boolean expression, but '\(source.text(start..<index))' is "
                    + "\(expression.type?.rawValue ?? "null")", at: start)
        }
        return expression
    }

    mutating func expectEnd() throws(ODataError) {
        guard isAtEnd else {
            let start = index
            skipSpaces()
            if isAtEnd { throw error(.syntax, "Unexpected whitespace at the end of the expression", at: start) }
            throw error(.syntax, "Expected an operator or the end of the expression \(foundDescription)")
        }
    }

    /// Parses one common expression (the `commonExpr` rule) and stops before what cannot continue it.
    mutating func parseCommonExpression() throws(ODataError) -> ODataExpression {
        depth += 1
        defer { depth -= 1 }
        guard depth <= Self.maximumDepth else {
            throw error(.limitExceeded, "The expression nests deeper than \(Self.maximumDepth) levels")
        }
        if let scalar = peek(), scalar == " " || scalar == "\t" {
            let start = index
            skipSpaces()
            throw error(
                .syntax, "Unexpected whitespace before an expression \(foundDescription)", at: max(start, index))
        }
        return try parseOr()
    }

    // MARK: Binary levels

    mutating func parseOr() throws(ODataError) -> ODataExpression {
        var lhs = try parseAnd()
        while true {
            let opStart = index
            guard takeInfix(["or"]) != nil else { return lhs }
            let rhs = try parseAnd()
            try checkBoolean(lhs, "or", at: opStart)
            try checkBoolean(rhs, "or", at: opStart)
            lhs = .logical(.or, lhs, rhs)
        }
    }

    mutating func parseAnd() throws(ODataError) -> ODataExpression {
        var lhs = try parseEquality()
        while true {
            let opStart = index
            guard takeInfix(["and"]) != nil else { return lhs }
            let rhs = try parseEquality()
            try checkBoolean(lhs, "and", at: opStart)
            try checkBoolean(rhs, "and", at: opStart)
            lhs = .logical(.and, lhs, rhs)
        }
    }

    mutating func parseEquality() throws(ODataError) -> ODataExpression {
        var lhs = try parseRelational()
        while true {
            let opStart = index
            guard let word = takeInfix(["eq", "ne"]), let op = ComparisonOperator(rawValue: word) else { return lhs }
            let rhs = try parseRelational()
            try checkComparable(lhs, rhs, op.rawValue, at: opStart)
            lhs = .comparison(op, lhs, rhs)
        }
    }

    mutating func parseRelational() throws(ODataError) -> ODataExpression {
        var lhs = try parseAdditive()
        while true {
            let opStart = index
            if takeInfix(["isof"]) != nil {
                throw error(.notImplemented, "The 'isof' operator is not implemented", at: opStart + 1)
            }
            guard let word = takeInfix(["gt", "ge", "lt", "le"]), let op = ComparisonOperator(rawValue: word) else {
                return lhs
            }
            let rhs = try parseAdditive()
            try checkComparable(lhs, rhs, op.rawValue, at: opStart)
            lhs = .comparison(op, lhs, rhs)
        }
    }

    mutating func parseAdditive() throws(ODataError) -> ODataExpression {
        var lhs = try parseMultiplicative()
        while true {
            let opStart = index
            guard let word = takeInfix(["add", "sub"]), let op = ArithmeticOperator(rawValue: word) else { return lhs }
            let rhs = try parseMultiplicative()
            try checkArithmetic(lhs, rhs, op.rawValue, at: opStart)
            lhs = .arithmetic(op, lhs, rhs)
        }
    }

    mutating func parseMultiplicative() throws(ODataError) -> ODataExpression {
        var lhs = try parseUnary()
        while true {
            let opStart = index
            guard let word = takeInfix(["mul", "div", "divby", "mod"]), let op = ArithmeticOperator(rawValue: word)
            else { return lhs }
            let rhs = try parseUnary()
            try checkArithmetic(lhs, rhs, op.rawValue, at: opStart)
            lhs = .arithmetic(op, lhs, rhs)
        }
    }

    // MARK: Unary and primary

    mutating func parseUnary() throws(ODataError) -> ODataExpression {
        depth += 1
        defer { depth -= 1 }
        guard depth <= Self.maximumDepth else {
            throw error(.limitExceeded, "The expression nests deeper than \(Self.maximumDepth) levels")
        }
        try countNode()
        let start = index
        if peek() == "-", let next = peek(1), !(("0"..."9").contains(next) || isINF(at: index + 1)) {
            index += 1
            skipSpaces()
            let operand = try parseUnary()
            guard operand.type == nil || operand.type?.isNumeric == true || operand.type == .duration else {
                throw error(
                    .typeMismatch, "Unary '-' needs a numeric operand, but found \(operand.type?.rawValue ?? "null")",
                    at: start)
            }
            return .negate(operand)
        }
        if peekWord()?.lowercased() == "not" {
            let after = index + 3
            if after < source.scalars.count, [" ", "\t", "("].contains(source.scalars[after]) {
                index = after
                skipSpaces()
                let operand = try parseUnary()
                try checkBoolean(operand, "not", at: start)
                return .not(operand)
            }
        }
        return try parsePostfix()
    }

    /// A primary expression, optionally followed by `in (…)` or `has`.
    mutating func parsePostfix() throws(ODataError) -> ODataExpression {
        let primary = try parsePrimary()
        let opStart = index
        if takeInfix(["has"]) != nil {
            throw error(.notImplemented, "The 'has' operator (enumeration flags) is not implemented", at: opStart + 1)
        }
        let beforeIn = index
        if skipSpaces() > 0, peekWord()?.lowercased() == "in" {
            index += 2
            guard skipSpaces() > 0 || peek() == "(" || peek() == "[" else {
                index = beforeIn
                return primary
            }
            let listStart = index
            let elements = try parseList()
            for element in elements {
                try checkComparable(primary, element, "in", at: listStart)
            }
            return .in(primary, elements)
        }
        index = beforeIn
        return primary
    }

    /// `( a, b, … )` or `[ a, b, … ]`.
    mutating func parseList() throws(ODataError) -> [ODataExpression] {
        let close: Unicode.Scalar
        if take("(") {
            close = ")"
        } else if take("[") {
            close = "]"
        } else {
            throw error(.syntax, "Expected '(' or '[' to start the list after 'in' \(foundDescription)")
        }
        let listStart = index - 1
        skipSpaces()
        var elements: [ODataExpression] = []
        var firstNonLiteral: (Range<Int>)?
        if take(close) { return elements }
        while true {
            skipSpaces()
            if close == "]", peek() == "\"" {
                elements.append(.literal(.string(try parseJSONString())))
            } else {
                let elementStart = index
                let element = try parseOr()
                if case .literal = element {} else if firstNonLiteral == nil { firstNonLiteral = elementStart..<index }
                elements.append(element)
            }
            skipSpaces()
            if take(",") { continue }
            try expect(close, "',' or '\(close)' in the list")
            break
        }
        if let range = firstNonLiteral {
            if elements.count == 1 {
                throw error(
                    .notImplemented, "'in' with an expression operand instead of a list of literals is not implemented",
                    at: listStart)
            }
            throw error(
                .syntax, "'\(source.text(range))' is not a literal; the list after 'in' holds literals only",
                at: range.upperBound)
        }
        return elements
    }

    mutating func parseJSONString() throws(ODataError) -> String {
        let start = index
        index += 1
        var text = String.UnicodeScalarView()
        while let scalar = peek() {
            index += 1
            if scalar == "\"" { return String(text) }
            if scalar == "\\" {
                guard let escaped = peek() else { break }
                index += 1
                switch escaped {
                case "\"", "\\", "/": text.append(escaped)
                case "n": text.append("\n")
                case "t": text.append("\t")
                default: throw error(.notImplemented, "JSON escape '\\\(escaped)' is not implemented", at: index - 2)
                }
            } else {
                text.append(scalar)
            }
        }
        throw error(.syntax, "Unterminated string literal", at: start)
    }

    func isINF(at position: Int) -> Bool {
        position + 3 <= source.scalars.count && source.text(position..<position + 3) == "INF"
            && (position + 3 == source.scalars.count || !Self.isWordPart(source.scalars[position + 3]))
    }

    mutating func parsePrimary() throws(ODataError) -> ODataExpression {
        let start = index
        guard let scalar = peek() else {
            throw error(.syntax, "Expected an expression but the input ended")
        }
        switch scalar {
        case "(":
            index += 1
            skipSpaces()
            let inner = try parseOr()
            skipSpaces()
            if peek() == "," {
                throw error(.notImplemented, "Parenthesised lists are only supported after 'in'", at: start)
            }
            try expect(")", "')' to close the '(' at position \(position(start))")
            return inner
        case "'":
            return .literal(.string(try parseQuotedString()))
        case "[", "{":
            throw error(.notImplemented, "JSON array and object literals are only supported as the list of 'in'")
        case "@":
            throw error(.notImplemented, "Parameter aliases and annotations in expressions are not implemented")
        case "\"":
            throw error(.syntax, "String literals use single quotes: 'text'")
        default:
            break
        }
        if let literal = try parseBareLiteral() { return .literal(literal) }
        guard let word = peekWord() else {
            throw error(.syntax, "Expected an expression \(foundDescription)")
        }
        let wordEndIndex = wordEnd(from: index)
        let lowered = word.lowercased()
        switch lowered {
        case "null": index = wordEndIndex; return .literal(.null)
        case "true": index = wordEndIndex; return .literal(.boolean(true))
        case "false": index = wordEndIndex; return .literal(.boolean(false))
        default: break
        }
        if wordEndIndex < source.scalars.count, source.scalars[wordEndIndex] == "'" {
            return .literal(try parsePrefixedLiteral(word))
        }
        if word.hasPrefix("$") {
            throw error(.notImplemented, "'\(word)' is not implemented in expressions", target: word)
        }
        var afterWord = wordEndIndex
        while afterWord < source.scalars.count, source.scalars[afterWord] == " " { afterWord += 1 }
        if afterWord < source.scalars.count, source.scalars[afterWord] == "(",
            entityType.navigationProperty(named: word) == nil
        {
            return try parseCall(word)
        }
        return try parsePropertyPath()
    }

    // MARK: Literals

    mutating func parseQuotedString() throws(ODataError) -> String {
        index += 1
        var text = String.UnicodeScalarView()
        while let scalar = peek() {
            index += 1
            if scalar == "'" {
                if peek() == "'" {
                    index += 1
                    text.append("'")
                    continue
                }
                return String(text)
            }
            text.append(scalar)
        }
        throw error(.syntax, "Unterminated string literal; close it with a single quote (write '' for a quote)")
    }

    /// GUIDs, dates, times, date-times and numbers, which start without a keyword.
    mutating func parseBareLiteral() throws(ODataError) -> PrimitiveValue? {
        let start = index
        if let guid = try scanGUID() { return .guid(guid) }
        // Dates, date-times and times all start with digits and then '-' or ':'; anything else is a number,
        // and skips the temporal scanners.
        var cursor = index
        if let sign = peek(), sign == "-" || sign == "+" { cursor += 1 }
        let digitsStart = cursor
        while cursor < source.scalars.count, ("0"..."9").contains(source.scalars[cursor]) { cursor += 1 }
        guard cursor - digitsStart >= 2, cursor < source.scalars.count,
            source.scalars[cursor] == "-" || source.scalars[cursor] == ":"
        else { return try parseNumber(start: start) }
        let rest = source.text(index..<min(source.scalars.count, index + 64))
        var scanner = TemporalScanner(rest)
        if let value = scanner.dateTimeOffset(), !continuesWord(at: index + scanner.index) {
            index += scanner.index
            return .dateTimeOffset(value)
        }
        var dateOnly = TemporalScanner(rest)
        if dateOnly.date() != nil, let next = dateOnly.peek(), next == "T" || next == "t" {
            throw error(
                .syntax, "Malformed date-time; write it like 2026-11-21T08:30:00Z",
                at: index + max(scanner.furthest, 11))
        }
        scanner = TemporalScanner(rest)
        if let value = scanner.date(), !continuesWord(at: index + scanner.index), peek(scanner.index) != "T" {
            index += scanner.index
            return .date(value)
        }
        scanner = TemporalScanner(rest)
        if let first = peek(), ("0"..."9").contains(first) || first == "-" || first == "+",
            let value = scanner.timeOfDay(), !continuesWord(at: index + scanner.index)
        {
            index += scanner.index
            return .timeOfDay(value)
        }
        return try parseNumber(start: start)
    }

    func continuesWord(at position: Int) -> Bool {
        guard position < source.scalars.count else { return false }
        let scalar = source.scalars[position]
        return Self.isWordPart(scalar) || scalar == "." || scalar == ":" || scalar == "-"
    }

    /// A GUID (8-4-4-4-12 hex digits). Text that starts like one (8 hex digits and '-') but breaks off is
    /// an error at the character where it breaks.
    mutating func scanGUID() throws(ODataError) -> UUID? {
        func isHex(_ position: Int) -> Bool {
            position < source.scalars.count && source.scalars[position].isASCIIHexDigit
        }
        guard (0..<8).allSatisfy({ isHex(index + $0) }), index + 8 < source.scalars.count,
            source.scalars[index + 8] == "-", (index + 9 >= source.scalars.count || isHex(index + 9))
        else { return nil }
        var cursor = index
        for (group, length) in [8, 4, 4, 4, 12].enumerated() {
            if group > 0 {
                guard cursor < source.scalars.count, source.scalars[cursor] == "-" else {
                    throw error(.syntax, "Malformed GUID: expected '-'", at: cursor)
                }
                cursor += 1
            }
            for _ in 0..<length {
                guard isHex(cursor) else { throw error(.syntax, "Malformed GUID: expected a hex digit", at: cursor) }
                cursor += 1
            }
        }
        guard !continuesWord(at: cursor), let uuid = Self.uuid(source.scalars[index..<cursor]) else {
            throw error(.syntax, "Malformed GUID", at: cursor)
        }
        index = cursor
        return uuid
    }

    /// The UUID of 36 scalars already checked to be `8-4-4-4-12` hex digits, read by byte
    /// (`UUID(canonicalText:)`).
    static func uuid(_ scalars: ArraySlice<Unicode.Scalar>) -> UUID? {
        guard scalars.allSatisfy(\.isASCII) else { return nil }
        return scalars.map { UInt8(truncatingIfNeeded: $0.value) }.withUnsafeBufferPointer { UUID(canonicalText: $0) }
    }

    mutating func parseNumber(start: Int) throws(ODataError) -> PrimitiveValue? {
        var cursor = index
        func digits() -> Int {
            let from = cursor
            while cursor < source.scalars.count, ("0"..."9").contains(source.scalars[cursor]) { cursor += 1 }
            return cursor - from
        }
        let negative = cursor < source.scalars.count && source.scalars[cursor] == "-"
        if cursor < source.scalars.count, source.scalars[cursor] == "-" || source.scalars[cursor] == "+" {
            cursor += 1
        }
        if isINF(at: cursor) {
            index = cursor + 3
            return .double(negative ? -.infinity : .infinity)
        }
        if cursor == index, source.scalars.count >= index + 3, source.text(index..<index + 3) == "NaN",
            !continuesWord(at: index + 3)
        {
            index += 3
            return .double(.nan)
        }
        guard digits() > 0 else { return nil }
        var isDecimal = false
        var isDouble = false
        if cursor < source.scalars.count, source.scalars[cursor] == ".",
            cursor + 1 < source.scalars.count, ("0"..."9").contains(source.scalars[cursor + 1])
        {
            cursor += 1
            _ = digits()
            isDecimal = true
        }
        if cursor < source.scalars.count, source.scalars[cursor] == "e" || source.scalars[cursor] == "E" {
            var exponent = cursor + 1
            if exponent < source.scalars.count, source.scalars[exponent] == "-" || source.scalars[exponent] == "+" {
                exponent += 1
            }
            if exponent < source.scalars.count, ("0"..."9").contains(source.scalars[exponent]) {
                cursor = exponent
                _ = digits()
                isDouble = true
            }
        }
        if cursor < source.scalars.count, source.scalars[cursor] == ".", !isDecimal {
            throw error(
                .syntax, "Expected digits after the decimal point in '\(source.text(start..<cursor + 1))'",
                at: cursor + 1)
        }
        if cursor < source.scalars.count, Self.isWordPart(source.scalars[cursor]) {
            let end = max(cursor + 1, wordEnd(from: cursor))
            throw error(.syntax, "Malformed number '\(source.text(start..<end))'", at: cursor)
        }
        // Without a leading '+' (Foundation's replacingOccurrences went through NSString).
        var text = source.text(index..<cursor)
        if text.utf8.contains(UInt8(ascii: "+")) { text.removeAll { $0 == "+" } }
        index = cursor
        if isDouble {
            guard let value = Double(text) else { throw error(.syntax, "Malformed number '\(text)'", at: start) }
            return .double(value)
        }
        if !isDecimal, let value = Int64(text) { return .integer(value) }
        guard let value = Decimal(string: text, locale: Locale.posix) else {
            throw error(.syntax, "Malformed number '\(text)'", at: start)
        }
        return .decimal(value)
    }

    /// `duration'…'`, `binary'…'`, and the prefixes Baton does not implement (`geography'…'`, enum literals).
    mutating func parsePrefixedLiteral(_ prefix: String) throws(ODataError) -> PrimitiveValue {
        let start = index
        index = wordEnd(from: index)
        let body = try parseQuotedString()
        switch prefix.lowercased() {
        case "duration":
            guard let value = ODataDuration(parsing: body) else {
                throw error(.syntax, "Malformed duration '\(body)'; write it like duration'P1DT2H30M'", at: start)
            }
            return .duration(value)
        case "binary":
            var base64 = body.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            while base64.count % 4 != 0 { base64 += "=" }
            guard let data = Data(base64Encoded: base64) else {
                throw error(.syntax, "Malformed base64url in binary literal", at: start)
            }
            return .binary(Array(data))
        case "geography", "geometry":
            throw error(.notImplemented, "Geo literals are not implemented", at: start)
        default:
            throw error(
                .notImplemented, "Typed literal '\(prefix)'…' (enumerations, type definitions) is not implemented",
                at: start, target: prefix)
        }
    }

    // MARK: Calls and paths

    mutating func parseCall(_ name: String) throws(ODataError) -> ODataExpression {
        let start = index
        let lowered = name.lowercased()
        guard let function = FilterFunction(rawValue: lowered) else {
            if FilterFunction.notImplemented.contains(lowered) || lowered.hasPrefix("geo.") {
                throw error(.notImplemented, "The function '\(name)' is not implemented", target: name)
            }
            if name.contains(".") {
                throw error(
                    .notImplemented, "Bound and unbound function calls ('\(name)') are not implemented", target: name)
            }
            if entityType.property(named: name) != nil {
                throw error(.syntax, "'\(name)' is a property, not a function; remove the parentheses", target: name)
            }
            let suggestion = suggest(lowered, FilterFunction.allCases.map { $0.rawValue })
            throw error(.unknownName, "Unknown function '\(name)'.\(suggestion)", target: name)
        }
        index = wordEnd(from: index)
        skipSpaces()
        try expect("(", "'(' after '\(name)'")
        skipSpaces()
        var arguments: [ODataExpression] = []
        var argumentStarts: [Int] = []
        if !take(")") {
            while true {
                skipSpaces()
                argumentStarts.append(index)
                arguments.append(try parseOr())
                skipSpaces()
                if take(",") { continue }
                try expect(")", "',' or ')' in the arguments of '\(name)'")
                break
            }
        }
        guard function.arity.contains(arguments.count) else {
            throw error(
                .syntax,
                "'\(name)' takes \(function.arity.lowerBound == function.arity.upperBound ? "\(function.arity.lowerBound)" : "\(function.arity.lowerBound) or \(function.arity.upperBound)") "
                    + "argument(s), but \(arguments.count) were given: \(function.signature)", at: start, target: name)
        }
        for (position, argument) in arguments.enumerated() {
            if let type = argument.type, !function.accepts(type, at: position) {
                throw error(
                    .typeMismatch,
                    "Argument \(position + 1) of '\(name)' is \(type.rawValue), which does not fit \(function.signature)",
                    at: argumentStarts[position], target: name)
            }
        }
        return .function(function, arguments)
    }

    mutating func parsePropertyPath() throws(ODataError) -> ODataExpression {
        var type = entityType
        var navigation: [String] = []
        var nullable = false
        while true {
            let start = index
            guard let name = peekWord() else {
                throw error(.syntax, "Expected a property name after '/' \(foundDescription)")
            }
            index = wordEnd(from: index)
            if let property = type.property(named: name) {
                if peek() == "/" {
                    throw error(
                        .notImplemented,
                        "'\(name)' is a primitive property; paths into it (annotations, casts) are "
                            + "not implemented", at: index, target: name)
                }
                if peek() == "(" {
                    throw error(
                        .syntax, "'\(name)' is a property, not a function; remove the parentheses", target: name)
                }
                return .property(
                    PropertyPath(
                        navigation: navigation, property: property.name, type: property.type,
                        isNullable: nullable || property.isNullable))
            }
            if let navigationProperty = type.navigationProperty(named: name) {
                if navigationProperty.isCollection {
                    throw error(
                        .notImplemented,
                        "'\(name)' is a collection; lambda operators (any/all), $count and key access on collections "
                            + "are not implemented in expressions", at: start, target: name)
                }
                guard take("/") else {
                    throw error(
                        .notImplemented,
                        "'\(name)' is an entity; comparing entities is not implemented. "
                            + "Name one of its properties, e.g. '\(name)/\(targetType(navigationProperty)?.key.first ?? "Key")'",
                        at: start, target: name)
                }
                guard let target = targetType(navigationProperty) else {
                    throw error(.invalidModel, "Navigation target of '\(name)' is missing", at: start, target: name)
                }
                navigation.append(name)
                nullable = nullable || navigationProperty.isNullable
                type = target
                continue
            }
            if name.contains(".") {
                throw error(
                    .notImplemented, "Type casts and qualified names in paths ('\(name)') are not implemented",
                    at: start, target: name)
            }
            throw error(
                .unknownName,
                "Unknown property '\(name)' on '\(type.name)'.\(suggest(name, type.memberNames))", at: start,
                target: name)
        }
    }

    func targetType(_ navigation: NavigationProperty) -> EntityType? {
        model.entityType(named: navigation.targetType)
    }

    // MARK: Type checks

    func checkBoolean(_ operand: ODataExpression, _ op: String, at position: Int) throws(ODataError) {
        guard operand.type == nil || operand.type == .boolean else {
            throw error(
                .typeMismatch, "'\(op)' needs boolean operands, but one is \(operand.type?.rawValue ?? "null")",
                at: position + (source.scalars[safe: position] == " " ? 1 : 0))
        }
    }

    func checkComparable(_ lhs: ODataExpression, _ rhs: ODataExpression, _ op: String, at position: Int)
        throws(ODataError)
    {
        guard let left = lhs.type, let right = rhs.type else { return }
        let compatible =
            left == right || (left.isNumeric && right.isNumeric)
        guard compatible else {
            throw error(
                .typeMismatch, "Cannot compare \(left.rawValue) with \(right.rawValue) using '\(op)'",
                at: position + (source.scalars[safe: position] == " " ? 1 : 0))
        }
    }

    func checkArithmetic(_ lhs: ODataExpression, _ rhs: ODataExpression, _ op: String, at position: Int)
        throws(ODataError)
    {
        for operand in [lhs, rhs] {
            if let type = operand.type, !type.isNumeric {
                let temporal: Set<EdmPrimitiveType> = [.date, .dateTimeOffset, .duration, .timeOfDay]
                if temporal.contains(type) && (op == "add" || op == "sub") {
                    throw error(.notImplemented, "Date and duration arithmetic is not implemented", at: position + 1)
                }
                throw error(
                    .typeMismatch, "'\(op)' needs numeric operands, but one is \(type.rawValue)", at: position + 1)
            }
        }
    }
}

extension Array {
    subscript(safe index: Int) -> Element? { indices.contains(index) ? self[index] : nil }
}

/// " Did you mean 'x'?" for the candidate closest to `name`, or an empty string.
func suggest(_ name: String, _ candidates: [String]) -> String {
    let lowered = name.lowercased()
    var best: (String, Int)?
    for candidate in candidates {
        let distance = editDistance(lowered, candidate.lowercased())
        if distance <= max(2, name.count / 3), best == nil || distance < best?.1 ?? .max {
            best = (candidate, distance)
        }
    }
    return best.map { " Did you mean '\($0.0)'?" } ?? ""
}

/// The Levenshtein distance between two short strings.
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a)
    let b = Array(b)
    guard !a.isEmpty else { return b.count }
    guard !b.isEmpty else { return a.count }
    var previous = Array(0...b.count)
    for i in 1...a.count {
        var current = [i] + Array(repeating: 0, count: b.count)
        for j in 1...b.count {
            current[j] = Swift.min(
                previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        previous = current
    }
    return previous[b.count]
}

extension Unicode.Scalar {
    /// 0-9, a-f or A-F, without a Unicode property lookup.
    var isASCIIHexDigit: Bool {
        ("0"..."9").contains(self) || ("a"..."f").contains(self) || ("A"..."F").contains(self)
    }
}
