import Foundation
import Testing

@testable import BatonOData

@Suite struct ODataURLTests {
    let model: ServiceModel

    init() throws { model = try ServiceModel.aircraftChecks }

    func parse(_ text: String) throws -> ODataURL { try ODataURL(parsing: text, model: model) }

    func failure(_ text: String) -> ODataError? {
        do {
            _ = try parse(text)
            return nil
        } catch { return error as? ODataError }
    }

    @Test func serviceLevelResources() throws {
        #expect(try parse("").path == .serviceDocument)
        #expect(try parse("/").path == .serviceDocument)
        #expect(try parse("$metadata").path == .metadata)
        #expect(try parse("$metadata?$format=json").query.format == "json")
        #expect(try parse("$batch").path == .batch)
    }

    /// The canonical URL's fast path (left unencoded) is decided by byte: it must agree with the character set
    /// the encoder uses on every ASCII byte, and send every other literal to the encoder.
    @Test func canonicalKeysAreLeftPlainExactlyWhenTheEncoderWould() {
        for byte in UInt8(0)...127 {
            let scalar = Unicode.Scalar(byte)
            #expect(ResourcePath.isPlainKeyByte(byte) == ResourcePath.keyLiteralAllowed.contains(scalar), "\(byte)")
        }
        for byte in UInt8(128)...255 { #expect(!ResourcePath.isPlainKeyByte(byte)) }
        #expect(
            ResourcePath.canonicalURL(entitySet: "Aircraft", key: [KeyValue(name: "ID", value: .string("D-AIBL"))])
                == "Aircraft('D-AIBL')")
        // A space, a slash and every non-ASCII byte are encoded; a quote beside a combining mark is doubled.
        let literal = "a b/c'\u{301}é"
        #expect(
            ResourcePath.canonicalURL(entitySet: "Aircraft", key: [KeyValue(name: "ID", value: .string(literal))])
                == "Aircraft('a%20b%2Fc''%CC%81%C3%A9')")
        #expect(
            ResourcePath.canonicalURL(entitySet: "Aircraft", key: [KeyValue(name: "ID", value: .string("a b"))])
                == "Aircraft('a%20b')")
    }

    /// System query option names fold by ASCII only: `$SKIP` is `$skip`, a Kelvin sign is not a `k`.
    @Test func optionNamesFoldByASCIIOnly() throws {
        #expect(try parse("PreflightChecks?$SKIP=2&$Top=1").query.skip == 2)
        #expect(failure("PreflightChecks?$s%E2%84%AAip=2")?.code == .unknownName)
    }

    @Test func keysQuotedStringsAndEscapedQuotes() throws {
        let url = try parse("Aircraft('D-''AIBL')")
        #expect(
            url.path
                == .resource([.entitySet("Aircraft"), .key([KeyValue(name: "TailNumber", value: .string("D-'AIBL"))])]))
        #expect(url.target?.isCollection == false)
        let encoded = try parse("Aircraft(%27D-AIBL%27)/Checks/$count")
        #expect(
            encoded.path
                == .resource([
                    .entitySet("Aircraft"), .key([KeyValue(name: "TailNumber", value: .string("D-AIBL"))]),
                    .navigation("Checks"),
                    .count,
                ]))
        #expect(encoded.target?.entitySet.name == "PreflightChecks")
    }

    /// A quote with a combining mark after it is one Swift `Character`: a literal doubles it and `$search` reads it
    /// all the same, by Unicode scalar, so the literal does not end there.
    @Test func quotesBesideCombiningMarksStayQuotes() throws {
        let model = try ServiceModel.aircraftChecks
        let name = "O'\u{301}Neil'\u{301}) or true or ('"
        let literal = PrimitiveValue.string(name).urlLiteral
        #expect(literal.unicodeScalars.filter { $0 == "'" }.count == 2 + 2 * 3)
        let url = try ODataURL(parsing: "Aircraft(" + ODataURL.queryValue(literal) + ")", model: model)
        guard case .resource(let segments) = url.path, case .key(let key) = segments.last else {
            Issue.record("no key in \(url.path)")
            return
        }
        #expect(key.first.map { $0.value.isIdentical(to: .string(name)) } == true)
        let search = try ODataURL(
            parsing: "PreflightChecks?$search=" + ODataURL.queryValue("'a''\u{301}b'"), model: model)
        #expect(search.query.search == .term("a'\u{301}b"))
    }

    @Test func guidKeysNamedKeysAndKeyAsSegment() throws {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e"
        let expected = PathSegment.key([KeyValue(name: "ID", value: .guid(try #require(UUID(uuidString: id))))])
        #expect(try parse("PreflightChecks(\(id))").path == .resource([.entitySet("PreflightChecks"), expected]))
        #expect(try parse("PreflightChecks(ID=\(id))").path == .resource([.entitySet("PreflightChecks"), expected]))
        #expect(
            try parse("PreflightChecks/\(id)/FuelKg/$value").path
                == .resource([
                    .entitySet("PreflightChecks"), expected, .property("FuelKg"), .value,
                ]))
    }

    /// GUIDs are decoded by hand (Foundation's parser was a sixth of a key read): every hex digit in either
    /// case gives Foundation's UUID, and the same text percent-encoded (the byte-by-byte path) gives the same.
    @Test func guidLiteralsDecodeAsFoundationDoes() throws {
        for _ in 0..<200 {
            let uuid = UUID()
            for text in [uuid.uuidString, uuid.uuidString.lowercased()] {
                let expected = PathSegment.key([KeyValue(name: "ID", value: .guid(uuid))])
                #expect(
                    try parse("PreflightChecks(\(text))").path == .resource([.entitySet("PreflightChecks"), expected]))
                let encoded = text.replacingOccurrences(of: "-", with: "%2D")
                #expect(
                    try parse("PreflightChecks(\(encoded))").path
                        == .resource([.entitySet("PreflightChecks"), expected]))
            }
        }
        #expect(failure("PreflightChecks(0f8fad5b-d9cb-469f-a165-70867728950g)")?.code == .syntax)
    }

    /// `Set(GUID)` is read by scalar without the expression parser (``ODataURL/guidKey(_:type:)``): for every text
    /// it takes, the parser — reached through the named form `(ID=…)`, which it never takes — gives the same key; what
    /// it refuses (other lengths and characters, escapes, a key of another type) is the parser's, with its errors.
    @Test func theGUIDKeysShortPathAgreesWithTheParser() throws {
        let check = try #require(model.entityType(named: "PreflightCheck"))
        let aircraft = try #require(model.entityType(named: "Aircraft"))
        var texts = ["0f8fad5b-d9cb-469f-a165-70867728950e", "0F8FAD5B-D9CB-469F-A165-70867728950E"]
        for _ in 0..<100 {
            var text = Array(UUID().uuidString.utf8)
            // One scalar changed, anywhere, to something a GUID may or may not hold.
            let position = Int.random(in: 0..<36)
            let replacement = Array("0aF-g+ .x(')%".utf8).randomElement() ?? UInt8(ascii: "0")
            text[position] = replacement
            texts.append(String(decoding: text, as: UTF8.self))
        }
        texts += [
            " f8fad5b-d9cb-469f-a165-70867728950e", "0f8fad5bd9cb-469f-a165-70867728950e-",
            "0f8fad5b-d9cb-469f-a165-70867728950",
            "0f8fad5b-d9cb-469f-a165-70867728950e0", "０f8fad5b-d9cb-469f-a165-70867728950e",
            "0f8fad5b-d9cb-469f-a165-70867728950\u{301}",
        ]
        for text in texts {
            // A `%` not followed by two hex digits stops the text before any key is read.
            guard let source = try? SourceText(raw: "(\(text))") else { continue }
            let short = ODataURL.guidKey(source, type: check)
            let named = try? ODataURL.parseKeyPredicate(SourceText(raw: "(ID=\(text))"), type: check, model: model)
            #expect(short.map { [$0] } == named, "\(text)")
            if let short {
                #expect(try ODataURL.parseKeyPredicate(source, type: check, model: model) == [short])
            }
            // Aircraft's key is a string: never the short path.
            #expect(ODataURL.guidKey(source, type: aircraft) == nil)
        }
        // An escaped parenthesis or digit is the parser's.
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e"
        #expect(ODataURL.guidKey(try SourceText(raw: "(\(id)%29"), type: check) == nil)
        #expect(ODataURL.guidKey(try SourceText(raw: "(%30\(id.dropFirst()))"), type: check) == nil)
    }

    /// `Set(GUID)` is read from its bytes without the path's parser (``ODataURL/entityByGUID(_:model:)``): for every
    /// path it takes, the parser gives the same path and target; what it refuses (escapes, other names and keys,
    /// anything after the key, a set whose key is not a GUID) is the parser's, with its errors. The paths are fixed,
    /// so a failure repeats.
    @Test func theGUIDPathsShortPathAgreesWithTheParser() throws {
        let id = "0f8fad5b-d9cb-469f-a165-70867728950e"
        var paths = [
            "PreflightChecks(\(id))", "PreflightChecks(\(id.uppercased()))", "CheckPhotos(\(id))",
            "PreflightChecks(\(id))/Aircraft", "PreflightChecks(\(id))/$value", "PreflightChecks(\(id)%29",
            "PreflightChecks(%30\(id.dropFirst()))", "Preflight%43hecks(\(id))", "Aircraft(\(id))",
            "Unknown(\(id))", "preflightchecks(\(id))", "PreflightChecks(ID=\(id))", "PreflightChecks(\(id)))",
            "PreflightChecks((\(id))", "PreflightChecks/\(id)", "$metadata(\(id))", "PreflightChecks(\(id)",
            "\u{212A}PreflightChecks(\(id))", "PreflightChecks\u{301}(\(id))", "PreflightChecks(\(id))\u{301}",
            "PreflightChecks(\(id.dropLast()))\u{301}", "(\(id))", "PreflightChecks('\(id.dropFirst(2))')",
        ]
        // Every byte of a GUID path changed, in turn, to each of bytes a path may or may not hold.
        let base = Array("PreflightChecks(\(id.uppercased()))".utf8)
        for position in base.indices {
            for replacement in "0aF-g+ .x(')%/$_".utf8 where base[position] != replacement {
                var text = base
                text[position] = replacement
                paths.append(String(decoding: text, as: UTF8.self))
            }
        }
        var taken = 0
        for path in paths {
            let general = Result { () throws(ODataError) in
                try ODataURL.parsePath(path[...], baseOffset: 0, model: model)
            }
            guard let short = ODataURL.entityByGUID(path[...], model: model) else { continue }
            taken += 1
            let parsed = try general.get()
            #expect(short.0 == parsed.0, "\(path)")
            #expect(short.1 == parsed.1, "\(path)")
        }
        #expect(taken >= 3)
    }

    /// A named key part is the model's key property byte for byte. Compared with `==`, a Kelvin sign (U+212A, which
    /// decomposes to `K`) named the key `K`, and the key kept the name as typed: the read's conditions, which look the
    /// name up byte for byte, then dropped it, and the read had no condition on that part.
    @Test func aNamedKeyPartIsTheKeyPropertyByteForByte() throws {
        let type = EntityType(
            name: "T", key: ["K", "L"],
            properties: [
                Property(name: "K", type: .int32, isNullable: false),
                Property(name: "L", type: .int32, isNullable: false),
            ])
        let model = try ServiceModel(
            namespace: "N", entityTypes: [type], entitySets: [EntitySet(name: "Ts", entityType: "N.T")])
        let expected = PathSegment.key([
            KeyValue(name: "K", value: .integer(1)), KeyValue(name: "L", value: .integer(2)),
        ])
        #expect(try ODataURL(parsing: "Ts(K=1,L=2)", model: model).path == .resource([.entitySet("Ts"), expected]))
        #expect(try ODataURL(parsing: "Ts(L=2,K=1)", model: model).path == .resource([.entitySet("Ts"), expected]))
        for url in ["Ts(\u{212A}=1,L=2)", "Ts(L=2,\u{212A}=1)", "Ts(K=1,L=2,\u{212A}=3)"] {
            #expect(throws: ODataError.self, "\(url)") { try ODataURL(parsing: url, model: model) }
        }
        let kelvin = try? ODataURL(parsing: "Ts(\u{212A}=1,L=2)", model: model)
        #expect(kelvin == nil)
    }

    /// An entity set is named by its bytes: a Kelvin sign is no `K`, and a set found is named in the path as the
    /// model names it.
    @Test func anEntitySetIsNamedByteForByte() throws {
        let type = EntityType(
            name: "T", key: ["ID"], properties: [Property(name: "ID", type: .int32, isNullable: false)])
        let model = try ServiceModel(
            namespace: "N", entityTypes: [type], entitySets: [EntitySet(name: "Ks", entityType: "N.T")])
        #expect(
            try ODataURL(parsing: "Ks(1)", model: model).path
                == .resource([.entitySet("Ks"), .key([KeyValue(name: "ID", value: .integer(1))])]))
        #expect(model.entitySet(named: "Ks")?.name == "Ks")
        #expect(model.entitySet(named: "\u{212A}s") == nil)
        for url in ["\u{212A}s", "\u{212A}s(1)", "%E2%84%AAs(1)"] {
            #expect(throws: ODataError.self, "\(url)") { try ODataURL(parsing: url, model: model) }
        }
    }

    /// Error positions count characters of the raw URL the same on the plain-ASCII fast path and on the
    /// percent-decoding path.
    @Test func errorPositionsAgreeWithAndWithoutEscapes() throws {
        let plain = failure("PreflightChecks?$top=1&$filter=FuelKg gt 1 and Nope eq 1")
        let escaped = failure("PreflightChecks?$top=1&$filter=FuelKg%20gt%201%20and%20Nope%20eq%201")
        #expect(plain?.code == .unknownName)
        #expect(escaped?.code == .unknownName)
        // Each %20 is three raw characters for one decoded space: four of them before 'Nope'.
        #expect(plain?.position == 47)
        #expect(escaped?.position == 55)
        #expect(failure("Aircraft('D-AIBL')/Nope")?.position == 19)
        #expect(failure("Aircraft('D-ÄIBL')/Nope")?.position == 19)
    }

    @Test func queryOptionNamesAreCaseInsensitiveAndDollarIsOptional() throws {
        let url = try parse(
            "PreflightChecks?FILTER=FuelKg GT 5&$TOP=3&skip=1&$Count=TRUE&orderBy=FuelKg DESC&select=FuelKg")
        #expect(url.query.top == 3)
        #expect(url.query.skip == 1)
        #expect(url.query.count)
        #expect(url.query.select == ["FuelKg"])
        #expect(url.query.orderBy.first?.descending == true)
        #expect(
            url.query.filter
                == .comparison(
                    .gt, .property(PropertyPath(property: "FuelKg", type: .decimal, isNullable: false)),
                    .literal(.integer(5))))
    }

    @Test func expandWithNestedOptions() throws {
        let url = try parse(
            "Aircraft?$expand=Checks($filter=FuelKg gt 1000;$orderby=FuelKg desc;$top=2;$select=FuelKg),Flights")
        #expect(url.query.expand.map(\.navigationProperty) == ["Checks", "Flights"])
        let checks = try #require(url.query.expand.first)
        #expect(checks.isCollection)
        #expect(checks.options.top == 2)
        #expect(checks.options.select == ["FuelKg"])
        #expect(checks.options.orderBy.count == 1)
        #expect(checks.options.filter != nil)
        #expect(try parse("Aircraft?$expand=*").query.expand.map(\.navigationProperty) == ["Flights", "Checks"])
    }

    @Test func searchTokensAndCustomOptions() throws {
        let url = try parse(
            "PreflightChecks?$search=tyre OR \"oil leak\" NOT brake&$skiptoken=abc&$deltatoken=42&sap-client=100")
        #expect(url.query.search == .or(.term("tyre"), .and(.term("oil leak"), .not(.term("brake")))))
        #expect(url.query.skipToken == "abc")
        #expect(url.query.deltaToken == "42")
        #expect(url.query.customOptions == [CustomOption(name: "sap-client", value: "100")])
    }

    @Test(arguments: [
        ("Aircrafts", "Unknown entity set 'Aircrafts'. Did you mean 'Aircraft'?", 0),
        (
            "PreflightChecks?$filter=FuelKgs gt 5",
            "Unknown property 'FuelKgs' on 'PreflightCheck'. Did you mean 'FuelKg'?", 24
        ),
        ("PreflightChecks?$fitler=FuelKg gt 5", "Unknown system query option '$fitler'. Did you mean '$filter'?", 16),
        ("PreflightChecks?$top=-1", "$top must be a non-negative integer, but is '-1'", 21),
        ("PreflightChecks?$top=1&$TOP=2", "System query option '$top' is given twice; give it once", 23),
        (
            "PreflightChecks?$select=Fuel",
            "Unknown property 'Fuel' in $select on 'PreflightCheck'. Did you mean 'FuelKg'?", 24
        ),
        (
            "Aircraft?$expand=Check",
            "Unknown navigation property 'Check' in $expand on 'Aircraft'. Did you mean 'Checks'?", 17
        ),
        ("Aircraft(42)", "Key 'TailNumber' is Edm.String, but the value given is Edm.Int32", 9),
        ("Aircraft('D-AIBL'", "Expected ')' to close the key but the expression ended", 17),
        (
            "PreflightChecks?$filter=FuelKg gt 5 and",
            "Expected an operator or the end of the expression but found 'and'", 36
        ),
        (
            "PreflightChecks?$filter=contains(Remarks)",
            "'contains' takes 2 argument(s), but 1 were given: contains(Edm.String, Edm.String)", 24
        ),
        ("PreflightChecks?$filter=%ZZ", "Malformed percent-encoding: '%' must be followed by two hex digits", 24),
        (
            "PreflightChecks?$filter=Aircraft/Flights/any(f:true)",
            "'Flights' is a collection; lambda operators (any/all), $count and key access on collections are not implemented in expressions",
            33
        ),
    ])
    func errorsSayWhatAndWhere(url: String, message: String, position: Int) {
        let error = failure(url)
        #expect(error?.message == message)
        #expect(error?.position == position)
    }

    /// A NUL, escaped or raw (a multipart `$batch` request line), is refused wherever it stands, at its own
    /// position: PostgreSQL cannot hold one in text, and SQLite would compare or store it.
    @Test func aNULAnywhereInAURLIsRefusedAtItsPosition() {
        for url in [
            "PreflightChecks?$filter=Remarks eq 'a%00b'", "PreflightChecks?$filter=Remarks in [\"a%00\"]",
            "PreflightChecks?$filter=Remarks in ('a', 'b%00')", "Aircraft('D-AI%00BL')",
            "PreflightChecks?$search=a%00b", "PreflightChecks?$filter=Remarks eq 'a\u{0}b'",
            "PreflightChecks?$filter=startswith(Remarks,'%00')",
        ] {
            let error = failure(url)
            #expect(error?.code == .syntax, "\(url)")
            #expect(error?.message.contains("NUL") == true, "\(url): \(String(describing: error))")
            let at = url.range(of: "%00") ?? url.range(of: "\u{0}")
            #expect(error?.position == at.map { url.unicodeScalars.distance(from: url.startIndex, to: $0.lowerBound) })
        }
        #expect(failure("PreflightChecks?$filter=Remarks eq 'a%01b'") == nil)
    }

    @Test func notImplementedConstructsSayNotImplemented() {
        for url in [
            "PreflightChecks?$apply=groupby((TailNumber))", "PreflightChecks?$filter=cast(FuelKg,Edm.Int32) gt 1",
            "Aircraft('D-AIBL')/Checks/$ref", "PreflightChecks?$filter=FuelKg eq @p&@p=1",
        ] {
            #expect(failure(url)?.code == .notImplemented, "\(url)")
        }
    }
}

