import Foundation

extension Locale {
    /// The POSIX locale, created once: numbers in OData are always written with a `.` decimal point, and
    /// creating a locale per parsed number is measurably slow.
    package static let posix = Locale(identifier: "en_US_POSIX")
}
