/// Parses a query string (`$filter=…&$top=5`) against an entity type.
struct QueryOptionsParser {
    let model: ServiceModel
    let entityType: EntityType

    static let systemOptions: Set<String> = [
        "filter", "select", "expand", "orderby", "top", "skip", "count", "search", "skiptoken", "deltatoken",
        "format", "compute", "apply", "levels", "index", "schemaversion", "id",
    ]
    static let unsupportedOptions: Set<String> = ["compute", "apply", "levels", "index", "schemaversion", "id"]

    /// Parses the raw (still percent-encoded) query, which starts at `baseOffset` in the whole input.
    func parse(_ raw: Substring, baseOffset: Int) throws(ODataError) -> QueryOptions {
        var options = QueryOptions()
        var seen: Set<String> = []
        var offset = baseOffset
        let formEncoded = Self.looksFormEncoded(raw)
        for part in raw.pieces(separatedBy: UInt8(ascii: "&")) {
            defer { offset += part.characterCount + 1 }
            if part.isEmpty { continue }
            let equals = part.firstIndex(ofByte: UInt8(ascii: "="))
            let rawName = equals.map { part[part.startIndex..<$0] } ?? part[...]
            let name = try SourceText(raw: rawName, baseOffset: offset).string
            let valueOffset = offset + rawName.characterCount + 1
            let rawValue = equals.map { part[part.utf8.index(after: $0)...] } ?? ""
            if let hash = part.firstIndex(ofByte: UInt8(ascii: "#")) {
                throw ODataError(
                    .syntax, "'#' must be percent-encoded (%23) in a query option",
                    position: offset + part.distance(from: part.startIndex, to: hash))
            }
            if name.hasPrefix("@") {
                throw ODataError(
                    .notImplemented, "Parameter aliases ('\(name)') are not implemented", position: offset, target: name
                )
            }
            let bare = name.hasPrefix("$") ? String(name.dropFirst()) : name
            // Folded by ASCII only, as next and delta links fold the names they replace.
            let lowered = HeaderScanner.asciiLowercased(bare)
            guard Self.systemOptions.contains(lowered) else {
                if name.hasPrefix("$") {
                    throw ODataError(
                        .unknownName,
                        "Unknown system query option '\(name)'.\(suggest(name, Self.systemOptions.sorted().map { "$" + $0 }))",
                        position: offset, target: name)
                }
                options.customOptions.append(
                    CustomOption(
                        name: name,
                        value: try SourceText(raw: rawValue, baseOffset: valueOffset, plusAsSpace: formEncoded).string))
                continue
            }
            guard equals != nil else {
                throw ODataError(
                    .syntax, "System query option '\(name)' needs a value: '\(name)=…'", position: offset + part.count,
                    target: name)
            }
            guard seen.insert(lowered).inserted else {
                throw ODataError(
                    .syntax, "System query option '$\(lowered)' is given twice; give it once", position: offset,
                    target: "$\(lowered)")
            }
            if Self.unsupportedOptions.contains(lowered) {
                throw ODataError(
                    .notImplemented, "System query option '$\(lowered)' is not implemented", position: offset,
                    target: "$\(lowered)")
            }
            try apply(lowered, rawValue, at: valueOffset, formEncoded: formEncoded, to: &options)
        }
        return options
    }

    /// Applies one option whose raw value may hold an unescaped `+`: OData reads it as a `+` (`1E+10`,
    /// `+01:00`), form encoding (Python's `requests`, `urlencode`, Java's `URLEncoder`, HTML forms) as a space.
    /// The reading the query's encoding suggests goes first; when it fails, the other is tried; when both fail,
    /// the first one's error is thrown, its position in the value as the client wrote it.
    func apply(
        _ name: String, _ raw: Substring, at offset: Int, formEncoded: Bool, to options: inout QueryOptions
    ) throws(ODataError) {
        let strict = try SourceText(raw: raw, baseOffset: offset)
        guard raw.utf8.contains(UInt8(ascii: "+")) else { return try apply(name, strict, to: &options) }
        let form = try SourceText(raw: raw, baseOffset: offset, plusAsSpace: true)
        let (first, second) = formEncoded ? (form, strict) : (strict, form)
        var attempt = options
        do {
            try apply(name, first, to: &attempt)
        } catch {
            var other = options
            guard (try? apply(name, second, to: &other)) != nil else { throw error }
            attempt = other
        }
        options = attempt
    }

