import BatonOData
import Foundation
import Testing

@Suite struct BatchTests {
    static let jsonBatch = """
        {"requests":[
          {"id":"1","atomicityGroup":"g1","method":"post","url":"PreflightChecks",
           "headers":{"content-type":"application/json","Repeatability-Request-ID":"r-1"},"body":{"FuelKg":5200.50}},
          {"id":"2","atomicityGroup":"g1","dependsOn":["1"],"method":"PATCH","url":"$1","headers":{"If-Match":"*"},
           "body":{"Remarks":"ok"}},
          {"id":"3","dependsOn":["g1"],"method":"GET","url":"PreflightChecks?$top=1"}
        ]}
        """

    /// A batch request's method is upper-cased in ASCII only. Fails before: Unicode's upper-casing made `poſt` (a long
    /// s) a `POST`, so the server ran a method the request did not name.
    @Test func aMethodIsUpperCasedInASCIIOnly() throws {
        func json(_ method: String) -> [UInt8] {
            Array(#"{"requests":[{"id":"1","method":"\#(method)","url":"Aircraft"}]}"#.utf8)
        }
        #expect(try JSONBatch.decodeRequests(json("get")).map(\.method) == ["GET"])
        let error = #expect(throws: ODataError.self) { try JSONBatch.decodeRequests(json("po\u{017F}t")) }
        #expect(error?.message.contains("PO\u{017F}T") == true)
        func multipart(_ method: String) -> [UInt8] {
            Array("--b\r\nContent-Type: application/http\r\n\r\n\(method) Aircraft HTTP/1.1\r\n\r\n\r\n--b--\r\n".utf8)
        }
        #expect(try MultipartBatch.decodeRequests(multipart("get"), boundary: "b").map(\.method) == ["GET"])
        let parts = try? MultipartBatch.decodeRequests(multipart("po\u{017F}t"), boundary: "b")
        #expect(parts?.first?.method != "POST")
        let partError = #expect(throws: ODataError.self) {
            try MultipartBatch.decodeRequests(multipart("po\u{017F}t"), boundary: "b")
        }
        #expect(partError?.message.contains("PO\u{017F}T") == true)
    }

    /// A batch part's header line is split at its first colon byte and its start line at each space byte, as HTTP
    /// reads them, and the spaces and tabs around a name or value are trimmed by scalar. Fails before: found by
    /// `Character`, a colon or a space followed by a combining mark (U+0301) was not one, so `If-Match:◌́"x":y` was
    /// read as a header named `If-Match:◌́"x"` — the precondition gone under a name no lookup matches — and
    /// `GET ◌́x HTTP/1.1` as two pieces.
    @Test func aPartIsSplitAtItsColonAndSpaceBytesWhateverMarkFollows() throws {
        let mark = "\u{301}"
        func multipart(_ line: String, header: String) -> [UInt8] {
            Array("--b\r\nContent-Type: application/http\r\n\r\n\(line)\r\n\(header)\r\n\r\n\r\n--b--\r\n".utf8)
        }
        let requests = try MultipartBatch.decodeRequests(
            multipart("GET \(mark)x HTTP/1.1", header: "If-Match:\(mark)\"x\":y"), boundary: "b")
        let request = try #require(requests.first)
        #expect(request.method == "GET")
        #expect(request.url == "\(mark)x")
        #expect(request.headers.map(\.0) == ["If-Match"])
        #expect(request.header("If-Match") == "\(mark)\"x\":y")
        // A space followed by a mark is still trimmed: the value starts at the mark.
        let spaced = try MultipartBatch.decodeRequests(
            multipart("GET Aircraft HTTP/1.1", header: "Prefer: \(mark)odata.maxpagesize=1 \t"), boundary: "b")
        #expect(spaced.first?.header("Prefer") == "\(mark)odata.maxpagesize=1")
        let response = try MultipartBatch.decodeResponses(
            Array(
                "--b\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 204 \(mark)No\r\nETag:\(mark)W/\"1\"\r\n\r\n\r\n--b--\r\n"
                    .utf8),
            boundary: "b")
        #expect(response.first?.status == 204)
        #expect(response.first?.headers.map(\.0) == ["ETag"])
    }

