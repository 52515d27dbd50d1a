import AircraftChecks
import BatonCodegen
import BatonOData
import Foundation
import Testing

/// `baton-codegen`: the checked-in types are what it writes, every Edm type the server supports generates code
/// that compiles (Generated/AllTypes.swift is in this target), and no model puts code into the app.
@Suite struct CodegenTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    static func generate(_ model: String, source: String) throws -> String {
        let text = try String(contentsOf: root.appendingPathComponent(model), encoding: .utf8)
        return try EntityCodeGenerator.swiftSource(for: try ServiceModel(csdlJSON: text), source: source)
    }

    @Test func theCheckedInAircraftChecksTypesAreWhatTheGeneratorWrites() throws {
        let generated = try Self.generate(
            "Sources/BatonOData/Resources/AircraftChecks.csdl.json", source: "AircraftChecks.csdl.json")
        let checkedIn = try String(
            contentsOf: Self.root.appendingPathComponent("Sources/AircraftChecks/AircraftChecks.swift"), encoding: .utf8
        )
        #expect(generated == checkedIn, "Sources/AircraftChecks is stale: run scripts/codegen")
    }

    @Test func theCheckedInAllTypesFileIsWhatTheGeneratorWrites() throws {
        let generated = try Self.generate("Tests/BatonCodegenTests/AllTypes.csdl.json", source: "AllTypes.csdl.json")
        let checkedIn = try String(
            contentsOf: Self.root.appendingPathComponent("Tests/BatonCodegenTests/Generated/AllTypes.swift"),
            encoding: .utf8)
        #expect(generated == checkedIn, "run scripts/codegen")
    }

    @Test func everyEdmTypeMapsToItsSwiftTypeAndRoundTrips() throws {
        let thing = Thing(
            id: UUID(), code: 7, small: 255, long: Int64.min, single: 1.5,
            at: Date(timeIntervalSince1970: 1_800_000_000.125),
            wait: ODataDuration(seconds: 90))
        // Defaults from the model: a string with a quote, a backslash and a line break; a negative Int16; a decimal; a date.
        #expect(thing.name == "a \"quoted\" \\ name\n")
        #expect(thing.flag && thing.short == -7 && thing.amount == Decimal(string: "12.5"))
        #expect(thing.day == ODataDate(year: 2026, month: 11, day: 26))
        #expect(thing.note == nil && thing.stamp == nil)
        // An enumeration type is a Swift enum; the model's default is its case; member names the enum itself uses
        // are suffixed, keywords escaped.
        #expect(thing.tone == .dark && thing.backup == nil)
        #expect(Shade.allCases == [.light, .dark, .default, .allCases_])
        #expect(Shade.default.rawValue == "default" && Shade.enumType.qualifiedName == "Every.Shade")
        var wrong = thing.values
        wrong["Tone"] = .string("Purple")
        #expect(
            throws: ODataError(
                .invalidPayload,
                "Property 'Tone' of 'Thing' expects a member of Every.Shade (Light, Dark, default, allCases)",
                target: "Tone")
        ) { try Thing(values: wrong) }
        // Keyword and member names are escaped: `protocol`, `values_`; an acronym is lowered as a whole.
        var changed = thing
        changed.protocol = "http"
        changed.values_ = 3
        changed.urlPath = "/a"
        changed.blob = Data([0, 1, 255])
        changed.time = ODataTimeOfDay(hour: 6, minute: 30)
        changed.signed = -128
        changed.ratio = 0.25
        changed.backup = .light
        let again = try Thing(values: changed.values)
        #expect(again == changed)
        #expect(changed.values["Values"] == .integer(3))
        #expect(changed.values["Stamp"] == nil)  // computed: never sent
        #expect(changed.entityID.hasPrefix("Things(ID="))
        // JSON as the server writes it, computed properties included.
        var members: [(String, JSONValue)] = changed.values.map { name, value in
            (name, value.json(as: Thing.entityType.property(named: name)?.type ?? .string))
        }
        members.append(("Stamp", .string("2026-11-26T08:00:00.000Z")))
        members.append(("@odata.etag", .string("W/\"1\"")))
        let fromJSON = try Thing(json: .object(members))
        #expect(fromJSON.stamp == Date(timeIntervalSince1970: 1_795_680_000))
        #expect(fromJSON.values == changed.values)
    }

    @Test func missingAndMistypedValuesNameTheProperty() {
        var values = PreflightCheck(
            id: UUID(), tailNumber: "D-AIBL", fuelKg: 1, tyrePressureMainPsi: 2, tyrePressureNosePsi: 3, oilQuarts: 4
        ).values
        values["FuelKg"] = nil
        #expect(
            throws: ODataError(.invalidPayload, "Property 'FuelKg' is required; add it to the body", target: "FuelKg")
        ) {
            try PreflightCheck(values: values)
        }
        values["FuelKg"] = .string("lots")
        #expect(
            throws: ODataError(
                .invalidPayload,
                "Property 'FuelKg' of 'PreflightCheck' expects Edm.Decimal, but the value is Edm.String",
                target: "FuelKg")
        ) { try PreflightCheck(values: values) }
    }

    @Test(arguments: [
        (#""Bad Name""#, "The property of 'Thing' \"Bad Name\" is not a plain ASCII identifier"),
        (#""Na\u00efve""#, "The property of 'Thing' \"Na\\u{ef}ve\" is not a plain ASCII identifier"),
        (
            #""X\"); import Evil; (\"""#,
            "The property of 'Thing' \"X\\\"); import Evil; (\\\"\" is not a plain ASCII identifier"
        ),
    ])
    func aModelCannotPutCodeIntoTheApp(name: String, message: String) throws {
        let model = """
            {"$Version":"4.01","$EntityContainer":"N.C","N":{
              "Thing":{"$Kind":"EntityType","$Key":["ID"],"ID":{"$Type":"Edm.Int32"},\(name):{"$Nullable":true}},
              "C":{"$Kind":"EntityContainer","Things":{"$Collection":true,"$Type":"N.Thing"}}}}
            """
        let parsed = try ServiceModel(csdlJSON: model)
        #expect {
            try EntityCodeGenerator.swiftSource(for: parsed, source: "evil.json")
        } throws: { error in
            (error as? EntityCodeGenerator.Failure)?.message.hasPrefix(message) == true
        }
    }

    @Test func aTypeNamedLikeASwiftTypeTheCodeUsesIsRefusedAndTheSourceNameCannotBreakTheComment() throws {
        let model = """
            {"$Version":"4.01","$EntityContainer":"N.C","N":{
              "Date":{"$Kind":"EntityType","$Key":["ID"],"ID":{"$Type":"Edm.Int32"}},
              "C":{"$Kind":"EntityContainer","Dates":{"$Collection":true,"$Type":"N.Date"}}}}
            """
        #expect(throws: EntityCodeGenerator.Failure.self) {
            try EntityCodeGenerator.swiftSource(for: try ServiceModel(csdlJSON: model), source: "x.json")
        }
        let aircraft = try EntityCodeGenerator.swiftSource(
            for: try ServiceModel.aircraftChecks, source: "a\nimport Evil\n.json")
        #expect(!aircraft.contains("\nimport Evil"))
    }

    /// A namespace is a JSON key of the model, written into doc comments: a line break in it would end the comment
    /// and put the rest into the app's code.
    @Test(arguments: ["N\npublic let pwned = 1\n//", "N.\u{2028}X", "N..M"]) func aNamespaceCannotPutCodeIntoTheApp(
        namespace: String
    ) throws {
        let key = JSONValue.string(namespace).serialized
        let model = """
            {"$Version":"4.01","$EntityContainer":\(JSONValue.string(namespace + ".C").serialized),\(key):{
              "Shade":{"$Kind":"EnumType","A":0},
              "Thing":{"$Kind":"EntityType","$Key":["ID"],"ID":{"$Type":"Edm.Int32"}},
              "C":{"$Kind":"EntityContainer","Things":{"$Collection":true,"$Type":\(JSONValue.string(namespace + ".Thing").serialized)}}}}
            """
        let parsed = try ServiceModel(csdlJSON: model)
        #expect(throws: EntityCodeGenerator.Failure.self) {
            try EntityCodeGenerator.swiftSource(for: parsed, source: "evil.json")
        }
    }

    /// A value a server could send that a Swift type cannot hold is refused, never a trap: an instant past what
    /// Int64 milliseconds reach, a double beyond Single's range.
    @Test func valuesBeyondTheSwiftTypesRangeAreRefusedNotTrapped() throws {
        let far = try #require(ODataDateTimeOffset(parsing: "999999999-01-01T00:00:00Z"))
        #expect(Date(primitive: .dateTimeOffset(far)) == nil)
        let near = try #require(ODataDateTimeOffset(parsing: "2026-11-26T08:00:00.125Z"))
        #expect(Date(primitive: .dateTimeOffset(near)) == Date(timeIntervalSince1970: 1_795_680_000.125))
        #expect(Float(primitive: .double(1e300)) == nil)
        #expect(Float(primitive: .double(1.5)) == 1.5)
    }
}
