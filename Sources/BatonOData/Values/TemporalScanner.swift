import Foundation

/// Scans the ISO 8601 / XML Schema forms of OData's temporal literals, by Unicode scalar: the forms are ASCII, a
/// combining mark after a digit or a `Z` is a scalar of its own that matches nothing, and positions count scalars
/// as the filter parser's do. (Scanning `Character`s cost a download's decoding a fifth of its time in grapheme
/// breaking.)
struct TemporalScanner {
    let scalars: [Unicode.Scalar]
    var index = 0 {
        didSet { furthest = max(furthest, index) }
    }
    /// The furthest position any attempt reached: where a malformed value stops making sense.
    var furthest = 0

    init(_ text: some StringProtocol) { scalars = Array(text.unicodeScalars) }

    var isAtEnd: Bool { index == scalars.count }

    func peek(_ offset: Int = 0) -> Unicode.Scalar? {
        index + offset < scalars.count ? scalars[index + offset] : nil
    }

    mutating func take(_ scalar: Unicode.Scalar) -> Bool {
        guard peek() == scalar else { return false }
        index += 1
        return true
    }

    /// Exactly `count` ASCII digits.
    mutating func digits(_ count: Int) -> Int? {
        var value = 0
        for offset in 0..<count {
            guard let scalar = peek(offset), let digit = scalar.asciiDigit else {
                furthest = max(furthest, index + offset)
                return nil
            }
            value = value * 10 + digit
        }
        index += count
        return value
    }

    /// One or more ASCII digits: where they are and their value (`nil` beyond 18 digits). Builds no text, for the
    /// date-times every downloaded entity carries.
    mutating func digitSpan() -> (count: Int, first: Unicode.Scalar, value: Int?)? {
        let start = index
        var value: Int? = 0
        while let scalar = peek(), let digit = scalar.asciiDigit {
            if let current = value { value = index - start < 18 ? current * 10 + digit : nil }
            index += 1
        }
        return index > start ? (index - start, scalars[start], value) : nil
    }

    /// One or more ASCII digits, as text (a duration's, which `Decimal` reads).
    mutating func digitRun() -> String? {
        let start = index
        guard digitSpan() != nil else { return nil }
        return String(String.UnicodeScalarView(scalars[start..<index]))
    }

    mutating func date() -> ODataDate? {
        let start = index
        let negative = take("-")
        guard let yearDigits = digitSpan(), yearDigits.count >= 4, yearDigits.count <= 9,
            yearDigits.count == 4 || yearDigits.first != "0", let year = yearDigits.value, take("-"),
            let month = digits(2), take("-"), let day = digits(2),
            let date = ODataDate(year: negative ? -year : year, month: month, day: day)
        else {
            index = start
            return nil
        }
        return date
    }

    mutating func timeOfDay() -> ODataTimeOfDay? {
        let start = index
        guard let hour = digits(2), take(":"), let minute = digits(2) else {
            index = start
            return nil
        }
        var second = 0
        var picoseconds: Int64 = 0
        if take(":") {
            guard let value = digits(2) else {
                index = start
                return nil
            }
            second = value
            if take(".") {
                guard let fraction = digitSpan(), fraction.count <= 12, let value = fraction.value else {
                    index = start
                    return nil
                }
                var scaled = Int64(value)
                for _ in fraction.count..<12 { scaled *= 10 }
                picoseconds = scaled
            }
        }
        guard let time = ODataTimeOfDay(hour: hour, minute: minute, second: second, picoseconds: picoseconds) else {
            index = start
            return nil
        }
        return time
    }

    mutating func dateTimeOffset() -> ODataDateTimeOffset? {
        let start = index
        guard let date = date(), take("T") || take("t"), let time = timeOfDay() else {
            index = start
            return nil
        }
        var offset = 0
        if take("Z") || take("z") {
            offset = 0
        } else if let sign = peek(), sign == "+" || sign == "-" {
            index += 1
            guard let hours = digits(2), take(":"), let minutes = digits(2), hours <= 23, minutes <= 59 else {
                index = start
                return nil
            }
            offset = (sign == "-" ? -1 : 1) * (hours * 60 + minutes)
        } else {
            index = start
            return nil
        }
        return ODataDateTimeOffset(date: date, time: time, offsetMinutes: offset)
    }

    mutating func duration() -> ODataDuration? {
        let start = index
        let negative = take("-")
        if !negative { _ = take("+") }
        guard take("P") || take("p") else {
            index = start
            return nil
        }
        var total = Decimal(0)
        var components = 0
        if let days = digitRun() {
            guard take("D") || take("d"), let value = Decimal(string: days) else {
                index = start
                return nil
            }
            total += value * 86_400
            components += 1
        }
        if take("T") || take("t") {
            var timeComponents = 0
            let units: [(upper: Unicode.Scalar, lower: Unicode.Scalar, factor: Int)] = [
                ("H", "h", 3600), ("M", "m", 60),
            ]
            for (upper, lower, factor) in units {
                let mark = index
                if let number = digitRun() {
                    if take(upper) || take(lower), let value = Decimal(string: number) {
                        total += value * Decimal(factor)
                        timeComponents += 1
                    } else {
                        index = mark
                    }
                }
            }
            if let whole = digitRun() {
                var text = whole
                if take(".") {
                    guard let fraction = digitRun() else {
                        index = start
                        return nil
                    }
                    text += "." + fraction
                }
                guard take("S") || take("s"),
                    let value = Decimal(string: text, locale: Locale.posix)
                else {
                    index = start
                    return nil
                }
                total += value
                timeComponents += 1
            }
            guard timeComponents > 0 else {
                index = start
                return nil
            }
            components += timeComponents
        }
        guard components > 0 else {
            index = start
            return nil
        }
        return ODataDuration(seconds: negative ? -total : total)
    }
}

extension Unicode.Scalar {
    /// The value of an ASCII decimal digit, or `nil`.
    var asciiDigit: Int? {
        guard value >= 48, value <= 57 else { return nil }
        return Int(value - 48)
    }
}