/// Query strings as everyday HTTP libraries build them: form encoding writes a space as `+` (Python's `requests`
/// and `urlencode`, `curl --data-urlencode`, Java's `URLEncoder`, HTML forms), while OData's own literals use a
/// literal `+` (`1E+10`, `+01:00`).
@Suite struct FormEncodedQueryTests {
    let model: ServiceModel

    init() throws { model = try ServiceModel.aircraftChecks }

    func options(_ text: String) throws -> QueryOptions { try ODataURL(parsing: text, model: model).query }

    @Test(arguments: [
        // requests.get(url, params={"$filter": …}) and urllib.parse.urlencode: everything escaped, spaces as +.
        (
            "PreflightChecks?%24filter=FuelKg+gt+5000+and+Remarks+eq+%27a%2Bb%27",
            "PreflightChecks?$filter=FuelKg%20gt%205000%20and%20Remarks%20eq%20'a+b'"
        ),
        // curl -G --data-urlencode '$filter=…': the name as written, spaces as +.
        ("PreflightChecks?$filter=FuelKg+gt+5000", "PreflightChecks?$filter=FuelKg%20gt%205000"),
        (
            "PreflightChecks?$filter=ChangedAt+gt+2026-01-01T00%3A00%3A00%2B01%3A00&$top=2",
            "PreflightChecks?$filter=ChangedAt%20gt%202026-01-01T00:00:00+01:00&$top=2"
        ),
        ("PreflightChecks?%24search=fuel+tyre", "PreflightChecks?$search=fuel%20tyre"),
        ("PreflightChecks?%24orderby=FuelKg+desc%2CID", "PreflightChecks?$orderby=FuelKg%20desc,ID"),
        ("Aircraft?%24expand=Checks(%24filter%3DFuelKg+gt+5)", "Aircraft?$expand=Checks($filter=FuelKg%20gt%205)"),
        (
            "Aircraft?%24expand=Checks%28%24filter%3DFuelKg+gt+5000%3B%24select%3DID%29&%24top=2",
            "Aircraft?$expand=Checks($filter=FuelKg%20gt%205000;$select=ID)&$top=2"
        ),
    ])
    func formEncodedQueriesMeanWhatTheirClientMeant(form: String, strict: String) throws {
        let fromForm = try options(form)
        let fromStrict = try options(strict)
        #expect(fromForm == fromStrict)
    }

