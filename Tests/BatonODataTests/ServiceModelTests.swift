import BatonOData
import Testing

@Suite struct ServiceModelTests {
    /// The model's names are looked up byte for byte: a set, a type or a key property named with a canonically
    /// equivalent string (a Kelvin sign for `K`, a combined `é` for a precomposed one) is not found, and neither is a
    /// name one byte shorter or longer. ``String/hasSameBytes(as:)`` compares the two buffers whole.
    @Test func namesAreFoundByTheirExactBytes() throws {
        #expect("PreflightChecks".hasSameBytes(as: String("xPreflightChecks".dropFirst())))
        #expect("".hasSameBytes(as: ""))
        #expect(!"".hasSameBytes(as: "a"))
        #expect(!"Caf\u{E9}".hasSameBytes(as: "Cafe\u{301}"))
        #expect(!"\u{212A}".hasSameBytes(as: "K"))
        let long = String(repeating: "ab", count: 40)
        #expect(long.hasSameBytes(as: String(repeating: "ab", count: 40)))
        #expect(!long.hasSameBytes(as: long + "a"))
        #expect(!long.hasSameBytes(as: String(long.dropLast()) + "c"))
        let model = try ServiceModel.aircraftChecks
        #expect(model.entitySet(named: "PreflightChecks") != nil)
        #expect(model.entitySet(named: "PreflightCheck") == nil)
        #expect(model.entitySet(named: "PreflightChecksX") == nil)
        let type = try #require(model.entityType(named: "PreflightCheck"))
        #expect(model.entityType(named: "PreflightCheckX") == nil)
        #expect(type.property(named: "ID") != nil)
        #expect(type.property(named: "IDs") == nil)
        // The premise, Swift's own: `==` and the property index's hashing take a Kelvin sign for a `K`.
        try #require("Fuel\u{212A}g" == "FuelKg")
        #expect(type.property(named: "FuelKg") != nil)
        #expect(type.property(named: "Fuel\u{212A}g") == nil)
    }

    @Test func bundledModelHasTheAircraftChecksSets() throws {
        let model = try ServiceModel.aircraftChecks
        #expect(model.entitySets.map(\.name) == ["Aircraft", "Flights", "PreflightChecks", "CheckPhotos"])
        let checks = try #require(model.entityType(named: "Baton.PreflightCheck"))
        #expect(checks.key == ["ID"])
        #expect(checks.property(named: "ID")?.type == .guid)
        #expect(checks.property(named: "FuelKg")?.type == .decimal)
        #expect(checks.property(named: "FuelKg")?.scale == 1)
        #expect(checks.property(named: "CheckedBy")?.isComputed == true)
        #expect(checks.property(named: "Remarks")?.isNullable == true)
        #expect(checks.property(named: "TailNumber")?.isNullable == false)
        #expect(checks.navigationProperty(named: "Aircraft")?.referentialConstraints.first?.property == "TailNumber")
        #expect(model.entitySet(named: "PreflightChecks")?.optimisticConcurrency == ["ChangedAt"])
        #expect(model.supportsRepeatableRequests)
    }

    /// An entity type is found by its simple, namespace-qualified or alias-qualified name, byte for byte, and by
    /// nothing that only resembles one.
    @Test func entityTypesAreFoundByTheirNamesExactly() throws {
        var model = try ServiceModel.aircraftChecks
        model.alias = "B"
        for name in ["PreflightCheck", "Baton.PreflightCheck", "B.PreflightCheck"] {
            #expect(model.entityType(named: name)?.name == "PreflightCheck", "\(name)")
        }
        for name in [
            "", ".", "Baton.", "B.", ".PreflightCheck", "BatonXPreflightCheck", "Baton.PreflightChecks",
            "Baton.Baton.PreflightCheck", "baton.PreflightCheck", "Baton.PreflightCheck\u{301}", "C.PreflightCheck",
            "BatonPreflightCheck",
        ] {
            #expect(model.entityType(named: name) == nil, "\(name)")
        }
        // The first type whose name matches wins, as before.
        #expect(model.entityType(named: "Baton.Aircraft")?.name == "Aircraft")
    }

    @Test func csdlJSONRoundTripsToAnEqualModel() throws {
        let model = try ServiceModel.aircraftChecks
        let text = model.csdlJSONDocument.serialized
        #expect(try ServiceModel(csdlJSON: text) == model)
    }

    static let withEnum = """
        {"$Version": "4.01", "$EntityContainer": "N.C", "N": {
          "Shade": {"$Kind": "EnumType", "$UnderlyingType": "Edm.Byte", "Light": 0, "Dark": 1},
          "Note": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {"$Type": "Edm.Int32"},
            "Tone": {"$Type": "N.Shade", "$DefaultValue": "Dark"}, "Backup": {"$Type": "N.Shade", "$Nullable": true}},
          "C": {"$Kind": "EntityContainer", "Notes": {"$Collection": true, "$Type": "N.Note"}}}}
        """

