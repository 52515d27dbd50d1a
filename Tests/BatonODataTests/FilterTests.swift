import BatonOData
import Foundation
import Testing

@Suite struct FilterTests {
    let model: ServiceModel
    let checks: EntityType

    init() throws {
        model = try ServiceModel.aircraftChecks
        checks = try #require(model.entityType(named: "PreflightCheck"))
    }

    func parse(_ text: String) throws -> ODataExpression {
        try ODataExpression(parsing: text, for: checks, in: model)
    }

    static let fuel = ODataExpression.property(PropertyPath(property: "FuelKg", type: .decimal, isNullable: false))
    static let oil = ODataExpression.property(PropertyPath(property: "OilQuarts", type: .decimal, isNullable: false))
    static let remarks = ODataExpression.property(PropertyPath(property: "Remarks", type: .string, isNullable: true))

    @Test func precedenceFollowsURLConventions() throws {
        // mul binds tighter than add, add tighter than gt, gt tighter than eq, eq tighter than and, and than or.
        #expect(
            try parse("FuelKg add OilQuarts mul 2 gt 5")
                == .comparison(
                    .gt, .arithmetic(.add, Self.fuel, .arithmetic(.mul, Self.oil, .literal(.integer(2)))),
                    .literal(.integer(5))))
        #expect(
            try parse("FuelKg gt 1 or FuelKg lt 0 and OilQuarts eq 2")
                == .logical(
                    .or, .comparison(.gt, Self.fuel, .literal(.integer(1))),
                    .logical(
                        .and, .comparison(.lt, Self.fuel, .literal(.integer(0))),
                        .comparison(.eq, Self.oil, .literal(.integer(2))))))
        #expect(
            try parse("(FuelKg add 1) mul 2")
                == .arithmetic(
                    .mul, .arithmetic(.add, Self.fuel, .literal(.integer(1))), .literal(.integer(2))))
        #expect(try parse("-FuelKg") == .negate(Self.fuel))
        #expect(
            try parse("not contains(Remarks,'x')")
                == .not(.function(.contains, [Self.remarks, .literal(.string("x"))])))
    }

    @Test func operatorsAndFunctionsAreCaseInsensitive() throws {
        #expect(try parse("FuelKg GT 1 AND CONTAINS(Remarks,'x')") == parse("FuelKg gt 1 and contains(Remarks,'x')"))
    }

    @Test func navigationPathsResolveThroughSingleValuedNavigation() throws {
        #expect(
            try parse("Aircraft/Station")
                == .property(
                    PropertyPath(navigation: ["Aircraft"], property: "Station", type: .string, isNullable: false)))
        #expect(
            try parse("Flight/Gate")
                == .property(
                    PropertyPath(navigation: ["Flight"], property: "Gate", type: .string, isNullable: true)))
    }

    @Test(arguments: [
        ("null", PrimitiveValue.null), ("true", .boolean(true)), ("42", .integer(42)), ("-7", .integer(-7)),
        ("12.50", .decimal(Decimal(string: "12.5") ?? 0)), ("1e3", .double(1000)), ("INF", .double(.infinity)),
        ("-INF", .double(-.infinity)), ("'O''Neil'", .string("O'Neil")),
        ("2026-11-21", .date(ODataDate(year: 2026, month: 11, day: 21)!)),
        ("08:30:15.25", .timeOfDay(ODataTimeOfDay(hour: 8, minute: 30, second: 15, picoseconds: 250_000_000_000)!)),
        ("duration'PT1H30M'", .duration(ODataDuration(seconds: 5400))),
        ("0f8fad5b-d9cb-469f-a165-70867728950e", .guid(UUID(uuidString: "0f8fad5b-d9cb-469f-a165-70867728950e")!)),
    ])
    func literalsParseToTypedValues(text: String, value: PrimitiveValue) throws {
        #expect(try PrimitiveValue(parsingLiteral: text) == value)
    }

    @Test func dateTimeOffsetLiteralsCompareByInstant() throws {
        let a = try PrimitiveValue(parsingLiteral: "2026-11-21T08:00:00%2B01:00")
        let b = try PrimitiveValue(parsingLiteral: "2026-11-21T07:00:00Z")
        #expect(a == b)
    }

    @Test func notANumberLiteralIsADouble() throws {
        guard case .double(let value) = try PrimitiveValue(parsingLiteral: "NaN") else {
            Issue.record("NaN is not a double")
            return
        }
        #expect(value.isNaN)
    }

    @Test(arguments: [
        ("FuelKg gt 'lots'", "Cannot compare Edm.Decimal with Edm.String using 'gt'", 7),
        ("FuelKg and true", "'and' needs boolean operands, but one is Edm.Decimal", 7),
        ("length(FuelKg) eq 1", "Argument 1 of 'length' is Edm.Decimal, which does not fit length(Edm.String)", 7),
        ("Remarks add 1 eq 2", "'add' needs numeric operands, but one is Edm.String", 8),
        ("frobnicate(Remarks)", "Unknown function 'frobnicate'.", 0),
        ("tolowr(Remarks) eq 'x'", "Unknown function 'tolowr'. Did you mean 'tolower'?", 0),
        ("Remarks eq \"x\"", "String literals use single quotes: 'text'", 11),
        ("Remarks eq 'x", "Unterminated string literal; close it with a single quote (write '' for a quote)", 13),
        ("FuelKg gt 1.", "Expected digits after the decimal point in '1.'", 12),
    ])
    func typeAndSyntaxErrorsAreExplained(text: String, message: String, position: Int) {
        do {
            _ = try ODataExpression(parsing: text, for: checks, in: model, boolean: true)
            Issue.record("'\(text)' parsed")
        } catch {
            #expect(error.message == message)
            #expect(error.position == position)
        }
    }

    @Test func filtersMustBeBoolean() {
        #expect(throws: ODataError.self) {
            try ODataExpression(parsing: "FuelKg add 1", for: checks, in: model, boolean: true)
        }
    }

    @Test func deeplyNestedInputIsRefusedNotACrash() {
        let deep = String(repeating: "(", count: 5000) + "true" + String(repeating: ")", count: 5000)
        #expect {
            try ODataExpression(parsing: deep, for: checks, in: model, boolean: true)
        } throws: { ($0 as? ODataError)?.code == .limitExceeded }
        let notChain = String(repeating: "not ", count: 5000) + "true"
        #expect(throws: ODataError.self) {
            try ODataExpression(parsing: notChain, for: checks, in: model, boolean: true)
        }
    }
}

