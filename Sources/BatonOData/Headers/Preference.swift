/// One preference of a `Prefer` header (RFC 7240), e.g. `odata.maxpagesize=50`.
public struct Preference: Sendable, Hashable, CustomStringConvertible {
    /// The preference name, lower-cased (preference names are case-insensitive).
    public var name: String
    /// The value, if any, unquoted.
    public var value: String?
    /// Further parameters after `;`.
    public var parameters: [String: String]

    /// Creates a preference.
    public init(name: String, value: String? = nil, parameters: [String: String] = [:]) {
        self.name = HeaderScanner.asciiLowercased(name)
        self.value = value
        self.parameters = parameters
    }

    /// The header form: `name`, `name=value` or `name="value with spaces"`.
    public var description: String {
        guard let value else { return name }
        // By Unicode scalar: a `"` or `\` followed by a combining mark is one `Character`, which a search for `"`
        // does not find.
        let special = " \",;=\\".unicodeScalars
        let needsQuotes = value.isEmpty || value.unicodeScalars.contains { !$0.isASCII || special.contains($0) }
        guard needsQuotes else { return "\(name)=\(value)" }
        var quoted = String.UnicodeScalarView()
        for scalar in value.unicodeScalars {
            if scalar == "\\" || scalar == "\"" { quoted.append("\\") }
            quoted.append(scalar)
        }
        return "\(name)=\"\(String(quoted))\""
    }
}

/// The parsed `Prefer` header: the preferences OData defines, and any others.
public struct Preferences: Sendable, Hashable {
    /// Every preference, in header order; the first of a repeated name wins (RFC 7240 §2).
    public var all: [Preference]

    /// Parses one or more `Prefer` header values.
    ///
    /// - Throws: ``ODataError`` (`invalidHeader`) quoting the malformed value, or a malformed
    ///   `odata.maxpagesize`.
    public init(parsing values: [String]) throws(ODataError) {
        var all: [Preference] = []
        var seen: Set<String> = []
        for value in values {
            var scanner = HeaderScanner(value)
            repeat {
                scanner.skipSpaces()
                if scanner.isAtEnd { break }
                guard let name = scanner.token() else {
                    throw ODataError(.invalidHeader, "Malformed Prefer header '\(value)'", target: "Prefer")
                }
                scanner.skipSpaces()
                var preferenceValue: String?
                if scanner.take("=") {
                    scanner.skipSpaces()
                    preferenceValue = scanner.quotedString() ?? scanner.token()
                    guard preferenceValue != nil else {
                        throw ODataError(
                            .invalidHeader, "Preference '\(name)' in '\(value)' has '=' but no value", target: "Prefer")
                    }
                }
                var parameters: [String: String] = [:]
                scanner.skipSpaces()
                while scanner.take(";") {
                    scanner.skipSpaces()
                    guard let parameter = scanner.token() else {
                        throw ODataError(
                            .invalidHeader, "Malformed parameter in Prefer header '\(value)'", target: "Prefer")
                    }
                    scanner.skipSpaces()
                    var parameterValue = ""
                    if scanner.take("=") {
                        scanner.skipSpaces()
                        parameterValue = scanner.quotedString() ?? scanner.token() ?? ""
                    }
                    parameters[HeaderScanner.asciiLowercased(parameter)] = parameterValue
                    scanner.skipSpaces()
                }
                // The first of a name counts; a set keeps a long header of many names from comparing each with all.
                let preference = Preference(name: name, value: preferenceValue, parameters: parameters)
                if seen.insert(preference.name).inserted { all.append(preference) }
                scanner.skipSpaces()
            } while scanner.take(",")
            guard scanner.isAtEnd else {
                throw ODataError(.invalidHeader, "Malformed Prefer header '\(value)'", target: "Prefer")
            }
        }
        self.all = all
        if let text = self["odata.maxpagesize"]?.value ?? self["maxpagesize"]?.value {
            guard let size = Int(text), size > 0 else {
                throw ODataError(
                    .invalidHeader, "odata.maxpagesize must be a positive integer, but is '\(text)'", target: "Prefer")
            }
            _ = size
        }
    }

    /// The preference named `name` (case-insensitive).
    public subscript(name: String) -> Preference? {
        // Most requests state no preference: nothing to fold the name for.
        guard !all.isEmpty else { return nil }
        let folded = HeaderScanner.asciiLowercased(name)
        return all.first { $0.name == folded }
    }

    /// `odata.maxpagesize` (or 4.01's `maxpagesize`).
    public var maxPageSize: Int? {
        (self["odata.maxpagesize"]?.value ?? self["maxpagesize"]?.value).flatMap { Int($0) }
    }

    /// Whether `odata.track-changes` (or `track-changes`) is requested.
    public var trackChanges: Bool { self["odata.track-changes"] != nil || self["track-changes"] != nil }

    /// `return=minimal` or `return=representation`.
    public var returnPreference: String? { self["return"]?.value.map(HeaderScanner.asciiLowercased) }

    /// Whether `odata.continue-on-error` (or `continue-on-error`) is requested and not `false`.
    public var continueOnError: Bool {
        let preference = self["odata.continue-on-error"] ?? self["continue-on-error"]
        return preference != nil && preference?.value.map(HeaderScanner.asciiLowercased) != "false"
    }

    /// The `Preference-Applied` header value for the given applied preferences.
    public static func applied(_ preferences: [Preference]) -> String {
        preferences.map { $0.description }.joined(separator: ", ")
    }
}
