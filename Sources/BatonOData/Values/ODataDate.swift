/// An `Edm.Date`: a calendar date in the proleptic Gregorian calendar, without time zone.
public struct ODataDate: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// The year; 0 and negative years are allowed as in XML Schema 1.1.
    public let year: Int
    /// The month, 1 through 12.
    public let month: Int
    /// The day of the month, 1 through the length of that month.
    public let day: Int

    /// Creates a date, or returns `nil` when the day does not exist (`2023-02-29`).
    public init?(year: Int, month: Int, day: Int) {
        guard (1...12).contains(month), day >= 1, day <= Self.daysIn(month: month, year: year),
            year.magnitude <= 999_999_999
        else { return nil }
        self.year = year
        self.month = month
        self.day = day
    }

    /// Parses `YYYY-MM-DD` (with an optional leading `-`, and more than four year digits when the first is
    /// not zero).
    public init?(parsing text: some StringProtocol) {
        var scanner = TemporalScanner(text)
        guard let date = scanner.date(), scanner.isAtEnd else { return nil }
        self = date
    }

    static func isLeap(_ year: Int) -> Bool { (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 (negative before), by the days-from-civil algorithm.
    public var daysSinceEpoch: Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date `days` days after 1970-01-01.
    public init(daysSinceEpoch days: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        self.day = dayOfYear - (153 * mp + 2) / 5 + 1
        self.month = mp < 10 ? mp + 3 : mp - 9
        self.year = yearOfEra + era * 400 + (self.month <= 2 ? 1 : 0)
    }

    public static func < (lhs: ODataDate, rhs: ODataDate) -> Bool {
        (lhs.year, lhs.month, lhs.day) < (rhs.year, rhs.month, rhs.day)
    }

    public var description: String {
        let yearText = String(year.magnitude)
        let padded = String(repeating: "0", count: max(0, 4 - yearText.count)) + yearText
        return (year < 0 ? "-" : "") + padded + "-" + twoDigits(month) + "-" + twoDigits(day)
    }
}

func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : String(value) }