    @Test func enumerationTypesLoadRoundTripAndCheckMembersByName() throws {
        let model = try ServiceModel(csdlJSON: Self.withEnum)
        let shade = try #require(model.enumTypes.first)
        #expect(shade.qualifiedName == "N.Shade" && shade.underlyingType == .byte)
        #expect(shade.members == [.init(name: "Light", value: 0), .init(name: "Dark", value: 1)])
        let tone = try #require(model.entityType(named: "Note")?.property(named: "Tone"))
        #expect(tone.type == .string && tone.enumType == shade && tone.defaultValue == .string("Dark"))
        #expect(try ServiceModel(csdlJSON: model.csdlJSONDocument.serialized) == model)
        #expect(model.csdlXML.contains(#"<EnumType Name="Shade" UnderlyingType="Edm.Byte">"#))
        #expect(model.csdlXML.contains(#"<Member Name="Dark" Value="1"/>"#))
        #expect(model.csdlXML.contains(#"<Property Name="Tone" Type="N.Shade" Nullable="false" DefaultValue="Dark"/>"#))
        #expect(try PrimitiveValue(json: .string("Light"), for: tone) == .string("Light"))
        for (wrong, kind) in [
            (JSONValue.string("light"), "a string"), (.string("Purple"), "a string"), (.number("0"), "a number"),
        ] {
            #expect(
                throws: ODataError(
                    .invalidPayload,
                    "Property 'Tone' expects a member of N.Shade (Light, Dark) by name, but the payload has \(kind)",
                    target: "Tone")
            ) { try PrimitiveValue(json: wrong, for: tone) }
        }
        let flags = Self.withEnum.replacingOccurrences(of: #""Edm.Byte","#, with: #""Edm.Byte", "$IsFlags": true,"#)
        #expect(throws: ODataError.self) { try ServiceModel(csdlJSON: flags) }
        let badDefault = Self.withEnum.replacingOccurrences(
            of: #""$DefaultValue": "Dark""#, with: #""$DefaultValue": "Grey""#)
        #expect(throws: ODataError.self) { try ServiceModel(csdlJSON: badDefault) }
    }

    @Test func csdlXMLDescribesKeysFacetsAnnotationsAndBindings() throws {
        let xml = try ServiceModel.aircraftChecks.csdlXML
        #expect(xml.hasPrefix("<?xml version=\"1.0\" encoding=\"utf-8\"?>"))
        #expect(xml.contains("<PropertyRef Name=\"TailNumber\"/>"))
        #expect(
            xml.contains(
                "<Property Name=\"FuelKg\" Type=\"Edm.Decimal\" Nullable=\"false\" Precision=\"9\" Scale=\"1\"/>"))
        #expect(xml.contains("<Annotation Term=\"Org.OData.Core.V1.Computed\" Bool=\"true\"/>"))
        #expect(xml.contains("<ReferentialConstraint Property=\"TailNumber\" ReferencedProperty=\"TailNumber\"/>"))
        #expect(xml.contains("<NavigationPropertyBinding Path=\"Checks\" Target=\"PreflightChecks\"/>"))
        #expect(xml.contains("<PropertyPath>ChangedAt</PropertyPath>"))
        #expect(xml.contains("Org.OData.Repeatability.V1.Supported"))
    }

