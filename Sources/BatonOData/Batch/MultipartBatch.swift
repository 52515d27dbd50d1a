import Foundation

/// Multipart batch bodies (OData 4.0 Part 1 §11.7.7): `multipart/mixed` parts of `application/http`, with
/// changesets as nested `multipart/mixed` parts. Changesets map to atomicity groups, `Content-ID` to ids.
public enum MultipartBatch {
    /// The `boundary` parameter of a `multipart/mixed` content type.
    ///
    /// The header is read by byte with the scanner the other headers use (a combining mark cannot hide a `;`, `=`
    /// or quote inside a `Character`, and a quoted value is read whole, `;` and all), and the
    /// boundary must be what RFC 2046 allows: 1 to 70 of `bchars` (letters, digits, `'()+_,-./:=?` and spaces, not
    /// last).
    ///
    /// - Throws: ``ODataError`` (`invalidBatch`) when the content type is not multipart/mixed with such a boundary.
    public static func boundary(fromContentType contentType: String) throws(ODataError) -> String {
        // Echoed in errors only as far as 64 scalars (64 bytes could end inside one).
        let shown = contentType.prefix(scalars: 64)
        var scanner = HeaderScanner(contentType)
        guard scanner.mediaType() == "multipart/mixed" else {
            throw ODataError(
                .invalidBatch, "A multipart batch needs Content-Type multipart/mixed, not '\(shown)'",
                target: "Content-Type")
        }
        // Parameters one by one, a quoted value read whole (a ';' or "boundary=" inside quotes is its text).
        while true {
            scanner.skipSpaces()
            guard scanner.take(";") else { break }
            scanner.skipSpaces()
            guard let name = scanner.token() else { break }
            scanner.skipSpaces()
            guard scanner.take("=") else { break }
            scanner.skipSpaces()
            guard let value = scanner.token() ?? scanner.quotedString(), scanner.endsParameter() else { break }
            guard HeaderScanner.sameName(String(name), "boundary") else { continue }
            let allowed = Set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ'()+_,-./:=? ".utf8)
            guard (1...70).contains(value.utf8.count), value.utf8.allSatisfy(allowed.contains),
                value.utf8.last != UInt8(ascii: " ")
            else { break }
            return value
        }
        throw ODataError(
            .invalidBatch, "Content-Type '\(shown)' has no valid boundary parameter", target: "Content-Type")
    }

    /// Whether `contentType` is `multipart/mixed` (with any parameters), its type read by byte.
    ///
    /// - Parameter contentType: a `Content-Type` value, if any.
    /// - Returns: whether it names `multipart/mixed`.
    public static func isMultipartMixed(_ contentType: String?) -> Bool {
        HeaderScanner.mediaType(of: contentType) == "multipart/mixed"
    }

    // MARK: Requests

    /// Decodes a multipart batch request body.
    ///
    /// - Throws: ``ODataError`` (`invalidBatch`) naming the part that is malformed.
    public static func decodeRequests(_ body: [UInt8], boundary: String) throws(ODataError) -> [BatchRequest] {
        var requests: [BatchRequest] = []
        for (index, part) in try splitParts(body, boundary: boundary).enumerated() {
            if isMultipartMixed(part.contentType), let nested = part.contentType {
                let changeset = try self.boundary(fromContentType: nested)
                for inner in try splitParts(part.body, boundary: changeset) {
                    guard let id = inner.header("Content-ID") else {
                        throw ODataError(
                            .invalidBatch, "Every request in changeset '\(changeset)' needs a Content-ID header")
                    }
                    var request = try parseRequest(inner, id: id)
                    request.atomicityGroup = changeset
                    requests.append(request)
                }
            } else {
                requests.append(try parseRequest(part, id: part.header("Content-ID") ?? "part-\(index + 1)"))
            }
        }
        try BatchValidation.validate(requests)
        return requests
    }

