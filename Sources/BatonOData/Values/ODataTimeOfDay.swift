import Foundation

/// An `Edm.TimeOfDay`: a clock time with up to 12 fractional-second digits.
public struct ODataTimeOfDay: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The hour, 0 through 23.
    public let hour: Int
    /// The minute, 0 through 59.
    public let minute: Int
    /// The second, 0 through 59, or 60 for a leap second.
    public let second: Int
    /// The fractional second, in picoseconds (0 ..< 10¹²).
    public let picoseconds: Int64

    /// Creates a time, or `nil` when a component is out of range.
    public init?(hour: Int, minute: Int, second: Int = 0, picoseconds: Int64 = 0) {
        guard (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second),
            (0..<1_000_000_000_000).contains(picoseconds)
        else { return nil }
        self.hour = hour
        self.minute = minute
        self.second = second
        self.picoseconds = picoseconds
    }

    /// Creates a time whose components the caller has already range-checked.
    init(validHour hour: Int, minute: Int, second: Int, picoseconds: Int64) {
        self.hour = hour
        self.minute = minute
        self.second = second
        self.picoseconds = picoseconds
    }

    /// Parses `HH:MM[:SS[.fffffffffff]]`.
    public init?(parsing text: some StringProtocol) {
        var scanner = TemporalScanner(text)
        guard let time = scanner.timeOfDay(), scanner.isAtEnd else { return nil }
        self = time
    }

    /// Seconds since midnight.
    public var secondsSinceMidnight: Int { hour * 3600 + minute * 60 + second }

    /// The fractional second as a decimal number (`0.25`).
    public var fractionalSeconds: Decimal { Decimal(picoseconds) / Decimal(1_000_000_000_000) }

    public static func < (lhs: ODataTimeOfDay, rhs: ODataTimeOfDay) -> Bool {
        (lhs.secondsSinceMidnight, lhs.picoseconds) < (rhs.secondsSinceMidnight, rhs.picoseconds)
    }

    /// The fraction digits without trailing zeros, or an empty string.
    var fractionText: String {
        guard picoseconds > 0 else { return "" }
        var digits = String(picoseconds)
        digits = String(repeating: "0", count: 12 - digits.count) + digits
        while digits.hasSuffix("0") { digits.removeLast() }
        return digits
    }

    /// The fraction as exactly 12 digits, for text that must sort chronologically.
    var fixedFractionText: String {
        let digits = String(picoseconds)
        return String(repeating: "0", count: 12 - digits.count) + digits
    }

    public var description: String {
        let base = twoDigits(hour) + ":" + twoDigits(minute) + ":" + twoDigits(second)
        let fraction = fractionText
        return fraction.isEmpty ? base : base + "." + fraction
    }
}
