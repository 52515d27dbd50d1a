import BatonOData
import Foundation
import Testing

@Suite struct HeaderTests {
    /// Header names compare as RFC 9110 tokens: ASCII letters without case, every other byte exactly. A Unicode
    /// lower-casing would take a Kelvin sign for a `k`.
    @Test func headerNamesCompareAsASCIITokens() {
        #expect(HeaderScanner.sameName("Content-Type", "content-TYPE"))
        #expect(HeaderScanner.sameName("If-Match", "IF-MATCH"))
        #expect("\u{212A}ey".lowercased() == "key")
        #expect(!HeaderScanner.sameName("\u{212A}ey", "key"))
        #expect(!HeaderScanner.sameName("If-Match", "If-Match "))
        #expect(!HeaderScanner.sameName("If-Matc", "If-Match"))
        #expect(HeaderScanner.sameName("Ünïcode", "Ünïcode"))
        #expect(!HeaderScanner.sameName("ünïcode", "Ünïcode"))
        let request = BatchRequest(id: "1", method: "PATCH", url: "X", headers: [("IF-MATCH", "*"), ("\u{212A}", "v")])
        #expect(request.header("If-Match") == "*")
        #expect(request.header("k") == nil)
    }

    /// A `Content-Type`'s media type is read by byte, ASCII letters folded: a Kelvin sign, a combining mark glued to
    /// the subtype or a longer subtype is another type, not JSON.
    @Test func mediaTypesAreReadByByte() {
        #expect(HeaderScanner.mediaType(of: "application/json") == "application/json")
        #expect(HeaderScanner.mediaType(of: " APPLICATION/Json ; charset=utf-8") == "application/json")
        #expect(HeaderScanner.mediaType(of: "application/json;odata.metadata=minimal") == "application/json")
        #expect(HeaderScanner.mediaType(of: "text/plain") == "text/plain")
        #expect("application/json\u{301}".lowercased().hasPrefix("application/json") == false)
        #expect("application/jsonx".lowercased().hasPrefix("application/json"))
        for other in [
            "application/jsonx", "application/json-seq", "application/json\u{301}", "applicati\u{2C9}n/json",
            "\u{212A}ey/json",
        ] {
            #expect(HeaderScanner.mediaType(of: other) != "application/json", "\(Array(other.utf8))")
        }
        for malformed: String? in [nil, "", "application", "application/", "/json", "application/json\u{301}", "a b/c"]
        {
            #expect(HeaderScanner.mediaType(of: malformed) == nil, "\(Array((malformed ?? "").utf8))")
        }
    }

    /// An `Accept` value weighs a media type by the `q` of its most specific matching range (RFC 9110 §12.5.1), read by
    /// byte: names folded only in ASCII, a malformed list `nil`.
    @Test func acceptWeighsAMediaTypeByItsMostSpecificRange() throws {
        let json = "application/json"
        let cases: [(String, Int)] = [
            ("application/json", 1000), ("application/xml", 0), ("", 0), (" , application/json ,", 1000),
            ("*/*;q=0.2, application/*;q=0.5", 500), ("application/*;q=0.5, */*;q=0.2", 500),
            // The most specific range decides, wherever it stands and whatever the others weigh.
            ("application/json;q=0, */*", 0), ("*/*, application/json;q=0.001", 1),
            ("Application/JSON;odata.metadata=minimal;Q=0.75", 750), ("text/*, application/json;q=1.000", 1000),
            (#"application/json;charset="utf-8";q=0.3"#, 300), ("application/json ; q=0.25 , text/plain", 250),
            ("application/jsonx, application/json-seq, text/json", 0), ("application/json,application/xml;q=0.1", 1000),
            // `*` stands for a whole subtype or type only.
            ("application/js*, application/json*, applic*/*", 0), ("*/json", 0),
        ]
        for (accept, weight) in cases {
            #expect(HeaderScanner.acceptWeight(accept, for: json) == weight, "\(accept)")
        }
        // The premise, Swift's own: Unicode's lower-casing folds a Kelvin sign to `k`.
        try #require("text/\u{212A}".lowercased() == "text/k")
        for malformed in [
            "application/json;q=2", "application/json;q=1.5", "application/json;q=0.0001", "application/json;q=",
            "application/json;q", "application/json;q=.5", "application/json;", "json", "application/json\u{301}",
            "application/json, x", "application/json\r\nX-Injected: 1", "text/\u{212A}", "application/json;q=0.5x",
        ] {
            #expect(HeaderScanner.acceptWeight(malformed, for: json) == nil, "\(Array(malformed.utf8))")
        }
    }

    @Test func etagsParseAndFormat() throws {
        #expect(try ETag(parsing: "W/\"abc\"") == ETag("abc", isWeak: true))
        #expect(try ETag(parsing: " \"abc\" ") == ETag("abc", isWeak: false))
        #expect(ETag("v1").headerValue == "W/\"v1\"")
        #expect { try ETag(parsing: "abc") } throws: {
            ($0 as? ODataError)?.message == "Malformed entity tag 'abc'; expected \"…\" or W/\"…\""
        }
    }