    /// Encodes requests as a multipart batch body; consecutive requests of one atomicity group become a
    /// changeset whose boundary is `changeset_<group>`.
    public static func encodeRequests(_ requests: [BatchRequest], boundary: String) -> [UInt8] {
        encode(
            requests, boundary: boundary, group: \.atomicityGroup,
            part: { request in
                var text = "\(request.method) \(request.url) HTTP/1.1\r\n"
                for (name, value) in request.headers { text += "\(name): \(value)\r\n" }
                guard let body = request.body else { return (request.id, Array((text + "\r\n").utf8)) }
                if request.header("Content-Type") == nil { text += "Content-Type: application/json\r\n" }
                return (
                    request.id,
                    Array((text + "\r\n").utf8) + bodyBytes(body, contentType: request.header("Content-Type"))
                )
            })
    }

    // MARK: Responses

    /// Encodes responses as a multipart batch response body.
    public static func encodeResponses(_ responses: [BatchResponse], boundary: String) -> [UInt8] {
        encode(
            responses, boundary: boundary, group: \.atomicityGroup,
            part: { response in
                var text = "HTTP/1.1 \(response.status) \(reasonPhrase(response.status))\r\n"
                for (name, value) in response.headers { text += "\(name): \(value)\r\n" }
                guard let body = response.body else { return (response.id, Array((text + "\r\n").utf8)) }
                if response.header("Content-Type") == nil { text += "Content-Type: application/json\r\n" }
                return (
                    response.id,
                    Array((text + "\r\n").utf8) + bodyBytes(body, contentType: response.header("Content-Type"))
                )
            })
    }

    /// Decodes a multipart batch response body.
    ///
    /// - Throws: ``ODataError`` (`invalidBatch`) naming the part that is malformed.
    public static func decodeResponses(_ body: [UInt8], boundary: String) throws(ODataError) -> [BatchResponse] {
        var responses: [BatchResponse] = []
        for (index, part) in try splitParts(body, boundary: boundary).enumerated() {
            if isMultipartMixed(part.contentType), let nested = part.contentType {
                let changeset = try self.boundary(fromContentType: nested)
                for (innerIndex, inner) in try splitParts(part.body, boundary: changeset).enumerated() {
                    var response = try parseResponse(
                        inner, id: inner.header("Content-ID") ?? "\(index + 1).\(innerIndex + 1)")
                    response.atomicityGroup = changeset
                    responses.append(response)
                }
            } else {
                responses.append(try parseResponse(part, id: part.header("Content-ID") ?? "part-\(index + 1)"))
            }
        }
        return responses
    }

    // MARK: Parts

    package struct Part {
        package var headers: [(String, String)]
        package var body: [UInt8]

        package func header(_ name: String) -> String? { headers.first { HeaderScanner.sameName($0.0, name) }?.1 }
        package var contentType: String? { header("Content-Type") }
    }

    package static func encode<Item>(
        _ items: [Item], boundary: String, group: KeyPath<Item, String?>, part: (Item) -> (String, [UInt8])
    ) -> [UInt8] {
        var text: [UInt8] = []
        var index = 0
        func application(_ item: Item) -> [UInt8] {
            let (id, message) = part(item)
            return Array(
                "Content-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: \(id)\r\n\r\n".utf8)
                + message + Array("\r\n".utf8)
        }
        while index < items.count {
            text += Array("--\(boundary)\r\n".utf8)
            if let name = items[index][keyPath: group] {
                let changeset = "changeset_\(name)"
                text += Array("Content-Type: multipart/mixed; boundary=\(changeset)\r\n\r\n".utf8)
                while index < items.count, items[index][keyPath: group] == name {
                    text += Array("--\(changeset)\r\n".utf8) + application(items[index])
                    index += 1
                }
                text += Array("--\(changeset)--\r\n".utf8)
            } else {
                text += application(items[index])
                index += 1
            }
        }
        text += Array("--\(boundary)--\r\n".utf8)
        return text
    }

