import AircraftChecks
import BatonOData
import Foundation

/// A measured value of a pre-flight check: its property, unit, allowed range and decimal places. The same
/// rules hold at the interactive prompt and for `baton checks add`.
struct Measurement: Sendable {
    let property: String
    let label: String
    let unit: String
    let range: ClosedRange<Decimal>
    let decimals: Int

    static let fuel = Measurement(property: "FuelKg", label: "Fuel", unit: "kg", range: 0...400_000, decimals: 1)
    static let mainTyre = Measurement(
        property: "TyrePressureMainPsi", label: "Main tyre pressure", unit: "psi", range: 30...350, decimals: 1)
    static let noseTyre = Measurement(
        property: "TyrePressureNosePsi", label: "Nose tyre pressure", unit: "psi", range: 30...350, decimals: 1)
    static let oil = Measurement(property: "OilQuarts", label: "Oil", unit: "quarts", range: 0...50, decimals: 2)
    static let all = [fuel, mainTyre, noseTyre, oil]

    /// Parses what was typed: a plain number (`5200`, `200.5`), in range, with at most `decimals` places.
    func parse(_ text: String) -> Result<Decimal, InputProblem> {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let parts = trimmed.split(separator: ".", omittingEmptySubsequences: false)
        guard !trimmed.isEmpty, parts.count <= 2, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCII) }),
            parts.allSatisfy({ $0.allSatisfy(\.isNumber) }),
            let value = Decimal(string: trimmed, locale: Locale(identifier: "en_US_POSIX"))
        else {
            return .failure(InputProblem("\(label): '\(text)' is not a number; type digits like 5200 or 200.5."))
        }
        if parts.count == 2, parts[1].count > decimals {
            return .failure(
                InputProblem("\(label): '\(text)' has more than \(decimals) decimal place\(decimals == 1 ? "" : "s")."))
        }
        guard range.contains(value) else {
            return .failure(
                InputProblem("\(label): \(trimmed) \(unit) is outside \(range.lowerBound)–\(range.upperBound) \(unit).")
            )
        }
        return .success(value)
    }

    /// A word for summaries: "fuel", "main", "nose", "oil".
    var short: String { label.split(separator: " ").first.map { $0.lowercased() } ?? label }

    var prompt: String { "\(label) (\(unit), \(range.lowerBound)–\(range.upperBound)):" }
}

/// A complete pre-flight check, validated field by field before anything is saved.
struct CheckForm: Sendable {
    var tailNumber = ""
    var flightNumber: String?
    var measurements: [String: Decimal] = [:]
    var remarks: String?
    var status = "final"

    static let statuses = ["final", "draft"]

    static func parseStatus(_ text: String) -> Result<String, InputProblem> {
        let status = text.lowercased()
        guard statuses.contains(status) else {
            return .failure(InputProblem("Status: '\(text)' is not one of \(statuses.joined(separator: ", "))."))
        }
        return .success(status)
    }

    static func parseRemarks(_ text: String) -> Result<String, InputProblem> {
        guard text.count <= 500 else {
            return .failure(InputProblem("Remarks: \(text.count) characters is more than the 500 allowed."))
        }
        guard !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            return .failure(InputProblem("Remarks: control characters are not allowed."))
        }
        return .success(text)
    }

    /// The check as the model's generated type, with a new id; every measurement must be there.
    func check() throws -> PreflightCheck {
        func measured(_ measurement: Measurement) throws -> Decimal {
            guard let value = measurements[measurement.property] else {
                throw AppError(.invalidInput, "\(measurement.label) is missing.")
            }
            return value
        }
        return PreflightCheck(
            id: UUID(), tailNumber: tailNumber, flightNumber: flightNumber, fuelKg: try measured(.fuel),
            tyrePressureMainPsi: try measured(.mainTyre), tyrePressureNosePsi: try measured(.noseTyre),
            oilQuarts: try measured(.oil), remarks: remarks, status: status)
    }
}

extension PrimitiveValue {
    /// The value as the app shows it.
    var display: String {
        switch self {
        case .null: "—"
        case .string(let text): text
        case .decimal(let value): "\(value)"
        case .integer(let value): "\(value)"
        case .double(let value): "\(value)"
        case .boolean(let value): value ? "yes" : "no"
        case .guid(let value): value.uuidString.lowercased()
        case .dateTimeOffset(let value): Self.shortTime(value)
        default: urlLiteral
        }
    }

    /// The value as JSON output gives it: nil for null, a time in full, otherwise as shown.
    var jsonText: String? {
        switch self {
        case .null: nil
        case .dateTimeOffset(let time): time.description
        default: display
        }
    }

    /// `2026-11-21 14:05Z`: minutes are enough at the stand.
    static func shortTime(_ value: ODataDateTimeOffset) -> String {
        let text = value.utc.description
        guard text.count >= 16 else { return text }
        return text.prefix(10) + " " + text.dropFirst(11).prefix(5) + "Z"
    }
}
