/// Parses the simple `$search` syntax: words and `"quoted phrases"`, `AND` (or juxtaposition), `OR`, `NOT`
/// and parentheses. `OR` binds weaker than `AND`; `NOT` binds tightest.
struct SearchParser {
    let source: SourceText
    var index = 0
    /// Words and phrases parsed so far; each costs a match against every string column.
    var terms = 0
    /// The most words and phrases one `$search` may hold.
    static let maximumTerms = 64

    init(source: SourceText) { self.source = source }

    mutating func countTerm() throws(ODataError) {
        terms += 1
        guard terms <= Self.maximumTerms else {
            throw ODataError(
                .limitExceeded,
                "$search has more than \(Self.maximumTerms) words and phrases; this server's limit is \(Self.maximumTerms)",
                position: source.rawOffsets[min(index, source.rawOffsets.count - 1)], target: "$search")
        }
    }

    func error(_ message: String) -> ODataError {
        ODataError(
            .syntax, message, position: source.rawOffsets[min(index, source.rawOffsets.count - 1)], target: "$search")
    }

    mutating func parse() throws(ODataError) -> SearchExpression {
        // 4.01: a single-quoted search value is one phrase, with '' for a quote. Read by Unicode scalar: a quote with
        // a combining mark after it is one Swift `Character`, and must still count as a quote.
        let scalars = source.scalars
        if scalars.count >= 2, scalars.first == "'", scalars.last == "'" {
            var phrase = String.UnicodeScalarView()
            var index = 1
            while index < scalars.count - 1 {
                phrase.append(scalars[index])
                index += index + 1 < scalars.count - 1 && scalars[index] == "'" && scalars[index + 1] == "'" ? 2 : 1
            }
            guard !phrase.isEmpty else { throw error("Empty $search phrase") }
            return .term(String(phrase))
        }
        skipSpaces()
        let expression = try parseOr(depth: 0)
        skipSpaces()
        guard index == source.scalars.count else { throw error("Unexpected ')' in $search") }
        return expression
    }

    mutating func skipSpaces() {
        while index < source.scalars.count, source.scalars[index] == " " { index += 1 }
    }

    /// Consumes the operator `word` when it stands as an operator: followed by a space and then by
    /// something that can start an operand. Otherwise (`$search=AND`, `$search=NOT`) it is a search word.
    mutating func keyword(_ word: String) -> Bool {
        let end = index + word.count
        guard end < source.scalars.count, source.text(index..<end) == word, source.scalars[end] == " " else {
            return false
        }
        var next = end
        while next < source.scalars.count, source.scalars[next] == " " { next += 1 }
        guard next < source.scalars.count, source.scalars[next] != ")" else { return false }
        index = next
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
        if keyword("NOT") {
            guard depth < 50 else { throw ODataError(.limitExceeded, "$search nests too deeply", target: "$search") }
            try countTerm()
            return .not(try parseUnary(depth: depth + 1))
        }
        guard index < source.scalars.count else { throw error("$search expected a word or phrase but ended") }
        if source.scalars[index] != "(" { try countTerm() }
        if source.scalars[index] == "(" {
            index += 1
            skipSpaces()
            let inner = try parseOr(depth: depth + 1)
            skipSpaces()
            guard index < source.scalars.count, source.scalars[index] == ")" else {
                throw error("Expected ')' in $search")
            }
            index += 1
            return inner
        }
        if source.scalars[index] == "\"" {
            index += 1
            var text = String.UnicodeScalarView()
            while index < source.scalars.count, source.scalars[index] != "\"" {
                if source.scalars[index] == "\\", index + 1 < source.scalars.count { index += 1 }
                text.append(source.scalars[index])
                index += 1
            }
            guard index < source.scalars.count else {
                throw error("Unterminated phrase in $search; close it with '\"'")
            }
            index += 1
            guard !text.isEmpty else { throw error("Empty phrase in $search") }
            return .term(String(text))
        }
        let start = index
        while index < source.scalars.count, !" ()\"".unicodeScalars.contains(source.scalars[index]) {
            if source.scalars[index] == ";", source.rawOffsets[index + 1] - source.rawOffsets[index] == 1 {
                throw error("';' must be percent-encoded (%3B) in a $search word")
            }
            index += 1
        }
        guard index > start else { throw error("$search expected a word or phrase") }
        return .term(source.text(start..<index))
    }
}
