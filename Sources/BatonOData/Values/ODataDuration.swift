import Foundation

/// An `Edm.Duration`: a signed length of time in days, hours, minutes and (fractional) seconds.
public struct ODataDuration: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The total length in seconds; negative for a negative duration. Exact.
    public let seconds: Decimal

    /// Creates a duration of `seconds` seconds.
    public init(seconds: Decimal) { self.seconds = seconds }

    /// Parses an XML Schema day-time duration: `[-]P[nD][T[nH][nM][n[.f]S]]`, with at least one component.
    public init?(parsing text: some StringProtocol) {
        var scanner = TemporalScanner(text)
        guard let value = scanner.duration(), scanner.isAtEnd else { return nil }
        self = value
    }

    public static func < (lhs: ODataDuration, rhs: ODataDuration) -> Bool { lhs.seconds < rhs.seconds }

    public var description: String {
        var remaining = seconds < 0 ? -seconds : seconds
        let sign = seconds < 0 ? "-" : ""
        var whole = NSDecimalNumber(decimal: remaining).int64Value
        if Decimal(whole) > remaining { whole -= 1 }
        remaining -= Decimal(whole)
        let days = whole / 86_400
        let hours = whole / 3600 % 24
        let minutes = whole / 60 % 60
        let secs = whole % 60
        var text = sign + "P"
        if days > 0 { text += "\(days)D" }
        text += "T"
        if hours > 0 { text += "\(hours)H" }
        if minutes > 0 { text += "\(minutes)M" }
        if secs > 0 || remaining > 0 || text.hasSuffix("T") {
            text += remaining > 0 ? "\(Decimal(secs) + remaining)S" : "\(secs)S"
        }
        return text
    }
}
