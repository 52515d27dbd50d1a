/// Parses the simple `$search` syntax: words and `"quoted phrases"`, `AND` (or juxtaposition), `OR`, `NOT`
/// and parentheses. `OR` binds weaker than `AND`; `NOT` binds tightest.
struct SearchParser {
    let source: SourceText
    var index = 0

    init(source: SourceText) { self.source = source }

    func error(_ message: String) -> ODataError {
        ODataError(.syntax, message, position: source.rawOffsets[min(index, source.rawOffsets.count - 1)], target: "$search")
    }

    mutating func parse() throws(ODataError) -> SearchExpression {
        skipSpaces()
        let expression = try parseOr(depth: 0)
        skipSpaces()
        guard index == source.scalars.count else { throw error("Unexpected ')' in $search") }
        return expression
    }

    mutating func skipSpaces() {
        while index < source.scalars.count, source.scalars[index] == " " { index += 1 }
    }

    mutating func keyword(_ word: String) -> Bool {
        let end = index + word.count
        guard end <= source.scalars.count, source.text(index..<end) == word,
            end == source.scalars.count || source.scalars[end] == " " || source.scalars[end] == "("
        else { return false }
        index = end
        skipSpaces()
        return true
    }

    mutating func parseOr(depth: Int) throws(ODataError) -> SearchExpression {
        guard depth < 50 else { throw ODataError(.limitExceeded, "$search nests too deeply", target: "$search") }
        var lhs = try parseAnd(depth: depth)
        while keyword("OR") { lhs = .or(lhs, try parseAnd(depth: depth)) }
        return lhs
    }

    mutating func parseAnd(depth: Int) throws(ODataError) -> SearchExpression {
        var lhs = try parseUnary(depth: depth)
        while true {
            skipSpaces()
            guard index < source.scalars.count, source.scalars[index] != ")" else { return lhs }
            let save = index
            if keyword("OR") {
                index = save
                return lhs
            }
            _ = keyword("AND")
            lhs = .and(lhs, try parseUnary(depth: depth))
        }
    }

    mutating func parseUnary(depth: Int) throws(ODataError) -> SearchExpression {
        skipSpaces()
        if keyword("NOT") { return .not(try parseUnary(depth: depth + 1)) }
        guard index < source.scalars.count else { throw error("$search expected a word or phrase but ended") }
        if source.scalars[index] == "(" {
            index += 1
            skipSpaces()
            let inner = try parseOr(depth: depth + 1)
            skipSpaces()
            guard index < source.scalars.count, source.scalars[index] == ")" else { throw error("Expected ')' in $search") }
            index += 1
            return inner
        }
        if source.scalars[index] == "\"" {
            let start = index
            index += 1
            var text = String.UnicodeScalarView()
            while index < source.scalars.count, source.scalars[index] != "\"" {
                if source.scalars[index] == "\\", index + 1 < source.scalars.count { index += 1 }
                text.append(source.scalars[index])
                index += 1
            }
            guard index < source.scalars.count else {
                index = start
                throw error("Unterminated phrase in $search")
            }
            index += 1
            guard !text.isEmpty else { throw error("Empty phrase in $search") }
            return .term(String(text))
        }
        let start = index
        while index < source.scalars.count, !" ()\"".unicodeScalars.contains(source.scalars[index]) { index += 1 }
        guard index > start else { throw error("$search expected a word or phrase") }
        let word = source.text(start..<index)
        if word == "AND" || word == "OR" {
            index = start
            throw error("$search expected a word before '\(word)'")
        }
        return .term(word)
    }
}