    @Test func jsonBatchRequestsDecodeAndRoundTrip() throws {
        let requests = try JSONBatch.decodeRequests(Array(Self.jsonBatch.utf8))
        #expect(requests.map(\.id) == ["1", "2", "3"])
        #expect(requests[0].method == "POST")
        #expect(requests[0].atomicityGroup == "g1")
        #expect(requests[0].header("repeatability-request-id") == "r-1")
        #expect(requests[0].body?["FuelKg"] == .number("5200.50"))
        #expect(requests[2].dependsOn == ["g1"])
        let again = try JSONBatch.decodeRequests(JSONBatch.encodeRequests(requests).serializedBytes)
        #expect(again == requests)
    }

    @Test func referencesResolveToEarlierLocations() throws {
        let requests = try JSONBatch.decodeRequests(Array(Self.jsonBatch.utf8))
        #expect(try requests[1].resolvedURL(locations: ["1": "PreflightChecks(42)"]) == "PreflightChecks(42)")
        var navigation = requests[1]
        navigation.url = "$1/Aircraft"
        #expect(try navigation.resolvedURL(locations: ["1": "PreflightChecks(42)"]) == "PreflightChecks(42)/Aircraft")
        #expect(throws: ODataError.self) { try requests[1].resolvedURL(locations: [:]) }
    }

