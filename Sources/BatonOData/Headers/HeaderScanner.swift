/// A small scanner for structured HTTP header values.
struct HeaderScanner {
    let characters: [Character]
    var index = 0

    init(_ text: String) { characters = Array(text) }

    var isAtEnd: Bool { index >= characters.count }

    func peek() -> Character? { index < characters.count ? characters[index] : nil }

    mutating func take(_ character: Character) -> Bool {
        guard peek() == character else { return false }
        index += 1
        return true
    }

    mutating func skipSpaces() {
        while let character = peek(), character == " " || character == "\t" { index += 1 }
    }

    /// An RFC 9110 token.
    mutating func token() -> String? {
        let start = index
        while let character = peek(), character.isASCII, !character.isWhitespace,
            !"\"(),/:;<=>?@[\\]{}".contains(character), let ascii = character.asciiValue, ascii > 32, ascii < 127
        {
            index += 1
        }
        return index > start ? String(characters[start..<index]) : nil
    }

    /// A quoted string, unescaped.
    mutating func quotedString() -> String? {
        let start = index
        guard take("\"") else { return nil }
        var text = ""
        while let character = peek() {
            index += 1
            if character == "\"" { return text }
            if character == "\\", let next = peek() {
                index += 1
                text.append(next)
            } else {
                text.append(character)
            }
        }
        index = start
        return nil
    }

    mutating func etag() -> ETag? {
        let start = index
        var weak = false
        if peek() == "W", index + 1 < characters.count, characters[index + 1] == "/" {
            weak = true
            index += 2
        }
        guard take("\"") else {
            index = start
            return nil
        }
        let opaqueStart = index
        while let character = peek(), character != "\"" {
            guard let ascii = character.asciiValue, ascii == 0x21 || ascii >= 0x23, ascii != 0x7F else {
                index = start
                return nil
            }
            index += 1
        }
        guard take("\"") else {
            index = start
            return nil
        }
        return ETag(String(characters[opaqueStart..<index - 1]), isWeak: weak)
    }
}
