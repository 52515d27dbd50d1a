import BatonOData
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Media entities over HTTP (OData 4.01 §11.4.7 and §11.2.10): a photo's bytes are created by `POST`ing them to the
/// entity set, read at `…/$value` and replaced there with `PUT`; the entity is deleted like any other.
///
/// The bytes stream to the ``MediaStore`` — checked to be a JPEG, PNG or HEIC by their first bytes, capped at
/// ``DataServiceConfiguration/maximumMediaSize``, their location removed — before the entity is written through
/// the data service as any change is (its properties from `Slug`, percent-encoded JSON, as SAP's OData services
/// take them; repeatability, on-behalf signatures covering the bytes' SHA-256, audit).
extension ODataRoutes {
    enum MediaRequest: Equatable {
        case read
        case create
        case replace
        /// A stream property's bytes read (`GET Set(key)/Name`) or replaced (`PUT`).
        case readStream(String)
        case replaceStream(String)
    }

    /// Which media request this is, if any: a `GET` or `PUT` of a media entity's `$value`, or a `POST` of bytes
    /// (anything but JSON) to a media entity set. Anything else — and any URL that does not parse — is the data
    /// service's, which answers it or explains what is wrong.
    func mediaRequest(method: HTTPRequest.Method, url: String, contentType: String?) -> MediaRequest? {
        Self.mediaRequest(method: method.rawValue, url: url, contentType: contentType, model: service.model)
    }

    /// ``mediaRequest(method:url:contentType:)`` for any model (a `$batch`'s requests too).
    static func mediaRequest(method: String, url: String, contentType: String?, model: ServiceModel) -> MediaRequest? {
        guard mayNameMedia(method: method, url: url, contentType: contentType, model: model),
            let parsed = try? ODataURL(parsing: url, model: model),
            case .resource(let segments) = parsed.path, let target = parsed.target
        else { return nil }
        if case .stream(let name)? = segments.last {
            switch method {
            case "GET": return .readStream(name)
            case "PUT": return .replaceStream(name)
            default: return nil
            }
        }
        guard target.entityType.hasStream else { return nil }
        switch method {
        case "GET" where segments.last == .value: return .read
        case "PUT" where segments.last == .value: return .replace
        case "POST" where segments.count == 1:
            let json = HeaderScanner.mediaType(of: contentType) == "application/json"
            return json ? nil : .create
        default: return nil
        }
    }