    /// Whether a body of `contentType` travels as bytes (neither JSON nor text): in a multipart batch as they are,
    /// in memory and in a JSON batch as a base64url string. The media type is read by byte
    /// (`HeaderScanner.mediaType(of:)`), as a request sent alone is told from a photo: `application/jsonx` is bytes,
    /// and so is a value that names no media type. No `Content-Type` at all is JSON, a batch request's default.
    ///
    /// - Parameter contentType: the body's `Content-Type`, if any.
    /// - Returns: whether the body is bytes.
    public static func isBinary(_ contentType: String?) -> Bool {
        guard let contentType else { return false }
        guard let type = HeaderScanner.mediaType(of: contentType) else { return true }
        return type != "application/json" && !type.hasPrefix("text/")
    }

    /// A body as it goes into a multipart message.
    static func bodyBytes(_ body: JSONValue, contentType: String?) -> [UInt8] {
        if isBinary(contentType), let text = body.stringValue, let bytes = Data(base64URLEncoded: text) {
            return Array(bytes)
        }
        let plain = HeaderScanner.mediaType(of: contentType)?.hasPrefix("text/") ?? false
        if plain, let text = body.stringValue { return Array(text.utf8) }
        return body.serializedBytes
    }

    /// Splits a multipart body at its boundary delimiters; the preamble and epilogue are ignored.
    package static func splitParts(_ body: [UInt8], boundary: String) throws(ODataError) -> [Part] {
        let delimiter = Array("--\(boundary)".utf8)
        var positions: [Int] = []
        var index = 0
        while index + delimiter.count <= body.count {
            let atLineStart = index == 0 || body[index - 1] == 0x0A
            if atLineStart, body[index] == 0x2D, Array(body[index..<index + delimiter.count]) == delimiter {
                positions.append(index)
                index += delimiter.count
            } else {
                index += 1
            }
        }
        guard let last = positions.last,
            last + delimiter.count + 2 <= body.count,
            body[last + delimiter.count] == 0x2D, body[last + delimiter.count + 1] == 0x2D
        else {
            throw ODataError(
                .invalidBatch, "The multipart body does not end with the closing delimiter '--\(boundary)--'")
        }
        var parts: [Part] = []
        for (start, end) in zip(positions, positions.dropFirst()) {
            var partStart = start + delimiter.count
            while partStart < end, body[partStart] == 0x20 || body[partStart] == 0x09 { partStart += 1 }
            guard partStart < end, body[partStart] == 0x0A || body[partStart] == 0x0D else {
                throw ODataError(.invalidBatch, "A boundary delimiter line has extra text after '--\(boundary)'")
            }
            partStart += body[partStart] == 0x0D ? 2 : 1
            var partEnd = end
            if partEnd > partStart, body[partEnd - 1] == 0x0A { partEnd -= 1 }
            if partEnd > partStart, body[partEnd - 1] == 0x0D { partEnd -= 1 }
            parts.append(try parsePart(Array(body[min(partStart, partEnd)..<partEnd])))
        }
        return parts
    }

    /// Reads header lines up to the first empty line; the rest is the body.
    static func splitHeaders(_ bytes: [UInt8]) throws(ODataError) -> ([(String, String)], [UInt8]) {
        var headers: [(String, String)] = []
        var index = 0
        while true {
            guard let newline = bytes[index...].firstIndex(of: 0x0A) else {
                if index == bytes.count { return (headers, []) }
                throw ODataError(.invalidBatch, "A batch part's headers are not followed by an empty line")
            }
            var line = bytes[index..<newline]
            if line.last == 0x0D { line = line.dropLast() }
            index = newline + 1
            if line.isEmpty { return (headers, Array(bytes[index...])) }
            // The first colon byte ends the name, whatever follows it: found by `Character`, a colon followed by a
            // combining mark was not one, and the header was read under another name.
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else {
                let text = String(decoding: line, as: UTF8.self)
                throw ODataError(.invalidBatch, "Malformed header line in a batch part: '\(text.prefix(scalars: 80))'")
            }
            headers.append(
                (
                    String(decoding: line[..<colon], as: UTF8.self).trimmingSpaces,
                    String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingSpaces
                ))
        }
    }

