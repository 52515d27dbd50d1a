import Foundation

/// An `Edm.DateTimeOffset`: a date and time with a UTC offset. Two values are equal when they denote the same
/// instant, whatever their offsets.
public struct ODataDateTimeOffset: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The local date.
    public let date: ODataDate
    /// The local time.
    public let time: ODataTimeOfDay
    /// The offset from UTC in minutes (`+01:00` is 60).
    public let offsetMinutes: Int

    /// Creates a value, or `nil` when the offset is 24 hours or more.
    public init?(date: ODataDate, time: ODataTimeOfDay, offsetMinutes: Int = 0) {
        guard abs(offsetMinutes) < 24 * 60 else { return nil }
        self.date = date
        self.time = time
        self.offsetMinutes = offsetMinutes
    }

    /// Parses `YYYY-MM-DDTHH:MM[:SS[.f…]](Z|±HH:MM)`; `t` and `z` are accepted in lower case.
    public init?(parsing text: some StringProtocol) {
        if let value = Self.parseSortable(text) {
            self = value
            return
        }
        var scanner = TemporalScanner(text)
        guard let value = scanner.dateTimeOffset(), scanner.isAtEnd else { return nil }
        self = value
    }

    /// Creates the UTC value for a `Date`, to millisecond precision.
    public init(_ instant: Date) {
        let millis = Int64((instant.timeIntervalSince1970 * 1000).rounded(.down))
        self.init(utcSeconds: Int(millis.quotientFloor(1000)), picoseconds: millis.moduloFloor(1000) * 1_000_000_000)
    }

    /// The UTC value `seconds` seconds (plus `picoseconds`) after 1970-01-01T00:00:00Z.
    init(utcSeconds seconds: Int, picoseconds: Int64) {
        let days = Int(Int64(seconds).quotientFloor(86_400))
        let secondOfDay = Int(Int64(seconds).moduloFloor(86_400))
        self.date = ODataDate(daysSinceEpoch: days)
        self.time = ODataTimeOfDay(
            validHour: secondOfDay / 3600, minute: secondOfDay / 60 % 60, second: secondOfDay % 60,
            picoseconds: picoseconds)
        self.offsetMinutes = 0
    }

    /// Reads ``sortableUTCText`` (`2026-11-21T08:00:00.000000000000Z`, 33 ASCII bytes) without the general
    /// scanner; `nil` for any other form.
    static func parseSortable(_ text: some StringProtocol) -> ODataDateTimeOffset? {
        let bytes = Array(text.utf8)
        guard bytes.count == 33, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            bytes[19] == UInt8(ascii: "."), bytes[32] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                let byte = bytes[index]
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), let fraction = number(20..<32),
            let date = ODataDate(year: year, month: month, day: day),
            let time = ODataTimeOfDay(hour: hour, minute: minute, second: second, picoseconds: Int64(fraction))
        else { return nil }
        return ODataDateTimeOffset(date: date, time: time, offsetMinutes: 0)
    }

    /// `2026-11-21T08:00:00`, this value's own date and time of day (years 0000–9999), appended to `bytes`.
    func appendDateAndTime(to bytes: inout [UInt8]) {
        appendDigits(date.year, width: 4, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        appendDigits(date.month, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: "-"))
        appendDigits(date.day, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: "T"))
        appendDigits(time.hour, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        appendDigits(time.minute, width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        appendDigits(time.second, width: 2, to: &bytes)
    }

    /// ``description`` formatted into bytes directly (years 0000–9999).
    var fastDescription: String {
        var bytes = [UInt8]()
        bytes.reserveCapacity(33)
        appendDateAndTime(to: &bytes)
        if time.picoseconds > 0 {
            bytes.append(UInt8(ascii: "."))
            var fraction: [UInt8] = []
            appendDigits(Int(time.picoseconds), width: 12, to: &fraction)
            while fraction.last == UInt8(ascii: "0") { fraction.removeLast() }
            bytes += fraction
        }
        if offsetMinutes == 0 {
            bytes.append(UInt8(ascii: "Z"))
        } else {
            bytes.append(UInt8(ascii: offsetMinutes < 0 ? "-" : "+"))
            appendDigits(abs(offsetMinutes) / 60, width: 2, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
            appendDigits(abs(offsetMinutes) % 60, width: 2, to: &bytes)
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Seconds since 1970-01-01T00:00:00Z, ignoring the fraction.
    public var utcSecondsSinceEpoch: Int {
        date.daysSinceEpoch * 86_400 + time.secondsSinceMidnight - offsetMinutes * 60
    }

    /// The same instant with offset zero.
    public var utc: ODataDateTimeOffset {
        offsetMinutes == 0 ? self : ODataDateTimeOffset(utcSeconds: utcSecondsSinceEpoch, picoseconds: time.picoseconds)
    }

    /// Fixed-width UTC text (`2026-11-21T08:00:00.000000000000Z`) whose lexicographic order is chronological
    /// for years 0000–9999. This is how SQL storage keeps the value.
    public var sortableUTCText: String {
        let value = utc
        guard (0...9999).contains(value.date.year) else {
            return "\(value.date)T\(twoDigits(value.time.hour)):\(twoDigits(value.time.minute)):"
                + "\(twoDigits(value.time.second)).\(value.time.fixedFractionText)Z"
        }
        // Formatted into bytes directly: the interpolation made a string for every piece, and every change a server
        // stores writes one (its ChangedAt).
        var bytes = [UInt8]()
        bytes.reserveCapacity(33)
        value.appendDateAndTime(to: &bytes)
        bytes.append(UInt8(ascii: "."))
        appendDigits(Int(value.time.picoseconds), width: 12, to: &bytes)
        bytes.append(UInt8(ascii: "Z"))
        return String(decoding: bytes, as: UTF8.self)
    }

    public static func == (lhs: ODataDateTimeOffset, rhs: ODataDateTimeOffset) -> Bool {
        lhs.utcSecondsSinceEpoch == rhs.utcSecondsSinceEpoch && lhs.time.picoseconds == rhs.time.picoseconds
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(utcSecondsSinceEpoch)
        hasher.combine(time.picoseconds)
    }

    public static func < (lhs: ODataDateTimeOffset, rhs: ODataDateTimeOffset) -> Bool {
        (lhs.utcSecondsSinceEpoch, lhs.time.picoseconds) < (rhs.utcSecondsSinceEpoch, rhs.time.picoseconds)
    }

    public var description: String {
        if (0...9999).contains(date.year) { return fastDescription }
        var text = "\(date)T\(time)"
        if offsetMinutes == 0 {
            text += "Z"
        } else {
            let minutes = abs(offsetMinutes)
            text += (offsetMinutes < 0 ? "-" : "+") + twoDigits(minutes / 60) + ":" + twoDigits(minutes % 60)
        }
        return text
    }
}

extension Int64 {
    func quotientFloor(_ divisor: Int64) -> Int64 {
        let q = self / divisor
        return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? q - 1 : q
    }

    func moduloFloor(_ divisor: Int64) -> Int64 {
        let r = self % divisor
        return r < 0 ? r + divisor : r
    }
}