    /// Whether a request could be a media request at all, told without parsing its URL (every other request is
    /// parsed once, by the data service): a `GET` or `PUT` whose last path segment, percent-decoded, is `$value` or
    /// a stream property of the model, or a `POST` whose body is not JSON. The path is split by byte at `?` and `/`,
    /// as the URL parser splits it, and the segment compared as the parser compares it.
    static func mayNameMedia(method: String, url: String, contentType: String?, model: ServiceModel) -> Bool {
        switch method {
        case "POST":
            return HeaderScanner.mediaType(of: contentType) != "application/json"
        case "GET", "PUT":
            let bytes = url.utf8
            // As the parser reads the path: up to the first `#` or `?`, one trailing `/` dropped.
            var end = bytes.firstIndex { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") } ?? bytes.endIndex
            if end > bytes.startIndex, bytes[bytes.index(before: end)] == UInt8(ascii: "/") {
                end = bytes.index(before: end)
            }
            var start = end
            while start > bytes.startIndex, bytes[bytes.index(before: start)] != UInt8(ascii: "/") {
                start = bytes.index(before: start)
            }
            let segment = bytes[start..<end]
            // Plain ASCII (nearly every request): compared byte for byte, no string made. Otherwise decoded and
            // compared as the parser compares names.
            guard segment.allSatisfy({ $0 < 0x80 && $0 != UInt8(ascii: "%") }) else {
                guard let name = String(Substring(segment)).removingPercentEncoding else { return true }
                return name == "$value" || model.streamPropertyNames.contains(name)
            }
            return segment.elementsEqual("$value".utf8)
                || model.streamPropertyNames.contains { segment.elementsEqual($0.utf8) }
        default:
            return false
        }
    }

    func handleMedia(
        _ media: MediaRequest, request: Request, url: String, dataContext: DataService.Context,
        context: BatonRequestContext, version: ODataVersion
    ) async throws -> Response {
        switch media {
        case .read:
            return try await readMedia(url: url, request: request, dataContext: dataContext, context: context)
        case .readStream(let name):
            return try await readStream(
                name, url: url, request: request, dataContext: dataContext, context: context)
        case .create, .replace, .replaceStream:
            return try await storeMedia(
                media, request: request, url: url, dataContext: dataContext, context: context, version: version)
        }
    }

    /// `GET …/$value`: the entity is read as any read is (permissions, 404), then its bytes are checked against
    /// their SHA-256 and streamed.
    func readMedia(url: String, request: Request, dataContext: DataService.Context, context: BatonRequestContext)
        async throws -> Response
    {
        let path = url.prefix { $0 != "?" }
        guard let value = path.range(of: "/$value", options: .backwards) else {
            throw ServerError.badRequest("Write '$value' as it is, not percent-encoded.")
        }
        let entityURL = String(path[..<value.lowerBound])
        let read = DataRequest(
            method: "GET", url: entityURL + "?$select=SHA256,ContentType,Size",
            headers: [("Accept", "application/json")], body: [])
        let answer = try await execute(read, context: dataContext, modelOnly: false, logger: context.logger)
        guard answer.status == 200, let entity = answer.jsonBody else {
            return Self.httpResponse(answer, version: dataContext.version)
        }
        guard let sha256 = entity["SHA256"]?.stringValue, let contentType = entity["ContentType"]?.stringValue,
            let kind = ImageKind(contentType: contentType)
        else {
            throw ServerError.notFound("This media entity has no bytes.")
        }
        let etag = "\"\(sha256)\""
        var headers = Self.mediaHeaders(kind: kind, entityURL: entityURL, etag: etag)
        if let match = request.headers[.ifNoneMatch], match == etag || match == "*" {
            return Response(status: .notModified, headers: headers)
        }
        let reader = try await service.media.answerReader(sha256, logger: context.logger)
        if case .number(let size)? = entity["Size"], Int64(size) != nil { headers[.contentLength] = size }
        return Response(status: .ok, headers: headers, body: reader.responseBody)
    }

    /// The headers of a media answer: its type, its ETag, never sniffed, shown inline under a name of its own.
    static func mediaHeaders(kind: ImageKind, entityURL: String, etag: String) -> HTTPFields {
        // The file name: the entity's URL by its ASCII letters, digits and dashes alone (nothing that could end the
        // quoted string or the header).
        let name = entityURL.unicodeScalars.filter {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-")
        }
        return [
            .contentType: kind.rawValue, .eTag: etag, .cacheControl: "private, no-cache",
            .contentTypeOptions: "nosniff",
            .contentDisposition:
                "inline; filename=\"\(String(String.UnicodeScalarView(name.prefix(100)))).\(kind.fileExtension)\"",
        ]
    }

    /// What a media upload asks for, read from its headers before a byte of its body: the entity's properties
    /// (`Slug`), the declared type, the bytes' SHA-256 (`Content-Digest`), and the change the data service will
    /// write once the bytes are stored.
    struct MediaIntent: Sendable {
        var slug: String?
        var declared: ImageKind?
        var digest: [UInt8]?
        /// The change as the data service sees it: the properties as a JSON body.
        var admission: DataRequest
    }

    /// Reads a media upload's headers; refuses what is malformed before a byte is stored.
    static func mediaIntent(_ media: MediaRequest, method: String, url: String, headers fields: HTTPFields) throws
        -> MediaIntent
    {
        var slug: String?
        var properties: [UInt8] = []
        if media == .create, let header = fields[.slug] {
            guard let decoded = header.removingPercentEncoding,
                (try? JSONValue(parsing: Array(decoded.utf8)))?.objectMembers != nil
            else {
                throw ServerError.badRequest(
                    "Slug must hold the photo's properties as a percent-encoded JSON object, like %7B%22CheckID%22%3A%22…%22%7D.",
                    target: "Slug")
            }
            slug = header
            properties = Array(decoded.utf8)
        }
        var declared: ImageKind?
        if let named = fields[.contentType] {
            guard let kind = ImageKind(contentType: named) else {
                throw ServerError(
                    .unsupportedMediaType, "UnsupportedMediaType",
                    "A photo is \(DataService.mediaTypes); '\(named.prefix(60))' is not accepted.")
            }
            declared = kind
        }
        // RFC 9530: `Content-Digest: sha-256=:BASE64:` — the SHA-256 of the bytes as sent.
        var digest: [UInt8]?
        if let field = fields[.contentDigest] {
            guard let parsed = Self.sha256(contentDigest: field) else {
                throw ServerError.badRequest(
                    "Content-Digest must give the bytes' SHA-256 as sha-256=:BASE64: (RFC 9530).",
                    target: "Content-Digest")
            }
            digest = parsed
        }
        var headers = fields.map { ($0.name.rawName, $0.value) }
        headers.removeAll { HeaderScanner.sameName($0.0, "Content-Type") }
        headers.append(("Content-Type", "application/json"))
        return MediaIntent(
            slug: slug, declared: declared, digest: digest,
            admission: DataRequest(method: method, url: url, headers: headers, body: properties))
    }

    /// `POST` to a media entity set, `PUT …/$value`: the bytes go to the store first (a refused upload keeps
    /// nothing), then the entity is written through the data service with the stored media's facts. With
    /// `Upload-Complete: ?0` the upload is resumable instead (``createUpload(_:intent:request:url:dataContext:context:version:)``).
    func storeMedia(
        _ media: MediaRequest, request: Request, url: String, dataContext: DataService.Context,
        context: BatonRequestContext, version: ODataVersion
    ) async throws -> Response {
        let intent = try Self.mediaIntent(media, method: request.method.rawValue, url: url, headers: request.headers)
        if let complete = request.headers[.uploadComplete] {
            guard let flag = Self.structuredBoolean(complete) else {
                throw ServerError.badRequest("Upload-Complete is ?0 or ?1.", target: "Upload-Complete")
            }
            if !flag {
                return try await createUpload(
                    media, intent: intent, request: request, url: url, dataContext: dataContext, context: context,
                    version: version)
            }
        }
        let expected = request.headers[.contentLength].flatMap { Int64($0) }
        // A declared length past the cap is refused before anything adds to it.
        let limit = service.configuration.maximumMediaSize
        if let expected, expected > Int64(limit) {
            throw Self.error(for: MediaRefusal(reason: .tooLarge(limit: limit)))
        }
        return try await writeMedia(
            intent, body: request.body, expectedSize: expected, dataContext: dataContext, context: context,
            version: version
        ).0
    }

    /// Admits the change, stores `body` as its bytes, and writes the entity: in one of the user's change slots
    /// for all its time, and what the change would be refused for anyway is refused before a byte is stored.
    /// Returns the answer and the stored bytes' facts.
    func writeMedia<Body: AsyncSequence & Sendable>(
        _ intent: MediaIntent, body: Body, expectedSize: Int64?, dataContext: DataService.Context,
        context: BatonRequestContext, version: ODataVersion, slotTaken: Bool = false
    ) async throws -> (Response, StoredMedia) where Body.Element == ByteBuffer {
        let configuration = service.configuration
        return try await service.changes.run(for: dataContext.user, taking: !slotTaken) {
            try await service.admitMedia(intent.admission, context: dataContext, expectedSize: expectedSize)
            let stored: StoredMedia
            do {
                stored = try await service.media.ingest(
                    body, limit: configuration.maximumMediaSize, keepLocation: configuration.keepsImageLocation,
                    declared: intent.declared, digest: intent.digest, slug: intent.slug, now: service.clock.now())
            } catch let refusal as MediaRefusal {
                throw Self.error(for: refusal)
            } catch let error as HTTPError where error.status == .contentTooLarge {
                throw Self.error(for: MediaRefusal(reason: .tooLarge(limit: configuration.maximumMediaSize)))
            }
            var dataRequest = intent.admission
            dataRequest.media = stored
            let response = try await execute(
                dataRequest, context: dataContext, modelOnly: false, slotTaken: true, logger: context.logger)
            return (Self.httpResponse(response, version: version), stored)
        }
    }

    /// The SHA-256 a `Content-Digest` field gives (`sha-256=:BASE64:`, among other algorithms), or `nil`.
    static func sha256(contentDigest field: String) -> [UInt8]? {
        // By byte: a mark combined with a `,`, `=` or `:` does not move where a member or its value ends.
        for member in field.utf8.split(separator: UInt8(ascii: ",")) {
            let parts = member.split(separator: UInt8(ascii: "="), maxSplits: 1)
            let space = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
            guard parts.count == 2,
                HeaderScanner.sameName(
                    String(
                        decoding: parts[0].drop(while: space).reversed().drop(while: space).reversed(), as: UTF8.self),
                    "sha-256")
            else { continue }
            let value = Array(parts[1].drop(while: space).reversed().drop(while: space).reversed())
            guard value.count > 2, value.first == UInt8(ascii: ":"), value.last == UInt8(ascii: ":"),
                let bytes = Data(base64Encoded: Data(value.dropFirst().dropLast())), bytes.count == 32
            else { return nil }
            return Array(bytes)
        }
        return nil
    }

    /// The answer to refused bytes.
    static func error(for refusal: MediaRefusal) -> ServerError {
        switch refusal.reason {
        case .empty:
            return ServerError.badRequest("The photo is empty: send its bytes as the body.")
        case .tooLarge(let limit):
            return ServerError(
                .contentTooLarge, "MediaTooLarge", "A photo may take at most \(limit / (1024 * 1024)) MiB.")
        case .notAnImage:
            return ServerError(
                .unsupportedMediaType, "NotAnImage",
                "The bytes are not a JPEG, PNG or HEIC image (checked by their content, not their Content-Type).")
        case .truncated:
            return ServerError.badRequest("The image is truncated: it ends before its end. Send the whole file.")
        case .metadataOutOfReach:
            return ServerError(
                .unsupportedMediaType, "MetadataOutOfReach",
                "The image's metadata lies beyond its first \(ImageHead.length / 1024) KiB (or where it cannot be followed), where its location cannot be removed; export the photo again."
            )
        case .digestMismatch:
            return ServerError(
                .badRequest, "DigestMismatch",
                "The bytes that arrived do not have the SHA-256 Content-Digest gives: the photo was changed or cut on the way; send it again.",
                target: "Content-Digest")
        case .mismatch(let declared, let actual):
            return ServerError(
                .unsupportedMediaType, "MediaTypeMismatch",
                "The body is declared \(declared.rawValue) but its bytes are \(actual.rawValue); send it as what it is."
            )
        }
    }
}

extension HTTPField.Name {
    /// The field named `name`, which is a valid field name (a literal of this code).
    static func named(_ name: String) -> HTTPField.Name {
        guard let field = HTTPField.Name(name) else { preconditionFailure("'\(name)' is a valid header name") }
        return field
    }

    static let slug = named("Slug")
    static let contentTypeOptions = named("X-Content-Type-Options")
    static let contentDigest = named("Content-Digest")
    static let contentDisposition = named("Content-Disposition")
    static let uploadComplete = named("Upload-Complete")
    static let uploadOffset = named("Upload-Offset")
    static let uploadLength = named("Upload-Length")
    static let uploadLimit = named("Upload-Limit")
}
