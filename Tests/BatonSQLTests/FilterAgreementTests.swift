import BatonOData
import BatonSQL
import Foundation
import PropertyBased
import Testing

/// For many generated filters over generated rows, the rows SQLite returns for the translated SQL are the
/// rows the in-memory evaluator keeps.
///
/// Generation stays where both sides are exact: decimals are multiples of 1/4 (exact in binary, so SQLite's
/// `REAL` arithmetic and comparisons agree with exact decimals), integers stay far from overflow, divisors
/// are non-zero literals, and strings are ASCII (SQLite's `lower`/`upper` are ASCII-only).
@Suite struct FilterAgreementTests {
    static let model: ServiceModel? = try? ServiceModel(
        namespace: "T",
        entityTypes: [
            EntityType(
                name: "Thing", key: ["ID"],
                properties: [
                    Property(name: "ID", type: .int32, isNullable: false),
                    Property(name: "Name", type: .string), Property(name: "Code", type: .string, isNullable: false),
                    Property(name: "Qty", type: .int32), Property(name: "Price", type: .decimal, scale: 2),
                    Property(name: "Ratio", type: .double), Property(name: "Flag", type: .boolean),
                    Property(name: "Day", type: .date), Property(name: "At", type: .dateTimeOffset),
                    Property(name: "OwnerID", type: .int32),
                ],
                navigationProperties: [
                    NavigationProperty(
                        name: "Owner", targetType: "T.Owner",
                        referentialConstraints: [.init(property: "OwnerID", referencedProperty: "ID")])
                ]),
            EntityType(
                name: "Owner", key: ["ID"],
                properties: [
                    Property(name: "ID", type: .int32, isNullable: false), Property(name: "Name", type: .string),
                    Property(name: "Qty", type: .int32),
                ]),
        ],
        entitySets: [
            EntitySet(name: "Things", entityType: "T.Thing", navigationBindings: ["Owner": "Owners"]),
            EntitySet(name: "Owners", entityType: "T.Owner"),
        ])

    static let now = ODataDateTimeOffset(parsing: "2026-11-21T12:00:00Z") ?? ODataDateTimeOffset(Date())

    @Test func sqliteAgreesWithTheEvaluator() async throws {
        let model = try #require(Self.model)
        let database = try TestDatabase(model: model)
        defer { database.remove() }
        let translator = SQLTranslator(model: model, dialect: .sqlite, now: Self.now)
        let thingType = try #require(model.entityType(named: "Thing"))
        var tableNumber = 0
        var selective = 0
        await propertyCheck(count: 300, input: Gen.int(in: 0...9999).array(of: 40...400)) { choices in
            var source = Choices(choices)
            let owners = (1...3).map { source.owner(id: $0) }
            let things = (1...8).map { source.thing(id: $0) }
            let filter = source.boolean(depth: 0)
            tableNumber += 1
            do {
                try database.queue.write { db in
                    try db.execute(sql: "DELETE FROM \"Things\"")
                    try db.execute(sql: "DELETE FROM \"Owners\"")
                }
                try database.insert(owners, into: "Owners")
                try database.insert(things, into: "Things")
                var options = QueryOptions()
                options.filter = filter
                let query = try translator.select(from: "Things", options: options)
                let fromSQL = try database.fetch(query, as: thingType).compactMap { $0["ID"] }
                let fromEvaluator = try things.filter { thing in
                    try filter.matches(now: Self.now) { path in
                        guard path.navigation == ["Owner"] else { return thing[path.property] ?? .null }
                        let owner = owners.first { $0["ID"] == thing["OwnerID"] && thing["OwnerID"] != .null }
                        return owner?[path.property] ?? .null
                    }
                }.compactMap { $0["ID"] }
                #expect(fromSQL == fromEvaluator, "filter \(filter)\nSQL \(query.sql)")
                if !fromSQL.isEmpty && fromSQL.count < things.count { selective += 1 }
            } catch {
                Issue.record("\(error) for filter \(filter)")
            }
        }
        #expect(tableNumber >= 300)
        // The filters discriminate: many keep some rows but not all (measured: 144 of 300).
        #expect(selective >= 60, "only \(selective) of \(tableNumber) filters kept some but not all rows")
    }
}

/// Turns a list of integers into choices, so the property library can shrink a failing case by shrinking
/// the list.
struct Choices {
    var values: [Int]
    var index = 0

    init(_ values: [Int]) { self.values = values }

    mutating func next(_ count: Int) -> Int {
        defer { index += 1 }
        return values.isEmpty ? 0 : values[index % values.count] % max(count, 1)
    }

    mutating func pick<T>(_ options: [T]) -> T { options[next(options.count)] }

    mutating func nullable(_ value: PrimitiveValue) -> PrimitiveValue { next(5) == 0 ? .null : value }

    // MARK: Values

    mutating func text() -> String {
        String((0..<next(5)).map { _ in pick(Array("aAbB -")) })
    }
    mutating func integer() -> Int64 { Int64(next(41)) - 20 }
    mutating func decimal() -> Decimal { Decimal(next(161) - 80) / 4 }
    mutating func double() -> Double { Double(next(81) - 40) / 8 }
    mutating func date() -> ODataDate { ODataDate(daysSinceEpoch: 20_400 + next(800)) }
    mutating func instant() -> ODataDateTimeOffset {
        let text =
            "\(date())T\(pick(["00", "07", "23"])):\(pick(["00", "30", "59"])):\(pick(["00", "15.5", "59.25"]))"
            + pick(["Z", "+01:00", "-05:30", "+14:00"])
        return ODataDateTimeOffset(parsing: text) ?? ODataDateTimeOffset(Date())
    }