    @Test(arguments: [
        (
            #"{"requests":[{"id":"1","method":"GET","url":"A"},{"id":"1","method":"GET","url":"B"}]}"#,
            "Request id '1' is empty or used twice; ids must be unique"
        ),
        (
            #"{"requests":[{"id":"1","method":"FETCH","url":"A"}]}"#,
            "Request '1' has method 'FETCH'; use GET, POST, PATCH, PUT or DELETE"
        ),
        (
            #"{"requests":[{"id":"1","method":"GET","url":"A","dependsOn":["9"]}]}"#,
            "Request '1' depends on '9', which is not an earlier request or group"
        ),
        (
            #"{"requests":[{"id":"1","method":"GET","url":"A","atomicityGroup":"g"}]}"#,
            "Request '1' is a GET inside atomicity group 'g'; only changes belong in a group"
        ),
        (
            #"{"requests":[{"id":"1","method":"POST","url":"A","atomicityGroup":"g"},{"id":"2","method":"GET","url":"A"},{"id":"3","method":"POST","url":"A","atomicityGroup":"g"}]}"#,
            "Requests of atomicity group 'g' must be adjacent, and the group name must differ from request ids"
        ),
        (#"{"requests":[{"method":"GET","url":"A"}]}"#, "Batch request #1: needs a string \"id\""),
        (#"{"reqs":[]}"#, "A JSON batch body must be an object with a \"requests\" array"),
    ])
    func malformedJSONBatchesAreRejected(body: String, message: String) {
        #expect {
            try JSONBatch.decodeRequests(Array(body.utf8))
        } throws: { ($0 as? ODataError)?.message == message }
    }

    @Test func jsonBatchResponsesRoundTrip() throws {
        let responses = [
            BatchResponse(
                id: "1", atomicityGroup: "g1", status: 201, headers: [("Location", "PreflightChecks(1)")],
                body: .object([("FuelKg", .number("5200.50"))])),
            BatchResponse(id: "3", status: 412, body: ODataPayload.error(ODataError(.invalidHeader, "ETag mismatch"))),
        ]
        #expect(try JSONBatch.decodeResponses(JSONBatch.encodeResponses(responses).serializedBytes) == responses)
    }

    static let multipart = """
        --batch_1\r
        Content-Type: application/http\r
        Content-Transfer-Encoding: binary\r
        \r
        GET Aircraft('D-AIBL') HTTP/1.1\r
        Accept: application/json\r
        \r
        \r
        --batch_1\r
        Content-Type: multipart/mixed; boundary=changeset_a\r
        \r
        --changeset_a\r
        Content-Type: application/http\r
        Content-Transfer-Encoding: binary\r
        Content-ID: 1\r
        \r
        POST PreflightChecks HTTP/1.1\r
        Content-Type: application/json\r
        \r
        {"FuelKg":5200.50}\r
        --changeset_a\r
        Content-Type: application/http\r
        Content-ID: 2\r
        \r
        PATCH $1 HTTP/1.1\r
        If-Match: *\r
        \r
        {"Remarks":"ok"}\r
        --changeset_a--\r
        \r
        --batch_1--\r

        """

    @Test func multipartRequestsWithChangesetsDecode() throws {
        let boundary = try MultipartBatch.boundary(fromContentType: "multipart/mixed; boundary=\"batch_1\"")
        #expect(boundary == "batch_1")
        let requests = try MultipartBatch.decodeRequests(Array(Self.multipart.utf8), boundary: boundary)
        #expect(requests.map(\.method) == ["GET", "POST", "PATCH"])
        #expect(requests.map(\.url) == ["Aircraft('D-AIBL')", "PreflightChecks", "$1"])
        #expect(requests.map(\.atomicityGroup) == [nil, "changeset_a", "changeset_a"])
        #expect(requests[1].id == "1")
        #expect(requests[1].body?["FuelKg"] == .number("5200.50"))
        #expect(requests[2].header("If-Match") == "*")
    }

    /// A part's media types are read by byte, as a request sent alone is told from a photo: `application/http` with
    /// parameters is a part, a body of `application/jsonx` travels as bytes (base64url), not as JSON, and `TEXT/plain`
    /// as text.
    @Test func aPartsMediaTypesAreReadByByte() throws {
        #expect(!MultipartBatch.isBinary(nil))
        #expect(!MultipartBatch.isBinary("Application/JSON; odata.metadata=minimal"))
        #expect(!MultipartBatch.isBinary("text/plain; charset=utf-8"))
        for bytes in ["application/jsonx", "application/json-seq", "image/jpeg", "application/json\u{301}", ""] {
            #expect(MultipartBatch.isBinary(bytes), "\(bytes.debugDescription)")
        }
        func part(_ type: String, body: String) -> String {
            "--b\r\nContent-Type: application/http; msgtype=request\r\n\r\nPOST CheckPhotos HTTP/1.1\r\n"
                + "Content-Type: \(type)\r\n\r\n\(body)\r\n"
        }
        let body = part("application/jsonx", body: #"{"a":1}"#) + part("TEXT/plain", body: "seven") + "--b--\r\n"
        let requests = try MultipartBatch.decodeRequests(Array(body.utf8), boundary: "b")
        #expect(requests.count == 2)
        #expect(requests.first?.body == .string(Data(#"{"a":1}"#.utf8).base64URLEncoded))
        #expect(requests.last?.body == .string("seven"))
        let notAPart = "--b\r\nContent-Type: application/httpx\r\n\r\nGET A HTTP/1.1\r\n\r\n--b--\r\n"
        #expect(throws: ODataError.self) { try MultipartBatch.decodeRequests(Array(notAPart.utf8), boundary: "b") }
    }

    /// The boundary is read by byte and must be RFC 2046's: a combining mark beside `;`, `=` or a quote neither hides
    /// nor makes a parameter, and a boundary of other characters, empty or over 70 bytes is refused by name.
    @Test func theBoundaryIsReadByByteAndMustBeRFC2046s() throws {
        let good: [(String, String)] = [
            ("multipart/mixed; boundary=batch_1", "batch_1"), ("Multipart/Mixed;BOUNDARY=\"b 1\"", "b 1"),
            ("multipart/mixed; charset=utf-8; boundary=\"a'()+_,-./:=?z\"", "a'()+_,-./:=?z"),
            ("multipart/mixed ;\tboundary = x", "x"), (#"multipart/mixed; boundary="=""#, "="),
        ]
        for (header, boundary) in good { #expect(try MultipartBatch.boundary(fromContentType: header) == boundary) }
        // A quoted value is read whole: a ';' or "boundary=" inside it is its text, not another parameter.
        #expect(
            try MultipartBatch.boundary(fromContentType: #"multipart/mixed; x="a;boundary=b1;"; boundary=b2"#) == "b2")
        // An error echoes at most 64 bytes of the header.
        let long = "multipart/mixed; boundary=" + String(repeating: "<", count: 5_000)
        #expect { try MultipartBatch.boundary(fromContentType: long) } throws: { "\($0)".utf8.count < 300 }
        #expect(
            MultipartBatch.isMultipartMixed("Multipart/MIXED; boundary=b")
                && MultipartBatch.isMultipartMixed("multipart/mixed"))
        #expect(
            !MultipartBatch.isMultipartMixed("multipart/mixed\u{301}; boundary=b")
                && !MultipartBatch.isMultipartMixed(nil))
        #expect(
            !MultipartBatch.isMultipartMixed("multipart/mixedX") && !MultipartBatch.isMultipartMixed("application/json")
        )
        let bad = [
            "multipart/mixed; boundary=b\u{301}", "multipart/mixed;\u{301} boundary=b",
            "multipart/mixed; boundary\u{301}=b", "multipart/mixed\u{301}; boundary=b",
            "multipart/mixed; boundary=\"b\"\u{301}", "multipart/mixed; boundary=\"\"", "multipart/mixed; boundary=",
            "multipart/mixed; boundary=\"trailing \"", "multipart/mixed; boundary=" + String(repeating: "b", count: 71),
            "multipart/mixed; boundary=a\r\nX-Evil: 1", "multipart/mixed; boundary=<b>", "application/json; boundary=b",
            "multipart/mixedX; boundary=b",
        ]
        for header in bad {
            #expect(throws: ODataError.self, "\(header.debugDescription)") {
                try MultipartBatch.boundary(fromContentType: header)
            }
        }
        #expect(
            try MultipartBatch.boundary(
                fromContentType: "multipart/mixed; boundary=" + String(repeating: "b", count: 70)
            ).count == 70)
    }