    static func parsePart(_ bytes: [UInt8]) throws(ODataError) -> Part {
        let (headers, body) = try splitHeaders(bytes)
        return Part(headers: headers, body: body)
    }

    static func firstLine(_ part: Part) throws(ODataError) -> (String, [(String, String)], JSONValue?) {
        if let type = part.contentType, HeaderScanner.mediaType(of: type) != "application/http" {
            throw ODataError(
                .invalidBatch, "A batch part must have Content-Type application/http, not '\(type.prefix(scalars: 80))'"
            )
        }
        guard let newline = part.body.firstIndex(of: 0x0A) else {
            throw ODataError(.invalidBatch, "A batch part has no HTTP start line")
        }
        var line = part.body[..<newline]
        if line.last == 0x0D { line = line.dropLast() }
        let (headers, body) = try splitHeaders(Array(part.body[(newline + 1)...]))
        var json: JSONValue?
        let trimmed = body.drop { $0 == 0x20 || $0 == 0x0D || $0 == 0x0A }
        if !trimmed.isEmpty {
            let type = headers.first { HeaderScanner.sameName($0.0, "Content-Type") }.map { header in
                HeaderScanner.mediaType(of: header.1) ?? ""
            }
            if type?.hasPrefix("text/") == true {
                // Plain-text bodies ($count, $value) travel as a JSON string.
                var text = body
                while text.last == 0x0A || text.last == 0x0D { text.removeLast() }
                json = .string(String(decoding: text, as: UTF8.self))
            } else if type == nil || type == "application/json" {
                json = try JSONValue(parsing: Array(trimmed))
            } else {
                // Any other body (a photo's bytes) as the JSON batch format carries it: a base64url string,
                // of the bytes exactly as they stand (the delimiter's line break is not theirs).
                json = .string(Data(body).base64URLEncoded)
            }
        }
        return (String(decoding: line, as: UTF8.self), headers, json)
    }

    /// A start line's pieces between its space bytes (empty pieces dropped), as HTTP splits it: by `Character`, a
    /// space followed by a combining mark was not one.
    static func startLinePieces(_ line: String, maxSplits: Int) -> [String] {
        line.utf8.split(separator: UInt8(ascii: " "), maxSplits: maxSplits).map { String(decoding: $0, as: UTF8.self) }
    }

    static func parseRequest(_ part: Part, id: String) throws(ODataError) -> BatchRequest {
        let (line, headers, body) = try firstLine(part)
        let pieces = startLinePieces(line, maxSplits: .max)
        guard pieces.count == 3, pieces[2].utf8.starts(with: "HTTP/".utf8) else {
            throw ODataError(
                .invalidBatch, "Batch request '\(id)' has a malformed request line; expected 'METHOD URL HTTP/1.1'",
                target: id)
        }
        return BatchRequest(
            id: id, method: HeaderScanner.asciiUppercased(pieces[0]), url: pieces[1], headers: headers,
            body: body)
    }

    static func parseResponse(_ part: Part, id: String) throws(ODataError) -> BatchResponse {
        let (line, headers, body) = try firstLine(part)
        let pieces = startLinePieces(line, maxSplits: 2)
        guard pieces.count >= 2, pieces[0].utf8.starts(with: "HTTP/".utf8), let status = Int(pieces[1]),
            (100...599).contains(status)
        else {
            throw ODataError(
                .invalidBatch, "Batch response '\(id)' has a malformed status line; expected 'HTTP/1.1 200 OK'",
                target: id)
        }
        return BatchResponse(id: id, status: status, headers: headers, body: body)
    }

    static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 200: "OK"
        case 201: "Created"
        case 204: "No Content"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 409: "Conflict"
        case 412: "Precondition Failed"
        case 428: "Precondition Required"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        default: "Status"
        }
    }
}