@Suite struct EvaluationTests {
    static let now = ODataDateTimeOffset(parsing: "2026-11-21T06:00:00Z") ?? ODataDateTimeOffset(Date())

    func value(_ text: String, _ row: [String: PrimitiveValue] = [:]) throws -> PrimitiveValue {
        let model = try ServiceModel.aircraftChecks
        let checks = try #require(model.entityType(named: "PreflightCheck"))
        let expression = try ODataExpression(parsing: text, for: checks, in: model)
        return try expression.evaluate(now: Self.now) { row[$0.property] ?? .null }
    }

    @Test(arguments: [
        // eq/ne treat null as a value; ordering comparisons with null are false.
        ("Remarks eq null", PrimitiveValue.boolean(true)), ("Remarks ne null", .boolean(false)),
        ("Remarks eq 'x'", .boolean(false)), ("Remarks gt 'a'", .boolean(false)),
        ("not (Remarks gt 'a')", .boolean(true)),
        // Three-valued logic: null and false is false, null or true is true, otherwise null.
        ("contains(Remarks,'x') and false", .boolean(false)), ("contains(Remarks,'x') or true", .boolean(true)),
        ("contains(Remarks,'x') and true", .null), ("not contains(Remarks,'x')", .null),
        ("length(Remarks) add 1", .null),
    ])
    func nullFollowsODataSemantics(text: String, expected: PrimitiveValue) throws {
        #expect(try value(text, ["Remarks": .null]) == expected)
    }

    @Test(arguments: [
        ("substring('ABCDEF', 2)", PrimitiveValue.string("CDEF")), ("substring('ABCDEF', 2, 2)", .string("CD")),
        ("substring('ABC', 5)", .string("")), ("substring('ABC', -1, 2)", .string("AB")),
        ("indexof('tyre worn','worn')", .integer(5)), ("indexof('abc','z')", .integer(-1)),
        ("concat('D-','AIBL')", .string("D-AIBL")), ("trim('  oil ')", .string("oil")),
        ("toupper('Ab')", .string("AB")),
        ("length('€uro')", .integer(4)), ("startswith('D-AIBL','D-')", .boolean(true)),
        ("endswith('D-AIBL','BL')", .boolean(true)),
        ("round(2.5)", .decimal(3)), ("round(-2.5)", .decimal(-3)), ("floor(-2.5)", .decimal(-3)),
        ("ceiling(2.1)", .decimal(3)),
        ("7 div 2", .integer(3)), ("-7 mod 3", .integer(-1)), ("7 divby 2", .decimal(3.5)), ("1 div 0", .null),
        ("0.1 add 0.2 eq 0.3", .boolean(true)),
        ("year(2026-11-21T23:30:00-02:00)", .integer(2026)), ("day(2026-11-21T23:30:00-02:00)", .integer(22)),
        ("hour(2026-11-21T23:30:00-02:00)", .integer(1)),
        ("date(now())", .date(ODataDate(year: 2026, month: 11, day: 21)!)),
        ("2 in (1, 2, 3)", .boolean(true)), ("'x' in ('a','b')", .boolean(false)),
    ])
    func functionsAndOperatorsEvaluate(text: String, expected: PrimitiveValue) throws {
        #expect(try value(text) == expected)
    }

    @Test func hugeSubstringLengthsAndExtremeDatesDoNotCrash() throws {
        #expect(try value("substring('ABCDEF', 2, 9223372036854775807)") == .string("CDEF"))
        #expect(try value("substring('ABCDEF', 9223372036854775807)") == .string(""))
        #expect(ODataDate(year: Int.min, month: 1, day: 1) == nil)
        #expect(ODataDate(year: Int.max, month: 1, day: 1) == nil)
    }

    @Test func integerOverflowIsAnErrorNotAWrap() {
        #expect(throws: ODataError.self) { try value("9223372036854775807 add 1") }
    }
}