    @Test func defaultValuesLoadAreDescribedAndApplyToCreatesOnly() throws {
        let model = try ServiceModel.aircraftChecks
        let checks = try #require(model.entityType(named: "PreflightCheck"))
        #expect(checks.properties.first { $0.name == "Status" }?.defaultValue == .string("final"))
        #expect(
            model.csdlXML.contains(
                #"<Property Name="Status" Type="Edm.String" Nullable="false" MaxLength="20" DefaultValue="final"/>"#))
        #expect(model.csdlJSONDocument.serialized.contains(#""$DefaultValue":"final""#))
        let body =
            #"{"ID":"0f8fad5b-d9cb-469f-a165-70867728950e","TailNumber":"D-AIBL","FuelKg":1,"TyrePressureMainPsi":1,"TyrePressureNosePsi":1,"OilQuarts":1}"#
        let created = try EntityPayload(decoding: Array(body.utf8), as: checks, mode: .create, model: model)
        #expect(created.values["Status"] == .string("final"))
        let given = body.replacingOccurrences(of: "}", with: #","Status":"draft"}"#)
        #expect(
            try EntityPayload(decoding: Array(given.utf8), as: checks, mode: .create, model: model).values["Status"]
                == .string("draft"))
        // A PATCH changes only what it names.
        let merged = try EntityPayload(
            decoding: Array(#"{"Remarks":"ok"}"#.utf8), as: checks, mode: .merge, model: model)
        #expect(merged.values["Status"] == nil)
        // A default that does not fit its property is a model error that names it.
        #expect {
            try ServiceModel(
                csdlJSON: Self.document(
                    #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {}, "N": {"$Type": "Edm.Int32", "$DefaultValue": "many"}}, "C": {"$Kind": "EntityContainer"}"#
                ))
        } throws: { error in
            (error as? ODataError)?.message.hasPrefix("The $DefaultValue of 'T/N' is not a valid Edm.Int32") == true
        }
        // $metadata in XML writes each default in its payload form, as CSDL XML wants: no URL-literal prefix
        // (`duration'P1D'` was written before).
        let typed = try ServiceModel(
            csdlJSON: Self.document(
                #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {}, "N": {"$Type": "Edm.Int32", "$DefaultValue": 3}, "D": {"$Type": "Edm.Duration", "$DefaultValue": "P1D"}, "B": {"$Type": "Edm.Boolean", "$DefaultValue": true}}, "C": {"$Kind": "EntityContainer"}"#
            ))
        #expect(typed.csdlXML.contains(#"Name="N" Type="Edm.Int32" Nullable="false" DefaultValue="3""#))
        #expect(typed.csdlXML.contains(#"Name="D" Type="Edm.Duration" Nullable="false" DefaultValue="P1DT0S""#))
        #expect(typed.csdlXML.contains(#"Name="B" Type="Edm.Boolean" Nullable="false" DefaultValue="true""#))
    }

    @Test func compositeKeysLoad() throws {
        let model = try ServiceModel(
            csdlJSON: Self.document(
                """
                "Leg": {"$Kind": "EntityType", "$Key": ["Flight", "Day"], "Flight": {}, "Day": {"$Type": "Edm.Date"}},
                "C": {"$Kind": "EntityContainer", "Legs": {"$Collection": true, "$Type": "M.Leg"}}
                """))
        #expect(model.entityType(named: "Leg")?.key == ["Flight", "Day"])
        let url = try ODataURL(parsing: "Legs(Day=2026-11-21,Flight='LH400')", model: model)
        #expect(
            url.path
                == .resource([
                    .entitySet("Legs"),
                    .key([
                        KeyValue(name: "Flight", value: .string("LH400")),
                        KeyValue(name: "Day", value: .date(try #require(ODataDate(year: 2026, month: 11, day: 21)))),
                    ]),
                ]))
    }

    static func document(_ members: String) -> String {
        "{\"$Version\": \"4.01\", \"M\": {\(members)}}"
    }

    @Test(arguments: [
        (
            #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {"$Type": "Edm.Strin"}}, "C": {"$Kind": "EntityContainer"}"#,
            "Property 'T/ID' has unknown type 'Edm.Strin'. Use an Edm primitive type such as Edm.String, Edm.Int32, Edm.Decimal or Edm.DateTimeOffset."
        ),
        (
            #""T": {"$Kind": "EntityType", "ID": {}}, "C": {"$Kind": "EntityContainer"}"#,
            "Entity type 'T' has no key. Add \"$Key\": [\"<property>\"] to its declaration."
        ),
        (
            #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {}, "N": {"$Kind": "NavigationProperty", "$Type": "M.Nope"}}, "C": {"$Kind": "EntityContainer"}"#,
            "Navigation property 'T/N' points at unknown type 'M.Nope'. Declare that entity type or fix the name."
        ),
        (
            #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {}, "N": {"$Kind": "NavigationProperty", "$Type": "M.T", "$Partner": "Back"}}, "C": {"$Kind": "EntityContainer"}"#,
            "Navigation property 'T/N' names partner 'Back', which 'T' does not declare."
        ),
        (
            #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {}}, "C": {"$Kind": "EntityContainer", "Ts": {"$Collection": true, "$Type": "M.T", "$NavigationPropertyBinding": {"N": "Ts"}}}"#,
            "Entity set 'Ts' binds unknown navigation property 'N' of 'T'."
        ),
        (
            #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {"$Nullable": true}}, "C": {"$Kind": "EntityContainer"}"#,
            "Key property 'T/ID' is nullable. Keys must be \"$Nullable\": false."
        ),
        (
            #""T": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {}}, "C": {"$Kind": "EntityContainer", "Ts": {"$Collection": true, "$Type": "M.U"}}"#,
            "Entity set 'Ts' has unknown type 'M.U'. Declare that entity type."
        ),
    ])
    func invalidModelsAreRejectedWithAClearMessage(members: String, message: String) {
        #expect {
            try ServiceModel(csdlJSON: Self.document(members))
        } throws: { error in
            (error as? ODataError)?.message == message
        }
    }

    @Test func malformedJSONNamesItsPosition() {
        #expect {
            try ServiceModel(csdlJSON: "{\"M\": {\"T\": }")
        } throws: { error in
            let error = error as? ODataError
            return error?.code == .syntax && error?.position == 12
        }
    }
}