    @Test func ifMatchListsAndStar() throws {
        let condition = try ETagCondition(parsing: "\"a\", W/\"b\"")
        #expect(condition == .tags([ETag("a", isWeak: false), ETag("b")]))
        #expect(condition.matches(ETag("b", isWeak: false)))
        #expect(!condition.matches(ETag("c")))
        #expect(!condition.matches(nil))
        #expect(try ETagCondition(parsing: "*").matches(ETag("anything")))
        #expect(throws: ODataError.self) { try ETagCondition(parsing: "\"a\" \"b\"") }
    }

    /// A malformed header value, a batch part's content type or a key property's name is named in its error by its
    /// first scalars. Fails before: the whole value came back, a letter and 10,000 combining marks included.
    @Test func aMalformedHeaderValueIsNamedByItsFirstScalars() throws {
        let marked = "x" + String(repeating: "\u{301}", count: 10_000)
        let model = try ServiceModel.aircraftChecks
        let part = Array(
            "--b\r\nContent-Type: \(marked)\r\n\r\nGET Aircraft HTTP/1.1\r\n\r\n\r\n--b--\r\n".utf8)
        let attempts: [(String, () throws -> Void)] = [
            ("If-Match", { _ = try ETagCondition(parsing: marked) }),
            ("If-Match list", { _ = try ETagCondition(parsing: "\"a\" " + String(repeating: "b", count: 10_000)) }),
            ("ETag", { _ = try ETag(parsing: marked) }),
            ("ETag tail", { _ = try ETag(parsing: "\"a\"" + marked) }),
            ("OData-Version", { _ = try ODataVersion(parsing: marked) }),
            ("OData-Version 3", { _ = try ODataVersion(parsing: "3." + String(repeating: "0", count: 10_000)) }),
            ("part's Content-Type", { _ = try MultipartBatch.decodeRequests(part, boundary: "b") }),
            ("batch Content-Type", { _ = try MultipartBatch.boundary(fromContentType: "multipart/mixed; " + marked) }),
            ("key name", { _ = try ODataURL(parsing: "PreflightChecks(\(marked)=1)", model: model) }),
        ]
        for (name, attempt) in attempts {
            let error = #expect(throws: ODataError.self, "\(name)") { try attempt() }
            let message = error?.message ?? ""
            #expect(!message.isEmpty, "\(name)")
            #expect(message.unicodeScalars.count < 300, "\(name): \(message.unicodeScalars.count) scalars")
            #expect((error?.target?.unicodeScalars.count ?? 0) <= ODataError.maximumTargetScalars + 1, "\(name)")
        }
    }

    /// Whatever a site quotes, an error keeps at most the first 1,024 scalars of its message and 128 of its target,
    /// each followed by `…`; shorter ones stay as they are, to the scalar.
    @Test func anErrorIsBoundedAtItsCreation() {
        let marks = String(repeating: "\u{301}", count: 10_000)
        let long = ODataError(.syntax, "Unknown name 'x\(marks)'", target: "x" + marks)
        #expect(long.message.unicodeScalars.count == ODataError.maximumMessageScalars + 1)
        #expect(long.message.unicodeScalars.starts(with: "Unknown name 'x".unicodeScalars))
        #expect(long.message.unicodeScalars.last == "…")
        #expect(long.target?.unicodeScalars.count == ODataError.maximumTargetScalars + 1)
        let exact = String(repeating: "a", count: ODataError.maximumTargetScalars)
        let short = ODataError(.syntax, "Unknown name 'e\u{301}'", target: exact)
        #expect(short.message.unicodeScalars.elementsEqual("Unknown name 'e\u{301}'".unicodeScalars))
        #expect(short.target == exact)
    }

