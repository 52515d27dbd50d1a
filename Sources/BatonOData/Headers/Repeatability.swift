import Foundation

/// The headers of OASIS Repeatable Requests 1.0, which make a request apply at most once however often it is
/// sent.
public struct Repeatability: Sendable, Hashable {
    /// `Repeatability-Request-ID`: the client's unique id for the request.
    public var requestID: String
    /// `Repeatability-First-Sent`: when the client first sent it.
    public var firstSent: Date

    /// Creates the headers' values.
    public init(requestID: String, firstSent: Date) {
        self.requestID = requestID
        self.firstSent = firstSent
    }

    /// The longest request id accepted.
    public static let maximumRequestIDLength = 128

    /// Reads the two headers; `nil` when neither is present.
    ///
    /// - Throws: ``ODataError`` (`invalidHeader`) when only one is present, the id is empty, too long or
    ///   not visible ASCII, or the date is not an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
    public init?(requestIDHeader requestID: String?, firstSentHeader firstSent: String?) throws(ODataError) {
        guard requestID != nil || firstSent != nil else { return nil }
        guard let requestID, let firstSent else {
            throw ODataError(
                .invalidHeader,
                "Repeatability-Request-ID and Repeatability-First-Sent must be sent together",
                target: requestID == nil ? "Repeatability-Request-ID" : "Repeatability-First-Sent")
        }
        guard !requestID.isEmpty, requestID.count <= Self.maximumRequestIDLength,
            requestID.unicodeScalars.allSatisfy({ (0x21...0x7E).contains($0.value) })
        else {
            throw ODataError(
                .invalidHeader,
                "Repeatability-Request-ID must be 1 to \(Self.maximumRequestIDLength) visible ASCII characters",
                target: "Repeatability-Request-ID")
        }
        guard let date = Self.parseIMFFixdate(firstSent) else {
            throw ODataError(
                .invalidHeader,
                "Repeatability-First-Sent '\(String(decoding: firstSent.utf8.prefix(64), as: UTF8.self))' is not an HTTP date like 'Sun, 06 Nov 1994 08:49:37 GMT'",
                target: "Repeatability-First-Sent")
        }
        self.init(requestID: requestID, firstSent: date)
    }

    /// `Repeatability-First-Sent` as an IMF-fixdate.
    public var firstSentHeader: String { Self.formatIMFFixdate(firstSent) }

    static let weekdays = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"]
    static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    /// Formats a date as an RFC 9110 IMF-fixdate.
    public static func formatIMFFixdate(_ date: Date) -> String {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        let days = Int(Int64(seconds).quotientFloor(86_400))
        let secondOfDay = Int(Int64(seconds).moduloFloor(86_400))
        let day = ODataDate(daysSinceEpoch: days)
        let weekday = weekdays[Int(Int64(days).moduloFloor(7))]
        let yearText = String(day.year)
        return "\(weekday), \(twoDigits(day.day)) \(months[day.month - 1]) "
            + String(repeating: "0", count: max(0, 4 - yearText.count)) + yearText
            + " \(twoDigits(secondOfDay / 3600)):\(twoDigits(secondOfDay / 60 % 60)):\(twoDigits(secondOfDay % 60)) GMT"
    }

    /// Parses an RFC 9110 IMF-fixdate, checking that the weekday fits the date.
    public static func parseIMFFixdate(_ text: String) -> Date? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
            parts[1].count == 2, let day = Int(parts[1]), let monthIndex = months.firstIndex(of: String(parts[2])),
            parts[3].count == 4, let year = Int(parts[3]),
            let date = ODataDate(year: year, month: monthIndex + 1, day: day)
        else { return nil }
        let clock = parts[4].split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, clock.allSatisfy({ $0.count == 2 }), let hour = Int(clock[0]),
            let minute = Int(clock[1]),
            let second = Int(clock[2]), hour < 24, minute < 60, second < 61
        else { return nil }
        let days = date.daysSinceEpoch
        guard weekdays[Int(Int64(days).moduloFloor(7))] == parts[0].dropLast() else { return nil }
        return Date(timeIntervalSince1970: TimeInterval(days * 86_400 + hour * 3600 + minute * 60 + second))
    }

    /// The `Repeatability-Result` response header values.
    public enum Result: String, Sendable {
        /// The request was executed (now or, for a repeat, the first time).
        case accepted
        /// The request was refused (e.g. its id was already used for a different request).
        case rejected
    }
}