    /// Whether a query string looks form-encoded: it has an unescaped `+` and no space, neither raw nor as `%20`.
    /// A strict client writes a space as `%20` and a literal plus as `%2B` (as the OData ABNF advises); a form
    /// encoder writes every space as `+`.
    static func looksFormEncoded(_ raw: Substring) -> Bool {
        var plus = false
        var percent = 0
        for byte in raw.utf8 {
            switch (byte, percent) {
            case (UInt8(ascii: "+"), _): plus = true
            case (UInt8(ascii: " "), _): return false
            case (UInt8(ascii: "%"), _): percent = 1
            case (UInt8(ascii: "2"), 1): percent = 2
            case (UInt8(ascii: "0"), 2): return false
            default: percent = 0
            }
        }
        return plus
    }

    /// Parses one option's decoded value into `options`.
    func apply(_ name: String, _ value: SourceText, to options: inout QueryOptions) throws(ODataError) {
        switch name {
        case "filter":
            var parser = ExpressionParser(source: value, model: model, entityType: entityType)
            options.filter = try parser.parseFilter()
        case "select":
            options.select = try parseSelect(value)
        case "expand":
            var parser = ExpressionParser(source: value, model: model, entityType: entityType)
            options.expand = try parseExpand(&parser, until: nil)
        case "orderby":
            var parser = ExpressionParser(source: value, model: model, entityType: entityType)
            options.orderBy = try parseOrderBy(&parser, until: nil)
        case "top", "skip":
            let text = value.string
            guard let number = Int(text), number >= 0, text.allSatisfy({ $0.isASCII }), !text.hasPrefix("+") else {
                throw ODataError(
                    .syntax, "$\(name) must be a non-negative integer, but is '\(text)'",
                    position: value.rawOffsets.first, target: "$\(name)")
            }
            if name == "top" { options.top = number } else { options.skip = number }
        case "count":
            switch value.string.lowercased() {
            case "true": options.count = true
            case "false": options.count = false
            default:
                throw ODataError(
                    .syntax, "$count must be 'true' or 'false', but is '\(value.string)'",
                    position: value.rawOffsets.first, target: "$count")
            }
        case "search":
            var parser = SearchParser(source: value)
            options.search = try parser.parse()
        case "skiptoken":
            options.skipToken = try nonEmpty(value, "$skiptoken")
        case "deltatoken":
            options.deltaToken = try nonEmpty(value, "$deltatoken")
        case "format":
            options.format = try nonEmpty(value, "$format")
        default:
            break
        }
    }

    func nonEmpty(_ value: SourceText, _ name: String) throws(ODataError) -> String {
        let text = value.string
        guard !text.isEmpty else {
            throw ODataError(.syntax, "\(name) must not be empty", position: value.rawOffsets.first, target: name)
        }
        return text
    }