    /// A preference's value is quoted and escaped by Unicode scalar. Fails before: a `"` followed by a combining mark
    /// is one `Character`, which the search for `"` did not find, so the value ended the quoted string early.
    @Test func aPreferenceValueIsEscapedByScalar() {
        #expect(Preference(name: "x", value: "a\"\u{301}b").description == "x=\"a\\\"\u{301}b\"")
        #expect(Preference(name: "x", value: "a\\\u{301}").description == "x=\"a\\\\\u{301}\"")
        #expect(Preference(name: "x", value: "plain").description == "x=plain")
        #expect(Preference(name: "x", value: "two words").description == "x=\"two words\"")
        #expect(Preference(name: "x", value: "").description == "x=\"\"")
    }

    @Test func preferencesParse() throws {
        let preferences = try Preferences(parsing: [
            "odata.maxpagesize=50, odata.track-changes", "return=minimal, odata.include-annotations=\"*\"",
            "odata.maxpagesize=10",
        ])
        #expect(preferences.maxPageSize == 50)
        #expect(preferences.trackChanges)
        // Preference names fold by ASCII only: a Kelvin sign is not a `k` (and is no token: the header is refused).
        #expect(throws: ODataError.self) { try Preferences(parsing: ["odata.trac\u{212A}-changes"]) }
        #expect(Preference(name: "odata.trac\u{212A}-changes").name != "odata.track-changes")
        #expect(Preference(name: "ODATA.Track-Changes").name == "odata.track-changes")
        #expect(try Preferences(parsing: ["RETURN=Minimal"]).returnPreference == "minimal")
        #expect(preferences.returnPreference == "minimal")
        #expect(preferences["odata.include-annotations"]?.value == "*")
        #expect(
            Preferences.applied([
                Preference(name: "odata.maxpagesize", value: "50"), Preference(name: "odata.track-changes"),
            ])
                == "odata.maxpagesize=50, odata.track-changes")
        #expect { try Preferences(parsing: ["odata.maxpagesize=0"]) } throws: {
            ($0 as? ODataError)?.message == "odata.maxpagesize must be a positive integer, but is '0'"
        }
    }

    @Test func versionNegotiation() throws {
        #expect(try ODataVersion.negotiate(version: nil, maxVersion: nil) == .v401)
        #expect(try ODataVersion.negotiate(version: nil, maxVersion: "4.0") == .v40)
        #expect(try ODataVersion.negotiate(version: "4.01", maxVersion: "4.0") == .v40)
        #expect(try ODataVersion.negotiate(version: nil, maxVersion: "5.2") == .v401)
        #expect { try ODataVersion.negotiate(version: "3.0", maxVersion: nil) } throws: {
            ($0 as? ODataError)?.message == "OData-Version 3.0 is not supported; this service speaks OData 4.0 and 4.01"
        }
        #expect(throws: ODataError.self) { try ODataVersion(parsing: "four") }
    }

    @Test func repeatabilityHeaders() throws {
        let date = Date(timeIntervalSince1970: 784_111_777)
        #expect(Repeatability.formatIMFFixdate(date) == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(Repeatability.parseIMFFixdate("Sun, 06 Nov 1994 08:49:37 GMT") == date)
        #expect(Repeatability.parseIMFFixdate("Mon, 06 Nov 1994 08:49:37 GMT") == nil)
        let headers = try #require(
            try Repeatability(requestIDHeader: "r-1", firstSentHeader: "Sun, 06 Nov 1994 08:49:37 GMT"))
        #expect(headers.firstSent == date)
        #expect(headers.firstSentHeader == "Sun, 06 Nov 1994 08:49:37 GMT")
        #expect(try Repeatability(requestIDHeader: nil, firstSentHeader: nil) == nil)
        #expect { try Repeatability(requestIDHeader: "r-1", firstSentHeader: nil) } throws: {
            ($0 as? ODataError)?.target == "Repeatability-First-Sent"
        }
        #expect(throws: ODataError.self) {
            try Repeatability(requestIDHeader: "has space", firstSentHeader: "Sun, 06 Nov 1994 08:49:37 GMT")
        }
        #expect(throws: ODataError.self) {
            try Repeatability(
                requestIDHeader: String(repeating: "x", count: 129), firstSentHeader: "Sun, 06 Nov 1994 08:49:37 GMT")
        }
    }
}
