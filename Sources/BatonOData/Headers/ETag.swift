/// An entity tag (RFC 9110 §8.8.3): an opaque quoted string, weak (`W/"…"`) or strong.
public struct ETag: Sendable, Hashable, CustomStringConvertible {
    /// The opaque tag, without quotes.
    public var opaque: String
    /// Whether the tag is weak.
    public var isWeak: Bool

    /// Creates a tag. The opaque part may not contain `"` or control characters.
    public init(_ opaque: String, isWeak: Bool = true) {
        self.opaque = opaque
        self.isWeak = isWeak
    }

    /// Parses one `ETag` header value.
    ///
    /// - Throws: ``ODataError`` (`invalidHeader`) quoting the malformed value's first 80 scalars.
    public init(parsing text: some StringProtocol) throws(ODataError) {
        var scanner = HeaderScanner(String(text))
        scanner.skipSpaces()
        guard let tag = scanner.etag() else {
            throw ODataError(
                .invalidHeader, "Malformed entity tag '\(text.prefix(scalars: 80))'; expected \"…\" or W/\"…\"",
                target: "ETag")
        }
        scanner.skipSpaces()
        guard scanner.isAtEnd else {
            throw ODataError(
                .invalidHeader, "Unexpected text after the entity tag in '\(text.prefix(scalars: 80))'", target: "ETag")
        }
        self = tag
    }

    /// The header form: `W/"opaque"` or `"opaque"`.
    public var headerValue: String { (isWeak ? "W/" : "") + "\"" + opaque + "\"" }

    public var description: String { headerValue }

    /// Weak comparison (RFC 9110 §8.8.3.2): the opaque tags are equal, whatever their weakness.
    public func weaklyMatches(_ other: ETag) -> Bool { opaque == other.opaque }

    /// Strong comparison: both strong and equal.
    public func stronglyMatches(_ other: ETag) -> Bool { !isWeak && !other.isWeak && opaque == other.opaque }
}

/// The value of an `If-Match` or `If-None-Match` header: `*` or a list of entity tags.
public enum ETagCondition: Sendable, Hashable {
    /// `*`: any current representation.
    case any
    /// A list of tags.
    case tags([ETag])

    /// Parses the header value.
    ///
    /// Not generic: a generic initializer across the module boundary ran unspecialized, looking up the runtime's
    /// metadata, for every change of a batch.
    ///
    /// - Throws: ``ODataError`` (`invalidHeader`) quoting the malformed value's first 80 scalars.
    public init(parsing text: String, header: String = "If-Match") throws(ODataError) {
        let trimmed = text.trimmingSpaces
        if trimmed == "*" {
            self = .any
            return
        }
        var scanner = HeaderScanner(trimmed)
        var tags: [ETag] = []
        repeat {
            scanner.skipSpaces()
            guard let tag = scanner.etag() else {
                throw ODataError(
                    .invalidHeader,
                    "Malformed \(header) value '\(text.prefix(scalars: 80))'; expected * or a list of \"…\" / W/\"…\" tags",
                    target: header)
            }
            tags.append(tag)
            scanner.skipSpaces()
        } while scanner.take(",")
        guard scanner.isAtEnd else {
            throw ODataError(
                .invalidHeader, "Malformed \(header) value '\(text.prefix(scalars: 80))'", target: header)
        }
        self = .tags(tags)
    }

    /// Whether the condition holds for an entity whose current tag is `current` (weak comparison, as
    /// OData services apply to their weak ETags). `nil` means the entity does not exist.
    public func matches(_ current: ETag?) -> Bool {
        guard let current else { return false }
        switch self {
        case .any: return true
        case .tags(let tags): return tags.contains { $0.weaklyMatches(current) }
        }
    }
}

extension String {
    /// The string without leading and trailing spaces and tabs.
    var trimmingSpaces: String {
        // By scalar: a space followed by a combining mark is one `Character`, and was kept.
        var scalars = Substring(self).unicodeScalars
        while scalars.first == " " || scalars.first == "\t" { scalars.removeFirst() }
        while scalars.last == " " || scalars.last == "\t" { scalars.removeLast() }
        return String(scalars)
    }
}