    func parseSelect(_ value: SourceText) throws(ODataError) -> [String]? {
        var parser = ExpressionParser(source: value, model: model, entityType: entityType)
        var names: [String] = []
        var all = false
        repeat {
            let start = parser.index
            if parser.peek() == "@" {
                throw parser.error(.notImplemented, "Annotations in $select are not implemented", target: "$select")
            }
            if parser.take("*") {
                all = true
            } else {
                guard let name = parser.peekWord() else {
                    throw parser.error(.syntax, "Expected a property name in $select \(parser.foundDescription)")
                }
                parser.index = parser.wordEnd(from: parser.index)
                if name.utf8.contains(UInt8(ascii: ".")) {
                    throw parser.error(
                        .notImplemented, "Qualified names in $select ('\(name)') are not implemented", at: start,
                        target: name)
                }
                guard entityType.property(named: name) != nil || entityType.navigationProperty(named: name) != nil
                else {
                    throw parser.error(
                        .unknownName,
                        "Unknown property '\(name)' in $select on '\(entityType.name)'.\(suggest(name, entityType.memberNames))",
                        at: start, target: name)
                }
                if parser.peek() == "/" || parser.peek() == "(" {
                    throw parser.error(
                        .notImplemented, "Paths and nested options in $select are not implemented", target: name)
                }
                if !names.contains(name) { names.append(name) }
            }
        } while parser.take(",")
        try parser.expectEnd()
        return all ? nil : names
    }

    /// The most sort keys one `$orderby` may hold.
    static let maximumOrderByItems = 32

    func parseOrderBy(_ parser: inout ExpressionParser, until terminator: Unicode.Scalar?) throws(ODataError)
        -> [OrderByItem]
    {
        var items: [OrderByItem] = []
        repeat {
            let expression = try parser.parseCommonExpression()
            var descending = false
            let before = parser.index
            if parser.skipSpaces() > 0, let word = parser.peekWord()?.lowercased(), word == "asc" || word == "desc" {
                parser.index += word.count
                descending = word == "desc"
            } else {
                parser.index = before
            }
            items.append(OrderByItem(expression, descending: descending))
            guard items.count <= Self.maximumOrderByItems else {
                throw parser.error(
                    .limitExceeded,
                    "$orderby has more than \(Self.maximumOrderByItems) items; this server sorts by at most \(Self.maximumOrderByItems)",
                    target: "$orderby")
            }
        } while parser.take(",")
        if terminator == nil { try parser.expectEnd() }
        return items
    }

    func parseExpand(_ parser: inout ExpressionParser, until terminator: Unicode.Scalar?) throws(ODataError)
        -> [ExpandItem]
    {
        var items: [ExpandItem] = []
        repeat {
            let start = parser.index
            if parser.peek() == "@" || parser.peek() == "$" {
                throw parser.error(
                    .notImplemented, "Annotations, $value and $ref in $expand are not implemented", target: "$expand")
            }
            if parser.take("*") {
                if parser.peek() == "/" || parser.peek() == "(" {
                    throw parser.error(
                        .notImplemented, "'*/$ref' and '*(…)' in $expand are not implemented", target: "$expand")
                }
                for navigation in entityType.navigationProperties
                where !items.contains(where: {
                    $0.navigationProperty == navigation.name
                }) {
                    items.append(
                        ExpandItem(
                            navigationProperty: navigation.name, targetType: navigation.targetType,
                            isCollection: navigation.isCollection, options: QueryOptions()))
                }
                continue
            }
            guard let name = parser.peekWord() else {
                throw parser.error(.syntax, "Expected a navigation property in $expand \(parser.foundDescription)")
            }
            parser.index = parser.wordEnd(from: parser.index)
            guard let navigation = entityType.navigationProperty(named: name) else {
                if name.utf8.contains(UInt8(ascii: ".")) {
                    throw parser.error(
                        .notImplemented, "Type casts in $expand ('\(name)') are not implemented", at: start,
                        target: name)
                }
                if entityType.property(named: name) != nil {
                    throw parser.error(
                        .syntax, "'\(name)' is a structural property; $expand takes navigation properties", at: start,
                        target: name)
                }
                throw parser.error(
                    .unknownName,
                    "Unknown navigation property '\(name)' in $expand on '\(entityType.name)'."
                        + suggest(name, entityType.navigationProperties.map { $0.name }), at: start, target: name)
            }
            guard let target = model.entityType(named: navigation.targetType) else {
                throw parser.error(.invalidModel, "Navigation target of '\(name)' is missing", target: name)
            }
            if parser.peek() == "/" {
                throw parser.error(
                    .notImplemented, "$ref, casts and paths in $expand are not implemented", target: name)
            }
            try parser.countNode()
            var nested = QueryOptions()
            if parser.take("(") {
                let nestedParser = QueryOptionsParser(model: model, entityType: target)
                nested = try nestedParser.parseNested(&parser)
            }
            items.append(
                ExpandItem(
                    navigationProperty: name, targetType: navigation.targetType, isCollection: navigation.isCollection,
                    options: nested))
        } while parser.take(",")
        if terminator == nil { try parser.expectEnd() }
        return items
    }

