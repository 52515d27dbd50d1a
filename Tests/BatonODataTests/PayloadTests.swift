import BatonOData
import Foundation
import Testing

@Suite struct PayloadTests {
    let checks: EntityType

    init() throws {
        checks = try #require(try ServiceModel.aircraftChecks.entityType(named: "PreflightCheck"))
    }

    static let valid = """
        {"@odata.type":"#Baton.PreflightCheck","ID":"0f8fad5b-d9cb-469f-a165-70867728950e","TailNumber":"D-AIBL",
        "FuelKg":5200.5,"TyrePressureMainPsi":200.5,"TyrePressureNosePsi":58,"OilQuarts":12.25,"Remarks":null,
        "Status":"final","CheckedBy":"mallory"}
        """

    func decode(_ body: String, mode: EntityPayload.Mode = .create) throws -> EntityPayload {
        try EntityPayload(decoding: Array(body.utf8), as: checks, mode: mode)
    }

    func failure(_ body: String, mode: EntityPayload.Mode = .create) -> ODataError? {
        do {
            _ = try decode(body, mode: mode)
            return nil
        } catch { return error as? ODataError }
    }

    @Test func aGUIDIsReadByByteAsEightFourFourFourTwelveHexDigitsAndNothingElse() throws {
        for _ in 0..<64 {
            let uuid = UUID()
            #expect(UUID(canonicalText: uuid.uuidString) == uuid)
            #expect(UUID(canonicalText: uuid.uuidString.lowercased()) == uuid)
        }
        let good = "0f8fad5b-d9cb-469f-a165-70867728950e"
        #expect(UUID(canonicalText: good)?.uuidString == good.uppercased())
        for bad in [
            "+f8fad5b-d9cb-469f-a165-70867728950e", " f8fad5b-d9cb-469f-a165-70867728950e",
            "0x8fad5b-d9cb-469f-a165-70867728950e", "0f8fad5bd-9cb-469f-a165-70867728950e",
            "0f8fad5b-d9cb-469f-a165-70867728950", "0f8fad5b-d9cb-469f-a165-70867728950e0",
            "0f8fad5b-d9cb-469f-a165-7086772895 e", "0f8fad5b-d9cb-469f-a165-70867728950g",
            // A non-ASCII digit, and a combining mark that leaves 36 characters.
            "0f8fad5b-d9cb-469f-a165-70867728950\u{FF10}", "0f8fad5b-d9cb-469f-a165-7086772895\u{301}0e",
            "0f8fad5b_d9cb_469f_a165_70867728950e", "",
        ] {
            #expect(UUID(canonicalText: bad) == nil, "\(bad.debugDescription)")
        }
        // In a payload, the same GUIDs are refused with a clear error.
        for bad in ["0f8fad5b-d9cb-469f-a165-7086772895\u{301}0e", "+f8fad5b-d9cb-469f-a165-70867728950e"] {
            let body = Self.valid.replacingOccurrences(of: good, with: bad)
            #expect(throws: ODataError.self) { try decode(body) }
        }
    }

