import BatonOData
import Foundation
import HTTPTypes
import NIOCore

/// Media requests inside a `$batch` (OData 4.01 §11.7): a photo created by `POST`ing its bytes to a media entity
/// set, replaced by `PUT` to its `$value`, or read by `GET` of its `$value`. Their bytes travel as the JSON batch
/// format carries a body that is not JSON — a base64url string — and as they are in a multipart batch.
///
/// Each runs on its own, between the batch's other requests and in their order (a photo may depend on the check
/// created before it, `$1`): its bytes are checked and stored first, as a photo sent alone is, then its entity is
/// written in a transaction of its own. Inside an atomicity group a photo cannot be rolled back with the rest, so
/// there it is refused.
extension DataService {
    /// Whether a request of a batch may be a media request: bytes sent to be stored, or a `$value` read. Such a
    /// request is taken on its own, once the requests before it ran (its URL may name one of them).
    static func mayBeMedia(_ request: BatchRequest) -> Bool {
        switch request.method {
        case "GET":
            return request.url.prefix { $0 != "?" }.hasSuffix("/$value")
        case "POST", "PUT":
            return MultipartBatch.isBinary(request.header("Content-Type"))
        default:
            return false
        }
    }

    /// The request's URL relative to the service root, its `$n` resolved.
    func relativeURL(_ request: BatchRequest, locations: [String: String], context: Context) throws(ODataError)
        -> String
    {
        var url = try request.resolvedURL(locations: locations)
        if url.hasPrefix(context.serviceRoot) { url = String(url.dropFirst(context.serviceRoot.count)) }
        if url.hasPrefix("/odata/") { url = String(url.dropFirst("/odata/".count)) }
        return url
    }

    /// Runs one media request of a batch; returns its answer, its audit entries, and the location of what it
    /// created (for the `$n` of later requests).
    func batchMedia(_ request: BatchRequest, kind: ODataRoutes.MediaRequest, url: String, context: Context) async
        -> (response: BatchResponse, audit: [AuditEntry], location: String?)
    {
        do {
            switch kind {
            case .read:
                return (Self.batchResponse(request, try await mediaBytes(url, context: context)), [], nil)
            case .readStream:
                throw ServerError.badRequest(
                    "A stream property is read on its own (GET Set(key)/Name), not inside a $batch.")
            case .create, .replace, .replaceStream:
                let (response, entries) = try await storeBatchMedia(request, kind: kind, url: url, context: context)
                let location = response.headers.first { $0.0 == "Location" }.map {
                    String($0.1.dropFirst(context.serviceRoot.count))
                }
                return (Self.batchResponse(request, response), entries, response.status < 400 ? location : nil)
            }
        } catch let error as ServerError {
            return (Self.batchResponse(request, .error(error)), [], nil)
        } catch let error as ODataError {
            return (Self.batchResponse(request, .error(ServerError(error))), [], nil)
        } catch let error as StorageError where error.kind == .unavailable {
            // The connection may have gone after the commit: the photo's audit entries may wait in the outbox.
            outbox.noteBacklog()
            return (Self.batchResponse(request, .error(Self.unapplied(error))), [], nil)
        } catch {
            return (
                Self.batchResponse(
                    request, .error(ServerError(.internalServerError, "InternalError", "The request failed."))),
                [], nil
            )
        }
    }