    /// Parses `opt=value;opt=value)` inside `$expand`, consuming the closing parenthesis.
    func parseNested(_ outer: inout ExpressionParser) throws(ODataError) -> QueryOptions {
        var options = QueryOptions()
        var parser = ExpressionParser(source: outer.source, model: model, entityType: entityType, index: outer.index)
        parser.depth = outer.depth + 1
        parser.nodes = outer.nodes
        defer { outer.nodes = parser.nodes }
        guard parser.depth < ExpressionParser.maximumDepth else {
            throw parser.error(.limitExceeded, "$expand nests too deeply")
        }
        var seen: Set<String> = []
        repeat {
            let start = parser.index
            if parser.peek() == "@" {
                throw parser.error(.notImplemented, "Parameter aliases inside $expand(…) are not implemented")
            }
            guard var name = parser.peekWord() else {
                throw parser.error(.syntax, "Expected a query option inside $expand(…) \(parser.foundDescription)")
            }
            parser.index = parser.wordEnd(from: parser.index)
            if name.hasPrefix("$") { name.removeFirst() }
            let lowered = name.lowercased()
            if Self.unsupportedOptions.contains(lowered) {
                throw parser.error(
                    .notImplemented, "$\(lowered) is not implemented", at: start, target: "$\(lowered)")
            }
            guard ["filter", "select", "expand", "orderby", "top", "skip", "count", "search"].contains(lowered)
            else {
                throw parser.error(
                    .unknownName, "Unknown option '\(name)' inside $expand(…)", at: start, target: name)
            }
            guard seen.insert(lowered).inserted else {
                throw parser.error(.syntax, "Option '$\(lowered)' is given twice inside $expand(…)", at: start)
            }
            try parser.expect("=", "'=' after '\(name)'")
            switch lowered {
            case "filter":
                let expression = try parser.parseCommonExpression()
                guard expression.type == .boolean || expression.type == nil else {
                    throw parser.error(.typeMismatch, "$filter inside $expand must be boolean", at: start)
                }
                options.filter = expression
            case "orderby":
                options.orderBy = try parseOrderBy(&parser, until: ")")
            case "expand":
                options.expand = try parseExpand(&parser, until: ")")
            default:
                let valueStart = parser.index
                var depth = 0
                var quoted = false
                while let scalar = parser.peek() {
                    // A percent-encoded character is data, never a separator.
                    let literal = parser.source.isDelimiter(at: parser.index)
                    if scalar == "'" { quoted.toggle() }
                    if !quoted && literal {
                        if scalar == "(" { depth += 1 }
                        if scalar == ")" {
                            if depth == 0 { break }
                            depth -= 1
                        }
                        if scalar == ";" && depth == 0 { break }
                    }
                    parser.index += 1
                }
                let slice = SourceText(
                    slicing: parser.source, valueStart..<parser.index)
                try apply(lowered, slice, to: &options)
            }
        } while parser.take(";")
        try parser.expect(")", "')' to close the nested options of $expand")
        outer.index = parser.index
        return options
    }
}

extension SourceText {
    /// A sub-range of already decoded text, keeping its raw offsets.
    init(slicing other: SourceText, _ range: Range<Int>) {
        self.scalars = Array(other.scalars[range])
        self.rawOffsets = Array(other.rawOffsets[range.lowerBound...range.upperBound])
        self.escapedDelimitersAreData = other.escapedDelimitersAreData
    }
}
