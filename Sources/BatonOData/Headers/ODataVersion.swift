/// An OData protocol version a request asks for or a response declares.
public enum ODataVersion: String, Sendable, Hashable, Comparable, CaseIterable {
    case v40 = "4.0"
    case v401 = "4.01"

    /// Parses `OData-Version` / `OData-MaxVersion` values (`4.0`, `4.01`; `4` means 4.0).
    ///
    /// - Throws: ``ODataError`` (`invalidHeader`) for a malformed value, or for a version below 4.0.
    public init(parsing text: some StringProtocol, header: String = "OData-Version") throws(ODataError) {
        let value = String(text).trimmingSpaces
        switch value {
        case "4.0", "4": self = .v40
        case "4.01": self = .v401
        default:
            let parts = value.split(separator: ".")
            guard parts.count == 2, let major = Int(parts[0]), let minor = Int(parts[1]) else {
                throw ODataError(
                    .invalidHeader, "\(header) '\(value.prefix(scalars: 80))' is not a version number like 4.0 or 4.01",
                    target: header)
            }
            if major < 4 {
                throw ODataError(
                    .invalidHeader,
                    "\(header) \(value.prefix(scalars: 80)) is not supported; this service speaks OData 4.0 and 4.01",
                    target: header)
            }
            // A later minor or major version: answer with the highest we speak.
            _ = minor
            self = .v401
        }
    }

    public static func < (lhs: ODataVersion, rhs: ODataVersion) -> Bool { lhs.rawValue < rhs.rawValue }

    /// The version a response uses: the request's `OData-MaxVersion` capped at 4.01, else 4.01; a request
    /// that states `OData-Version` gets that version's semantics (Part 1 §8.2.6, §8.2.7).
    ///
    /// - Throws: ``ODataError`` (`invalidHeader`) for malformed or unsupported versions.
    public static func negotiate(version: String?, maxVersion: String?) throws(ODataError) -> ODataVersion {
        if let maxVersion {
            let max = try ODataVersion(parsing: maxVersion, header: "OData-MaxVersion")
            if let version {
                let requested = try ODataVersion(parsing: version)
                return Swift.min(requested, max)
            }
            return max
        }
        if let version { return try ODataVersion(parsing: version) }
        return .v401
    }
}