    /// A photo's bytes from a batch: checked and stored as a photo sent alone is, then its entity written.
    func storeBatchMedia(_ request: BatchRequest, kind: ODataRoutes.MediaRequest, url: String, context: Context)
        async throws -> (DataResponse, [AuditEntry])
    {
        guard case .string(let text)? = request.body, let bytes = Data(base64URLEncoded: text) else {
            throw ServerError.badRequest(
                "A photo's bytes go as the request's body: as they are in a multipart batch, base64url-encoded in a JSON one."
            )
        }
        var fields = HTTPFields()
        for (name, value) in request.headers {
            if let field = HTTPField.Name(name) { fields.append(HTTPField(name: field, value: value)) }
        }
        let intent = try ODataRoutes.mediaIntent(kind, method: request.method, url: url, headers: fields)
        let limit = configuration.maximumMediaSize
        guard bytes.count <= limit else { throw ODataRoutes.error(for: MediaRefusal(reason: .tooLarge(limit: limit))) }
        try await admitMedia(intent.admission, context: context, expectedSize: Int64(bytes.count))
        var data = intent.admission
        do {
            data.media = try await media.ingest(
                SingleBuffer(buffer: ByteBuffer(bytes: bytes)), limit: limit,
                keepLocation: configuration.keepsImageLocation, declared: intent.declared, digest: intent.digest,
                slug: intent.slug, now: clock.now())
        } catch let refusal as MediaRefusal {
            throw ODataRoutes.error(for: refusal)
        }
        let parsed = try parse(url)
        let change = data
        return try await store.write { db in
            var entries: [AuditEntry] = []
            let response = try await self.change(parsed, request: change, in: db, context: context, audit: &entries)
            try await self.outbox.stage(&entries, in: db)
            return (response, entries)
        }
    }

    /// A photo's bytes for a batch's answer: its entity read as any read is (permissions, 404), its bytes checked
    /// against their SHA-256 and within the batch's answer budget, base64url-encoded under their own type.
    func mediaBytes(_ url: String, context: Context) async throws -> DataResponse {
        let path = url.prefix { $0 != "?" }
        guard let value = path.range(of: "/$value", options: .backwards) else {
            throw ServerError.badRequest("Write '$value' as it is, not percent-encoded.")
        }
        let entity = DataRequest(
            method: "GET", url: String(path[..<value.lowerBound]) + "?$select=SHA256,ContentType,Size",
            headers: [("Accept", "application/json")], body: [])
        let parsed = try parse(entity.url)
        let answer = try await store.storage.read { db in
            try await self.read(parsed, request: entity, in: db, context: context)
        }
        guard answer.status == 200, let json = answer.jsonBody else { return answer }
        guard let sha256 = json["SHA256"]?.stringValue, let contentType = json["ContentType"]?.stringValue,
            let kind = ImageKind(contentType: contentType)
        else { throw ServerError.notFound("This media entity has no bytes.") }
        // The stored `Size`, within what an upload may be: a damaged or hostile row cannot overflow the sums below.
        var size = 0
        if case .number(let text)? = json["Size"] { size = min(max(Int(text) ?? 0, 0), 1 << 40) }
        // The answer carries the bytes as base64url: a third more.
        let encoded = (size * 4 + 2) / 3
        if let budget = context.budget, budget.isSpent || budget.spentBytes + encoded > budget.limit {
            throw ServerError(
                .contentTooLarge, "BatchResponseTooLarge",
                "The answers of this $batch would pass \(Self.describe(bytes: budget.limit)) with this photo; read it on its own (GET …/$value)."
            )
        }
        let reader = try await media.answerReader(sha256, logger: nil)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(min(size, configuration.maximumMediaSize))
        try await reader.forEachPart { bytes += $0 }
        context.budget?.spend((bytes.count * 4 + 2) / 3)
        return DataResponse(
            status: 200,
            headers: [
                ("Content-Type", kind.rawValue), ("ETag", "\"\(sha256)\""), ("X-Content-Type-Options", "nosniff"),
            ],
            body: .text(Data(bytes).base64URLEncoded, contentType: kind.rawValue))
    }
}

/// One buffer as an asynchronous sequence: a batch's photo, already whole, through the streaming ingest.
struct SingleBuffer: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let buffer: ByteBuffer

    struct AsyncIterator: AsyncIteratorProtocol {
        var buffer: ByteBuffer?

        mutating func next() async -> ByteBuffer? {
            defer { buffer = nil }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(buffer: buffer) }
}
