import Foundation

extension ResourcePath {
    /// The canonical URL of an entity relative to the service root — `Set(key)`, or `Set(K1=v1,K2=v2)` for a
    /// composite key — with literals percent-encoded. The server and the device's request queue both address
    /// entities this way.
    public static func canonicalURL(entitySet: String, key: [KeyValue]) -> String {
        func literal(_ value: PrimitiveValue) -> String {
            let text = value.urlLiteral
            // Most literals (numbers, GUIDs, plain strings) need no encoding; skip Foundation's encoder for them.
            if text.utf8.allSatisfy(isPlainKeyByte) { return text }
            return text.addingPercentEncoding(withAllowedCharacters: keyLiteralAllowed) ?? text
        }
        if key.count == 1, let only = key.first { return "\(entitySet)(\(literal(only.value)))" }
        return "\(entitySet)(" + key.map { "\($0.name)=\(literal($0.value))" }.joined(separator: ",") + ")"
    }

    /// Whether an ASCII byte may stay unencoded inside a key predicate: what ``keyLiteralAllowed`` holds of ASCII,
    /// checked by byte (a `CharacterSet` lookup per scalar was a hundredth of a key read). A byte of a multi-byte
    /// scalar is never plain, so such a literal goes to the encoder.
    static func isPlainKeyByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"), UInt8(ascii: "'"),
            UInt8(ascii: "!"), UInt8(ascii: "$"), UInt8(ascii: "*"), UInt8(ascii: "+"), UInt8(ascii: ":"),
            UInt8(ascii: "@"):
            true
        default: false
        }
    }

    /// What may stay unencoded inside a key predicate.
    static let keyLiteralAllowed: CharacterSet = {
        var set = CharacterSet.alphanumerics
        set.insert(charactersIn: "-._~'!$*+:@")
        return set
    }()
}

extension ODataExpression {
    /// The conditions a key predicate stands for: `K eq v` for each key property of `type` (names the type
    /// does not have are left out).
    public static func keyConditions(_ key: [KeyValue], of type: EntityType) -> [ODataExpression] {
        key.compactMap { value in
            type.property(named: value.name).map {
                .comparison(
                    .eq, .property(PropertyPath(property: value.name, type: $0.type, isNullable: false)),
                    .literal(value.value))
            }
        }
    }

    /// The conditions joined with `and`; nil when there are none.
    public static func conjunction(_ conditions: [ODataExpression]) -> ODataExpression? {
        guard var result = conditions.first else { return nil }
        for condition in conditions.dropFirst() { result = .logical(.and, result, condition) }
        return result
    }
}
