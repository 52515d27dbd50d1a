import BatonOData
import Foundation

/// The server's corpus of invalid `PreflightChecks` bodies: a valid check with one member replaced, added or left
/// out, and the words the server answers with. The server's data-service tests post each one; the offline store's
/// tests create each one on a tablet and expect the same words about the same property.
public enum InvalidCheckBodies {
    /// One invalid body.
    public struct Case: Sendable, CustomStringConvertible {
        /// The member replaced or added (`"FuelKg":"lots"`), or `nil` when a member is left out.
        public var member: String?
        /// The member left out.
        public var omitted: String?
        /// What the server says.
        public var message: String
        /// The property the error names.
        public var target: String
        public var description: String { member ?? "without \(omitted ?? "")" }
    }

    /// A valid check's members, in body order, for an aircraft the tests' servers have (`D-AIBL`).
    public static func validMembers(id: UUID) -> [(String, JSONValue)] {
        [
            ("ID", .string(id.uuidString.lowercased())), ("TailNumber", .string("D-AIBL")),
            ("FuelKg", .number("5200.5")), ("TyrePressureMainPsi", .number("200.5")),
            ("TyrePressureNosePsi", .number("58")), ("OilQuarts", .number("12.25")), ("Remarks", .null),
            ("Status", .string("final")),
        ]
    }

    public static let cases: [Case] = [
        replaced(
            #""FuelKg":"lots""#,
            "Property 'FuelKg' expects a decimal number written without an exponent, but the payload has a string"),
        replaced(#""TailNumber":42"#, "Property 'TailNumber' expects a string, but the payload has a number"),
        replaced(
            #""TailNumber":"D-AIBL-TOO-LONG""#,
            "Property 'TailNumber' allows at most 10 characters, but the value has 15"),
        replaced(
            #""FuelKg":5200.55"#, "Property 'FuelKg' allows 1 digit(s) after the decimal point, but the value has 2"),
        replaced(
            #""FuelKg":123456789"#,
            "Property 'FuelKg' allows 8 digit(s) before the decimal point (Precision 9, Scale 1)"),
        replaced(#""Status":null"#, "Property 'Status' is not nullable; give it a value"),
        replaced(#""Status":true"#, "Property 'Status' expects a string, but the payload has a boolean"),
        replaced(#""Remarks":7"#, "Property 'Remarks' expects a string, but the payload has a number"),
        replaced(
            #""ID":"not-a-guid""#,
            "Property 'ID' expects a GUID string like \"01234567-89ab-cdef-0123-456789abcdef\", but the payload has a string"
        ),
        replaced(#""FuelKgs":1"#, "'PreflightCheck' has no property 'FuelKgs'. Did you mean 'FuelKg'?"),
        omitted("ID", "Property 'ID' is required; add it to the body"),
        omitted("TailNumber", "Property 'TailNumber' is required; add it to the body"),
        omitted("OilQuarts", "Property 'OilQuarts' is required; add it to the body"),
    ]

    static func replaced(_ member: String, _ message: String) -> Case {
        let name = String(member.dropFirst().prefix { $0 != "\"" })
        return Case(member: member, omitted: nil, message: message, target: name)
    }

    static func omitted(_ name: String, _ message: String) -> Case {
        Case(member: nil, omitted: name, message: message, target: name)
    }

    /// The members of the case's body: the valid ones with its change made.
    public static func members(of invalid: Case, id: UUID) throws -> [(String, JSONValue)] {
        var members = validMembers(id: id)
        if let omitted = invalid.omitted { members.removeAll { $0.0 == omitted } }
        if let member = invalid.member {
            let replacement = try JSONValue(parsing: Array("{\(member)}".utf8)).objectMembers ?? []
            members.removeAll { old in replacement.contains { $0.0 == old.0 } }
            members += replacement
        }
        return members
    }

    /// The case's body as JSON text.
    public static func body(of invalid: Case, id: UUID) throws -> String {
        JSONValue.object(try members(of: invalid, id: id)).serialized
    }

    /// The case's body as the offline store's values, each JSON kind as the `PrimitiveValue` an app would pass
    /// (a string as `.string`, a number as `.decimal`, `true` as `.boolean`, `null` as `.null`).
    public static func values(of invalid: Case, id: UUID) throws -> [String: PrimitiveValue] {
        var values: [String: PrimitiveValue] = [:]
        for (name, json) in try members(of: invalid, id: id) {
            switch json {
            case .string(let text):
                values[name] =
                    name == "ID" ? UUID(uuidString: text).map(PrimitiveValue.guid) ?? .string(text) : .string(text)
            case .number(let text):
                values[name] = .decimal(Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) ?? 0)
            case .bool(let flag): values[name] = .boolean(flag)
            case .null: values[name] = .null
            default: values[name] = .string(json.serialized)
            }
        }
        return values
    }
}
