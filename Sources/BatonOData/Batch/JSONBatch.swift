/// JSON batch bodies (OData JSON Format 4.01 §19): `{"requests": [...]}` and `{"responses": [...]}`.
public enum JSONBatch {
    /// Decodes a JSON batch request body.
    ///
    /// - Throws: ``ODataError``: `syntax` for malformed JSON, `invalidBatch` for a missing or mistyped
    ///   member, duplicate ids, unknown methods, a `dependsOn` that names no earlier request, or a split
    ///   atomicity group.
    public static func decodeRequests(_ body: [UInt8]) throws(ODataError) -> [BatchRequest] {
        let json = try JSONValue(parsing: body)
        guard let items = json["requests"]?.arrayValue else {
            throw ODataError(.invalidBatch, "A JSON batch body must be an object with a \"requests\" array")
        }
        var requests: [BatchRequest] = []
        for (offset, item) in items.enumerated() {
            func fail(_ message: String) -> ODataError {
                ODataError(.invalidBatch, "Batch request #\(offset + 1): \(message)")
            }
            guard item.objectMembers != nil else { throw fail("must be a JSON object") }
            guard let id = item["id"]?.stringValue else { throw fail("needs a string \"id\"") }
            guard let method = item["method"]?.stringValue else { throw fail("needs a string \"method\"") }
            guard let url = item["url"]?.stringValue, !url.isEmpty else { throw fail("needs a string \"url\"") }
            var dependsOn: [String] = []
            if let value = item["dependsOn"] {
                guard let array = value.arrayValue, array.allSatisfy({ $0.stringValue != nil }) else {
                    throw fail("\"dependsOn\" must be an array of request ids")
                }
                dependsOn = array.compactMap { $0.stringValue }
            }
            var group: String?
            if let value = item["atomicityGroup"] {
                guard let name = value.stringValue, !name.isEmpty else {
                    throw fail("\"atomicityGroup\" must be a non-empty string")
                }
                group = name
            }
            var headers: [(String, String)] = []
            if let value = item["headers"] {
                guard let members = value.objectMembers else { throw fail("\"headers\" must be an object") }
                for (name, headerValue) in members {
                    guard let text = headerValue.stringValue else {
                        throw fail("header '\(name)' must be a string")
                    }
                    headers.append((name, text))
                }
            }
            requests.append(
                BatchRequest(
                    id: id, atomicityGroup: group, dependsOn: dependsOn, method: HeaderScanner.asciiUppercased(method),
                    url: url,
                    headers: headers, body: item["body"]))
        }
        try BatchValidation.validate(requests)
        return requests
    }

    /// Encodes requests as a JSON batch body.
    public static func encodeRequests(_ requests: [BatchRequest]) -> JSONValue {
        .object([
            (
                "requests",
                .array(
                    requests.map { request in
                        var members: [(String, JSONValue)] = [("id", .string(request.id))]
                        if let group = request.atomicityGroup { members.append(("atomicityGroup", .string(group))) }
                        if !request.dependsOn.isEmpty {
                            members.append(("dependsOn", .array(request.dependsOn.map(JSONValue.string))))
                        }
                        members.append(("method", .string(request.method)))
                        members.append(("url", .string(request.url)))
                        if !request.headers.isEmpty {
                            members.append(("headers", .object(request.headers.map { ($0.0, .string($0.1)) })))
                        }
                        if let body = request.body { members.append(("body", body)) }
                        return .object(members)
                    })
            )
        ])
    }

    /// Encodes responses as a JSON batch response body.
    public static func encodeResponses(_ responses: [BatchResponse]) -> JSONValue {
        .object([
            (
                "responses",
                .array(
                    responses.map { response in
                        var members: [(String, JSONValue)] = [("id", .string(response.id))]
                        if let group = response.atomicityGroup { members.append(("atomicityGroup", .string(group))) }
                        members.append(("status", .number(String(response.status))))
                        if !response.headers.isEmpty {
                            members.append(("headers", .object(response.headers.map { ($0.0, .string($0.1)) })))
                        }
                        if let body = response.body { members.append(("body", body)) }
                        return .object(members)
                    })
            )
        ])
    }

    /// Decodes a JSON batch response body.
    ///
    /// - Throws: ``ODataError`` (`invalidBatch`) for a missing `responses` array or a response without id or
    ///   status.
    public static func decodeResponses(_ body: [UInt8]) throws(ODataError) -> [BatchResponse] {
        let json = try JSONValue(parsing: body)
        guard let items = json["responses"]?.arrayValue else {
            throw ODataError(.invalidBatch, "A JSON batch response must be an object with a \"responses\" array")
        }
        var responses: [BatchResponse] = []
        for (offset, item) in items.enumerated() {
            guard let id = item["id"]?.stringValue, case .number(let statusText)? = item["status"],
                let status = Int(statusText), (100...599).contains(status)
            else {
                throw ODataError(.invalidBatch, "Batch response #\(offset + 1) needs a string \"id\" and a \"status\"")
            }
            var headers: [(String, String)] = []
            for (name, value) in item["headers"]?.objectMembers ?? [] {
                guard let text = value.stringValue else {
                    throw ODataError(.invalidBatch, "Batch response '\(id)': header '\(name)' must be a string")
                }
                headers.append((name, text))
            }
            responses.append(
                BatchResponse(
                    id: id, atomicityGroup: item["atomicityGroup"]?.stringValue, status: status, headers: headers,
                    body: item["body"]))
        }
        return responses
    }
}