    mutating func owner(id: Int) -> [String: PrimitiveValue] {
        ["ID": .integer(Int64(id)), "Name": nullable(.string(text())), "Qty": nullable(.integer(integer()))]
    }

    mutating func thing(id: Int) -> [String: PrimitiveValue] {
        [
            "ID": .integer(Int64(id)), "Name": nullable(.string(text())), "Code": .string(text()),
            "Qty": nullable(.integer(integer())), "Price": nullable(.decimal(decimal())),
            "Ratio": nullable(.double(double())), "Flag": nullable(.boolean(next(2) == 0)),
            "Day": nullable(.date(date())), "At": nullable(.dateTimeOffset(instant())),
            "OwnerID": nullable(.integer(Int64(next(4) + 1))),
        ]
    }

    // MARK: Expressions

    static func property(_ name: String, _ type: EdmPrimitiveType, nullable: Bool = true, via: [String] = [])
        -> ODataExpression
    {
        .property(PropertyPath(navigation: via, property: name, type: type, isNullable: nullable || !via.isEmpty))
    }

    mutating func maybeNull(_ expression: ODataExpression) -> ODataExpression {
        next(12) == 0 ? .literal(.null) : expression
    }

    mutating func string(depth: Int) -> ODataExpression {
        let leaf: [ODataExpression] = [
            Self.property("Name", .string), Self.property("Code", .string, nullable: false),
            Self.property("Name", .string, via: ["Owner"]), .literal(.string(text())),
        ]
        guard depth < 3, next(3) == 0 else { return maybeNull(pick(leaf)) }
        switch next(5) {
        case 0: return .function(pick([.tolower, .toupper, .trim]), [string(depth: depth + 1)])
        case 1: return .function(.concat, [string(depth: depth + 1), string(depth: depth + 1)])
        case 2:
            var arguments = [string(depth: depth + 1), .literal(.integer(Int64(next(9)) - 2))]
            if next(2) == 0 { arguments.append(.literal(.integer(Int64(next(9)) - 2))) }
            return .function(.substring, arguments)
        default: return pick(leaf)
        }
    }

    mutating func integerExpression(depth: Int) -> ODataExpression {
        let leaf: [ODataExpression] = [
            Self.property("Qty", .int32), Self.property("Qty", .int32, via: ["Owner"]), .literal(.integer(integer())),
        ]
        guard depth < 3, next(3) == 0 else { return maybeNull(pick(leaf)) }
        switch next(8) {
        case 0: return .function(.length, [string(depth: depth + 1)])
        case 1: return .function(.indexof, [string(depth: depth + 1), string(depth: depth + 1)])
        case 2:
            return .function(
                pick([.year, .month, .day]),
                [pick([Self.property("Day", .date), Self.property("At", .dateTimeOffset)])])
        case 3: return .function(pick([.hour, .minute, .second]), [Self.property("At", .dateTimeOffset)])
        case 4:
            let divisor = Int64(next(9) + 1) * (next(2) == 0 ? 1 : -1)
            return .arithmetic(pick([.div, .mod]), integerExpression(depth: depth + 1), .literal(.integer(divisor)))
        case 5: return .negate(integerExpression(depth: depth + 1))
        default:
            return .arithmetic(
                pick([.add, .sub, .mul]), integerExpression(depth: depth + 1), integerExpression(depth: depth + 1))
        }
    }

    mutating func numberExpression(depth: Int) -> ODataExpression {
        let leaf: [ODataExpression] = [
            Self.property("Price", .decimal), .literal(.decimal(decimal())), Self.property("Ratio", .double),
            .literal(.double(double())), integerExpression(depth: depth + 1),
        ]
        guard depth < 3, next(3) == 0 else { return maybeNull(pick(leaf)) }
        switch next(4) {
        case 0: return .function(pick([.round, .floor, .ceiling]), [numberExpression(depth: depth + 1)])
        case 1:
            return .arithmetic(
                pick([.add, .sub]), numberExpression(depth: depth + 1), numberExpression(depth: depth + 1))
        default: return pick(leaf)
        }
    }

    mutating func comparison(depth: Int) -> ODataExpression {
        let op = pick(ComparisonOperator.allCases)
        switch next(6) {
        case 0: return .comparison(op, string(depth: depth), string(depth: depth))
        case 1: return .comparison(op, integerExpression(depth: depth), integerExpression(depth: depth))
        case 2: return .comparison(op, numberExpression(depth: depth), numberExpression(depth: depth))
        case 3:
            return .comparison(
                op, Self.property("Day", .date),
                maybeNull(pick([.literal(.date(date())), .function(.date, [Self.property("At", .dateTimeOffset)])])))
        case 4:
            return .comparison(
                op, Self.property("At", .dateTimeOffset), maybeNull(.literal(.dateTimeOffset(instant()))))
        default:
            return .comparison(
                pick([.eq, .ne]), Self.property("Flag", .boolean), maybeNull(.literal(.boolean(next(2) == 0))))
        }
    }

    mutating func boolean(depth: Int) -> ODataExpression {
        guard depth < 3 else { return comparison(depth: depth) }
        switch next(9) {
        case 0: return .logical(pick([.and, .or]), boolean(depth: depth + 1), boolean(depth: depth + 1))
        case 1: return .not(boolean(depth: depth + 1))
        case 2:
            return .function(
                pick([.contains, .startswith, .endswith]), [string(depth: depth + 1), string(depth: depth + 1)])
        case 3: return Self.property("Flag", .boolean)
        case 4:
            return .in(
                integerExpression(depth: depth + 1), (0..<next(4)).map { _ in maybeNull(.literal(.integer(integer()))) }
            )
        case 5: return .in(string(depth: depth + 1), (0..<next(3)).map { _ in .literal(.string(text())) })
        default: return comparison(depth: depth + 1)
        }
    }
}