    @Test func multipartRoundTripsBothDirections() throws {
        let requests = try MultipartBatch.decodeRequests(Array(Self.multipart.utf8), boundary: "batch_1")
        let encoded = MultipartBatch.encodeRequests(requests, boundary: "b2")
        let decoded = try MultipartBatch.decodeRequests(encoded, boundary: "b2")
        #expect(decoded.map(\.url) == requests.map(\.url))
        #expect(decoded.map(\.body) == requests.map(\.body))
        #expect(decoded.map(\.atomicityGroup) == [nil, "changeset_changeset_a", "changeset_changeset_a"])
        let responses = [
            BatchResponse(id: "0", status: 200, body: .object([("TailNumber", .string("D-AIBL"))])),
            BatchResponse(id: "1", atomicityGroup: "c", status: 201, headers: [("Location", "PreflightChecks(1)")]),
            BatchResponse(id: "2", atomicityGroup: "c", status: 204),
        ]
        let text = MultipartBatch.encodeResponses(responses, boundary: "r")
        #expect(String(decoding: text, as: UTF8.self).contains("HTTP/1.1 201 Created\r\nLocation: PreflightChecks(1)"))
        let back = try MultipartBatch.decodeResponses(text, boundary: "r")
        #expect(back.map(\.status) == [200, 201, 204])
        #expect(back.map(\.id) == ["0", "1", "2"])
        #expect(back[0].body == responses[0].body)
        #expect(back[1].header("location") == "PreflightChecks(1)")
    }

    @Test(arguments: [
        (
            "--b\r\nContent-Type: application/http\r\n\r\nGET A HTTP/1.1\r\n\r\n",
            "The multipart body does not end with the closing delimiter '--b--'"
        ),
        (
            "--b\r\nContent-Type: application/http\r\n\r\nGET\r\n\r\n--b--\r\n",
            "Batch request 'part-1' has a malformed request line; expected 'METHOD URL HTTP/1.1'"
        ),
        (
            "--b\r\nContent-Type: multipart/mixed; boundary=c\r\n\r\n--c\r\nContent-Type: application/http\r\n\r\nPOST A HTTP/1.1\r\n\r\n--c--\r\n--b--\r\n",
            "Every request in changeset 'c' needs a Content-ID header"
        ),
    ])
    func malformedMultipartBatchesAreRejected(body: String, message: String) {
        #expect {
            try MultipartBatch.decodeRequests(Array(body.utf8), boundary: "b")
        } throws: { ($0 as? ODataError)?.message == message }
    }
}