    /// A JSON string's bytes are valid UTF-8 or the body is refused with the string's position, whether or not
    /// the string has escapes, and ASCII and valid UTF-8 read back as sent. (ASCII is made a `String` without the
    /// generic validation: the byte a string's high bits are judged by must be every byte of it.)
    @Test func aJSONStringThatIsNotUTF8IsRefusedAtItsPlace() throws {
        func parse(_ bytes: [UInt8]) throws -> JSONValue { try JSONValue(parsing: bytes) }
        let open = Array(#"{"k":""#.utf8)
        let close = Array(#""}"#.utf8)
        #expect(try parse(open + Array("plain ASCII".utf8) + close) == .object([("k", .string("plain ASCII"))]))
        #expect(try parse(open + Array("é ✈ 𝄞".utf8) + close) == .object([("k", .string("é ✈ 𝄞"))]))
        #expect(try parse(open + Array(#"a\"b é"#.utf8) + close) == .object([("k", .string("a\"b é"))]))
        let invalid: [[UInt8]] = [
            [0xFF], [0x41, 0x42, 0x80], [0xC3], [0xC3, 0x28], [0xE2, 0x82], [0xED, 0xA0, 0x80], [0xC0, 0xAF],
            [0x41] + Array(repeating: 0x41, count: 40) + [0xF8, 0x41],
        ]
        for bytes in invalid {
            for escaped in [false, true] {
                let content = escaped ? Array(#"\n"#.utf8) + bytes : bytes
                let error = #expect(throws: ODataError.self, "\(bytes) escaped: \(escaped)") {
                    try parse(open + content + close)
                }
                #expect(error?.message.contains("not valid UTF-8") == true, "\(error?.message ?? "")")
                // Where the unescaped run holding the bytes starts.
                #expect(error?.position == open.count + (escaped ? 2 : 0))
            }
        }
    }

    @Test func validBodyDecodesAndComputedPropertiesAreIgnored() throws {
        let payload = try decode(Self.valid)
        #expect(payload.values["FuelKg"] == .decimal(Decimal(string: "5200.5") ?? 0))
        #expect(payload.values["Remarks"] == .null)
        #expect(payload.values["CheckedBy"] == nil)
        #expect(payload.ignoredComputed == ["CheckedBy"])
    }

    @Test func decimalsRoundTripExactlyNeverThroughDouble() throws {
        let property = Property(name: "Big", type: .decimal)
        // 0.1 + 0.2 style values and 20+ digit numbers that Double cannot hold.
        for text in [
            "0.1", "12345678901234567890.12345678", "-0.000000000000000001", "99999999999999999999999999999999999999",
        ] {
            let value = try PrimitiveValue(json: .number(text), for: property)
            #expect(value.json(as: .decimal) == .number(text), "\(text)")
        }
        let parsed = try JSONValue(parsing: #"{"v":12345678901234567890.12345678}"#)
        #expect(parsed.serialized == #"{"v":12345678901234567890.12345678}"#)
    }

    /// An `Edm.Single` beyond a 32-bit float's range (too large, or so small it would be stored as 0) is a
    /// payload error: PostgreSQL's `real` refused it as an overflow or underflow, which answered 500, and SQLite
    /// stored a value no client can read back as a Single.
    @Test func singlesBeyondTheirRangeAreRefused() throws {
        let single = Property(name: "Ratio", type: .single)
        for text in ["1e39", "-3.5e38", "1e400", "1e-50"] {
            let error = #expect(throws: ODataError.self, "\(text)") {
                try PrimitiveValue(json: .number(text), for: single)
            }
            #expect(error?.message.contains("Edm.Single") == true, "\(error?.message ?? "")")
        }
        #expect(try PrimitiveValue(json: .number("3.4e38"), for: single) == .double(3.4e38))
        #expect(try PrimitiveValue(json: .number("1e-40"), for: single) == .double(1e-40))
        #expect(try PrimitiveValue(json: .number("0.0"), for: single) == .double(0))
        #expect(try PrimitiveValue(json: .string("INF"), for: single) == .double(.infinity))
        // A key or filter literal converts to a Single only within the same range.
        #expect(PrimitiveValue.double(1e39).converted(to: .single) == nil)
        #expect(PrimitiveValue.integer(1).converted(to: .single) == .double(1))
        #expect(PrimitiveValue.decimal(Decimal(string: "1e-50")!).converted(to: .single) == nil)
        // A Double's range is a Double's; a numeral beyond it is not infinity.
        let double = Property(name: "R", type: .double)
        #expect(try PrimitiveValue(json: .number("1e39"), for: double) == .double(1e39))
        #expect(throws: ODataError.self) { try PrimitiveValue(json: .number("1e400"), for: double) }
    }

    @Test func decimalsBeyondFoundationPrecisionAreRefusedNotRounded() {
        let property = Property(name: "Big", type: .decimal)
        #expect(throws: ODataError.self) {
            try PrimitiveValue(json: .number("1234567890123456789012345678901234567890.5"), for: property)
        }
    }

    @Test(arguments: [
        (
            #""FuelKg":"lots""#,
            "Property 'FuelKg' expects a decimal number written without an exponent, but the payload has a string"
        ),
        (#""TailNumber":42"#, "Property 'TailNumber' expects a string, but the payload has a number"),
        (
            #""TailNumber":"D-AIBL-TOO-LONG""#,
            "Property 'TailNumber' allows at most 10 characters, but the value has 15"
        ),
        (#""FuelKg":5200.55"#, "Property 'FuelKg' allows 1 digit(s) after the decimal point, but the value has 2"),
        (#""FuelKg":123456789"#, "Property 'FuelKg' allows 8 digit(s) before the decimal point (Precision 9, Scale 1)"),
        (#""Status":null"#, "Property 'Status' is not nullable; give it a value"),
        (
            #""ID":"not-a-guid""#,
            "Property 'ID' expects a GUID string like \"01234567-89ab-cdef-0123-456789abcdef\", but the payload has a string"
        ),
        (#""FuelKgs":1"#, "'PreflightCheck' has no property 'FuelKgs'. Did you mean 'FuelKg'?"),
    ])
    func badValuesNameThePropertyAndNeverEchoTheValue(member: String, message: String) throws {
        // A valid body with one member replaced by the bad one.
        let replacement = try JSONValue(parsing: "{\(member)}").objectMembers ?? []
        var members = try JSONValue(parsing: Self.valid).objectMembers ?? []
        members.removeAll { member in replacement.contains { $0.0 == member.0 } }
        members += replacement
        let error = failure(JSONValue.object(members).serialized)
        #expect(error?.message == message)
        #expect(error?.target == replacement.first?.0)
    }

    @Test func createRequiresEveryNonNullablePropertyMergeDoesNot() throws {
        #expect(failure(#"{"TailNumber":"D-AIBL"}"#)?.message == "Property 'ID' is required; add it to the body")
        #expect(try decode(#"{"Remarks":"ok"}"#, mode: .merge).values == ["Remarks": .string("ok")])
    }

    @Test func bindingANavigationPropertySetsItsForeignKey() throws {
        let model = try ServiceModel.aircraftChecks
        let body =
            #"{"ID":"0f8fad5b-d9cb-469f-a165-70867728950e","Aircraft@odata.bind":"http://host/odata/Aircraft('D-AIBL')","FuelKg":1,"TyrePressureMainPsi":1,"TyrePressureNosePsi":1,"OilQuarts":1,"Status":"x"}"#
        let payload = try EntityPayload(decoding: Array(body.utf8), as: checks, mode: .create, model: model)
        #expect(payload.values["TailNumber"] == .string("D-AIBL"))
        let contradiction = body.replacingOccurrences(
            of: #""Status":"x""#, with: #""Status":"x","TailNumber":"D-OTHER""#)
        #expect {
            try EntityPayload(decoding: Array(contradiction.utf8), as: checks, mode: .create, model: model)
        } throws: {
            ($0 as? ODataError)?.message
                == "Property 'TailNumber' contradicts the navigation property bound in the same body"
        }
        let wrongSet = body.replacingOccurrences(of: "Aircraft('D-AIBL')", with: "Flights('LH400')")
        #expect(throws: ODataError.self) {
            try EntityPayload(decoding: Array(wrongSet.utf8), as: checks, mode: .create, model: model)
        }
    }

    @Test func malformedJSONIsASyntaxErrorWithPosition() {
        let error = failure(#"{"TailNumber": "D-AIBL",}"#)
        #expect(error?.code == .syntax)
        #expect(error?.position == 24)
        #expect(failure(#"{"Status":"a","Status":"b"}"#)?.message == "Duplicate JSON member 'Status'")
        #expect(failure("[1,2]")?.message == "An entity body must be a JSON object, but this one is an array")
    }

    @Test func entityAndCollectionPayloadsCarryMinimalMetadata() throws {
        let payload = try decode(Self.valid)
        let entity = payload.json(as: checks, select: ["TailNumber", "FuelKg"], etag: ETag("v1"))
        #expect(entity.serialized == #"{"@odata.etag":"W/\"v1\"","TailNumber":"D-AIBL","FuelKg":5200.5}"#)
        let collection = ODataPayload.collection(
            context: "$metadata#PreflightChecks", entities: [entity], count: 7, nextLink: "PreflightChecks?$skiptoken=2"
        )
        #expect(collection["@odata.count"] == .number("7"))
        #expect(collection["@odata.nextLink"]?.stringValue == "PreflightChecks?$skiptoken=2")
        #expect(collection.objectMembers?.map(\.0) == ["@odata.context", "@odata.count", "value", "@odata.nextLink"])
    }

    @Test func deltaRemovedEntriesInBothShapes() {
        let v401 = ODataPayload.removed(
            id: "PreflightChecks(1)", format: .v401, contextBase: "$metadata", entitySet: "PreflightChecks")
        #expect(v401.serialized == #"{"@removed":{"reason":"deleted"},"@id":"PreflightChecks(1)"}"#)
        let v40 = ODataPayload.removed(
            id: "PreflightChecks(1)", format: .v40, contextBase: "$metadata", entitySet: "PreflightChecks")
        #expect(v40["@odata.context"]?.stringValue == "$metadata#PreflightChecks/$deletedEntity")
        #expect(v40["reason"]?.stringValue == "deleted")
    }

    @Test func errorBodiesRoundTrip() throws {
        let error = ODataError(.unknownName, "Unknown property 'X'", target: "X")
        let body = ODataPayload.error(error, details: [ODataError(.syntax, "detail")])
        let decoded = try ODataPayload.decodeError(try JSONValue(parsing: body.serialized))
        #expect(decoded.code == "UnknownName")
        #expect(decoded.message == "Unknown property 'X'")
        #expect(decoded.target == "X")
        #expect(body["error"]?["details"]?.arrayValue?.count == 1)
    }

    @Test func jsonNestingIsBounded() {
        let deep = String(repeating: "[", count: 10_000) + String(repeating: "]", count: 10_000)
        #expect { try JSONValue(parsing: deep) } throws: { ($0 as? ODataError)?.code == .limitExceeded }
    }

    @Test func jsonStringsEscapeAndUnescape() throws {
        let text = #"{"s":"quote \" backslash \\ tab \t nl \n \u00e9 \ud83d\ude00 \u0001"}"#
        let value = try JSONValue(parsing: text)
        #expect(value["s"]?.stringValue == "quote \" backslash \\ tab \t nl \n é 😀 \u{01}")
        #expect(try JSONValue(parsing: value.serialized) == value)
    }

    /// Strings are escaped by byte into the serializer's bytes: the escapes are exact, a combining mark after a
    /// quote does not hide it, and every scalar reads back (through Baton's parser and Foundation's) as itself.
    @Test func jsonStringsAreEscapedByteForByte() throws {
        let text = "a\"\u{301}\\\n\r\t\u{1}\u{1F}\u{7F}é😀"
        #expect(JSONValue.string(text).serialized == #""a\"\#u{301}\\\n\r\t\u0001\u001f\#u{7F}é😀""#)
        var scalars = (UInt8(0)..<0x80).map(Unicode.Scalar.init)
        scalars += ["\u{300}", "\u{2028}", "\u{10FFFF}", "K", "\u{212A}"]
        for scalar in scalars {
            let string = "x" + String(scalar) + "\"" + String(scalar)
            let value = JSONValue.object([(string, .string(string))])
            // No control byte goes out raw: each is escaped.
            #expect(!value.serializedBytes.contains { $0 < 0x20 }, "U+\(String(scalar.value, radix: 16))")
            // Baton's parser refuses NUL in a string (PostgreSQL cannot store it); Foundation's reads it below.
            if scalar != "\u{0}" {
                #expect(try JSONValue(parsing: value.serialized) == value, "U+\(String(scalar.value, radix: 16))")
            }
            let parsed = try JSONSerialization.jsonObject(with: Data(value.serializedBytes)) as? [String: String]
            let pair = try #require(parsed?.first, "U+\(String(scalar.value, radix: 16))")
            #expect(
                pair.key.unicodeScalars.elementsEqual(string.unicodeScalars), "U+\(String(scalar.value, radix: 16))")
            #expect(
                pair.value.unicodeScalars.elementsEqual(string.unicodeScalars), "U+\(String(scalar.value, radix: 16))")
        }
    }
}

/// Decimal literals are plain numerals (never exponent notation), whatever the value's shape.
@Suite struct DecimalTextTests {
    @Test func decimalLiteralsArePlainNumerals() throws {
        let cases = [
            ("0", "0"), ("15.10", "15.1"), ("-0.5", "-0.5"), ("100", "100"), ("1e3", "1000"), ("0.000001", "0.000001"),
            ("123456789012345678", "123456789012345678"), ("-99.990", "-99.99"),
        ]
        for (text, expected) in cases {
            let value = try #require(Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")))
            #expect(PrimitiveValue.decimal(value).urlLiteral == expected, "\(text)")
        }
        let parts = Decimal(sign: .minus, exponent: 30, significand: Decimal(15))
        #expect(!PrimitiveValue.decimal(parts).urlLiteral.contains("e"))
    }
}

/// Temporal literals are read scalar by scalar: their forms are ASCII, so a combining mark anywhere is refused (it
/// is a scalar of its own), and fractions of up to 12 digits keep every digit.
@Suite struct TemporalTextTests {
    @Test func dateTimesWithAFractionKeepEveryDigit() throws {
        let value = try #require(ODataDateTimeOffset(parsing: "2026-11-21T08:30:05.123456789012+01:30"))
        #expect(value.time.picoseconds == 123_456_789_012)
        #expect(value.offsetMinutes == 90)
        #expect(
            try #require(ODataDateTimeOffset(parsing: "2026-11-21T08:30:05.5Z")).time.picoseconds == 500_000_000_000)
        #expect(try #require(ODataDate(parsing: "12026-01-31")).year == 12_026)
    }

    /// The stored form of a date-time, written into bytes for years 0000–9999, is the interpolated text it was
    /// before, for every field at its edges and random values, whatever the offset; other years keep the old text.
    @Test func theSortableUTCTextIsTheFixedWidthForm() throws {
        func interpolated(_ value: ODataDateTimeOffset) -> String {
            func two(_ number: Int) -> String { number < 10 ? "0\(number)" : String(number) }
            let fraction = String(value.time.picoseconds)
            return "\(value.date)T\(two(value.time.hour)):\(two(value.time.minute)):\(two(value.time.second))."
                + String(repeating: "0", count: 12 - fraction.count) + fraction + "Z"
        }
        var generator = SystemRandomNumberGenerator()
        var values: [ODataDateTimeOffset] = []
        for year in [0, 1, 9, 10, 999, 1000, 1970, 2026, 9999] {
            let date = try #require(ODataDate(year: year, month: 1, day: 1))
            for (hour, minute, second, picoseconds) in [
                (0, 0, 0, Int64(0)), (23, 59, 59, 999_999_999_999), (8, 5, 3, 1),
            ] {
                let time = try #require(
                    ODataTimeOfDay(hour: hour, minute: minute, second: second, picoseconds: picoseconds))
                values.append(try #require(ODataDateTimeOffset(date: date, time: time)))
            }
        }
        for _ in 0..<2_000 {
            let date = try #require(
                ODataDate(
                    year: Int.random(in: 0...9999, using: &generator), month: Int.random(in: 1...12, using: &generator),
                    day: Int.random(in: 1...28, using: &generator)))
            let time = try #require(
                ODataTimeOfDay(
                    hour: Int.random(in: 0...23, using: &generator), minute: Int.random(in: 0...59, using: &generator),
                    second: Int.random(in: 0...59, using: &generator),
                    picoseconds: Int64.random(in: 0..<1_000_000_000_000, using: &generator)))
            values.append(
                try #require(
                    ODataDateTimeOffset(
                        date: date, time: time, offsetMinutes: Int.random(in: -840...840, using: &generator))))
        }
        for value in values {
            #expect(value.sortableUTCText == interpolated(value.utc), "\(value)")
            #expect(value.sortableUTCText.utf8.count == 33 || !(0...9999).contains(value.utc.date.year), "\(value)")
        }
        let early = try #require(ODataDateTimeOffset(parsing: "0000-01-01T00:30:00+01:00"))
        #expect(early.sortableUTCText == interpolated(early.utc))
        #expect(early.sortableUTCText.hasPrefix("-0001-12-31T23:30:00."))
    }

    /// A GUID's literal is the lower-case hyphenated form Foundation writes.
    @Test func aGUIDsLiteralIsFoundationsTextLowerCased() {
        for _ in 0..<1_000 {
            let id = UUID()
            #expect(PrimitiveValue.guid(id).urlLiteral == id.uuidString.lowercased())
        }
        let edges = [
            UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
            UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)),
        ]
        for id in edges { #expect(PrimitiveValue.guid(id).urlLiteral == id.uuidString.lowercased()) }
    }

    @Test func combiningMarksAndMalformedFormsAreRefused() {
        for text in [
            "2026-11-21T08:30:00Z\u{301}", "2026-11-21T08:30:00\u{301}Z", "2026-11-2\u{301}1T08:30:00Z",
            "2026-11-21T08:30:00.1234567890123Z", "02026-11-21T08:30:00Z", "2026-11-21T08:30:00",
            "٢٠٢٦-11-21T08:30:00Z",
            "2026-11-21T08:30:00.Z",
        ] {
            #expect(
                ODataDateTimeOffset(parsing: text) == nil, "\(text.unicodeScalars.map { $0.escaped(asASCII: true) })")
        }
        #expect(ODataDate(parsing: "2026-11-21\u{301}") == nil)
        #expect(ODataTimeOfDay(parsing: "08:30:00\u{301}") == nil)
        #expect(ODataDuration(parsing: "PT1H\u{301}") == nil)
    }
}
