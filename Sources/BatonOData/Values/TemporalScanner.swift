import Foundation

/// Scans the ISO 8601 / XML Schema forms of OData's temporal literals.
struct TemporalScanner {
    let characters: [Character]
    var index = 0 {
        didSet { furthest = max(furthest, index) }
    }
    /// The furthest position any attempt reached: where a malformed value stops making sense.
    var furthest = 0

    init(_ text: some StringProtocol) { characters = Array(text) }

    var isAtEnd: Bool { index == characters.count }

    func peek(_ offset: Int = 0) -> Character? {
        index + offset < characters.count ? characters[index + offset] : nil
    }

    mutating func take(_ character: Character) -> Bool {
        guard peek() == character else { return false }
        index += 1
        return true
    }

    /// Exactly `count` ASCII digits.
    mutating func digits(_ count: Int) -> Int? {
        var value = 0
        for offset in 0..<count {
            guard let character = peek(offset), let digit = character.asciiDigit else {
                furthest = max(furthest, index + offset)
                return nil
            }
            value = value * 10 + digit
        }
        index += count
        return value
    }

    /// One or more ASCII digits, as text.
    mutating func digitRun() -> String? {
        let start = index
        while let character = peek(), character.asciiDigit != nil { index += 1 }
        return index > start ? String(characters[start..<index]) : nil
    }

    mutating func date() -> ODataDate? {
        let start = index
        let negative = take("-")
        guard let yearText = digitRun(), yearText.count >= 4, yearText.count <= 9,
            yearText.count == 4 || yearText.first != "0", let year = Int(yearText), take("-"),
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
                guard let fraction = digitRun(), fraction.count <= 12 else {
                    index = start
                    return nil
                }
                picoseconds = Int64(fraction + String(repeating: "0", count: 12 - fraction.count)) ?? 0
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
            for (unit, factor) in [("H", 3600), ("M", 60)] {
                let mark = index
                if let number = digitRun() {
                    if take(Character(unit)) || take(Character(unit.lowercased())), let value = Decimal(string: number)
                    {
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

extension Character {
    /// The value of an ASCII decimal digit, or `nil`.
    var asciiDigit: Int? {
        guard let ascii = asciiValue, ascii >= 48, ascii <= 57 else { return nil }
        return Int(ascii - 48)
    }
}