    @Test func literalPlusSignsStayWhereOnlyTheStrictReadingWorks() throws {
        // Spaces written as %20: a + is OData's own.
        let offset = try options("PreflightChecks?$filter=ChangedAt%20gt%202026-01-01T00:00:00+01:00")
        let encoded = try options("PreflightChecks?$filter=ChangedAt%20gt%202026-01-01T00:00:00%2B01:00")
        #expect(offset == encoded)
        let exponent = try options("PreflightChecks?$filter=FuelKg%20gt%201E+3")
        let exponentEncoded = try options("PreflightChecks?$filter=FuelKg%20gt%201E%2B3")
        #expect(exponent == exponentEncoded)
        let plus = try options("PreflightChecks?$filter=Remarks%20eq%20'a+b'")
        let space = try options("PreflightChecks?$filter=Remarks%20eq%20'a%20b'")
        #expect(plus != space)
    }

    @Test func errorsPointIntoTheValueAsTheClientWroteIt() throws {
        // "$filter=FuelKg+gt+" is 19 characters after "PreflightChecks?" (16): the position of "5000x".
        let text = "PreflightChecks?$filter=FuelKg+gt+5000x"
        var caught: ODataError?
        do { _ = try options(text) } catch { caught = error as? ODataError }
        let error = try #require(caught)
        let position = try #require(error.position)
        #expect(position >= 34 && position <= 38, "\(error.message) at \(position)")
        #expect(!error.message.contains("'+'"), "\(error.message)")
    }
}
