import BatonOData
import BatonSQL
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

extension ODataRoutes {
    /// The most uploads one user may leave unfinished at once.
    static let maximumOpenUploads = 16
    /// The fewest bytes a chunk that does not end its upload may carry (each chunk is a row, and a row a write).
    static let minimumAppend = 64 * 1024
    var uploads: ResumableUploadStore { ResumableUploadStore(storage: service.store.storage) }

    /// `POST`/`PUT` with `Upload-Complete: ?0`: records the upload (admitted as the finished change would be),
    /// stores what the body already holds, and answers 201 with its `Location` and `Upload-Offset`. The same
    /// `Repeatability-Request-ID` again finds the same upload — or, when it completed, its stored answer. Runs in
    /// one of the user's change slots, as every request that stores bytes does.
    func createUpload(
        _ media: MediaRequest, intent: MediaIntent, request: Request, url: String, dataContext: DataService.Context,
        context: BatonRequestContext, version: ODataVersion
    ) async throws -> Response {
        let limit = service.configuration.maximumMediaSize
        guard let text = request.headers[.uploadLength], let length = Int64(text), length >= 0 else {
            throw ServerError.badRequest(
                "A resumable upload (Upload-Complete: ?0) gives its whole size in Upload-Length.",
                target: "Upload-Length")
        }
        guard length > 0 else { throw Self.error(for: MediaRefusal(reason: .empty)) }
        guard length <= Int64(limit) else { throw Self.error(for: MediaRefusal(reason: .tooLarge(limit: limit))) }
        if let text = request.headers[.contentLength] {
            guard let count = Int64(text), count <= length else { throw Self.pastTheEnd(length: length, held: 0) }
        }
        // Malformed repeatability headers are refused now, not after every byte arrived.
        do {
            _ = try Repeatability(
                requestIDHeader: intent.admission.header("Repeatability-Request-ID"),
                firstSentHeader: intent.admission.header("Repeatability-First-Sent"))
        } catch {
            throw ServerError(error)
        }
        let now = service.clock.now()
        let id = UUID().uuidString.lowercased()
        var headers = request.headers.filter { !ResumableUpload.unrecorded.contains($0.name.canonicalName) }
            .map { [$0.name.rawName, $0.value] }
        var requestID = intent.admission.header("Repeatability-Request-ID")
        if requestID == nil {
            // Every resumable upload is repeatable: completing it twice writes its entity once.
            requestID = "upload-" + id
            headers += [
                ["Repeatability-Request-ID", "upload-" + id],
                ["Repeatability-First-Sent", Repeatability.formatIMFFixdate(now)],
            ]
        }
        let recorded = ResumableUpload.Recorded(method: request.method.rawValue, url: url, headers: headers)
        let fresh = ResumableUpload(
            id: id, owner: dataContext.user, requestID: requestID ?? id, request: recorded, length: length,
            received: 0, parts: 0)
        return try await service.changes.run(for: dataContext.user) {
            var upload: ResumableUpload
            if let existing = try await uploads.find(owner: dataContext.user, requestID: fresh.requestID) {
                upload = existing
            } else {
                try await service.admitMedia(intent.admission, context: dataContext, expectedSize: length)
                upload = try await uploads.create(fresh, now: now, limit: Self.maximumOpenUploads)
            }
            guard upload.isSameRequest(as: fresh) else {
                throw ServerError(
                    .conflict, "UploadConflict",
                    "Repeatability-Request-ID '\(fresh.requestID.prefix(64))' already names another upload; use a new id for a new photo.",
                    target: "Repeatability-Request-ID")
            }
            if upload.media != nil {
                return try await completeUpload(
                    upload, dataContext: dataContext, context: context, version: version, slotTaken: true)
            }
            // A creation sent again with a body of its own starts at 0: its bytes count only while none arrived.
            if upload.received == 0 {
                do {
                    upload.received = try await receive(request.body, into: upload, at: 0)
                } catch let error as ServerError where error.code == "MismatchingUploadOffset" {
                    // Another request moved the upload meanwhile: where it stands is the answer.
                    guard let current = try await uploads.find(id: upload.id, owner: dataContext.user) else {
                        throw error
                    }
                    upload = current
                }
            }
            if upload.received == upload.length {
                // Read again: the parts the body added.
                guard let current = try await uploads.find(id: upload.id, owner: dataContext.user) else {
                    throw ServerError.notFound("The upload was removed meanwhile.")
                }
                return try await completeUpload(
                    current, dataContext: dataContext, context: context, version: version, slotTaken: true)
            }
            var fields = Self.uploadFields(upload)
            fields[.location] = dataContext.serviceRoot + "$uploads/" + upload.id
            return Response(status: .created, headers: fields)
        }
    }

    /// `HEAD`, `PATCH` and `DELETE` of `$uploads/ID`: only the user who created the upload finds it. A `PATCH`
    /// runs in one of the user's change slots.
    func handleUpload(
        id: String, request: Request, dataContext: DataService.Context, context: BatonRequestContext,
        version: ODataVersion
    ) async throws -> Response {
        let valid =
            id.utf8.count == 36 && id.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) || $0 == 45 }
        guard valid, let upload = try await uploads.find(id: id, owner: dataContext.user) else {
            // The id is not echoed: it is the client's text, and may not be an id at all.
            throw ServerError.notFound("No such upload of yours is in progress; create it again.")
        }
        switch request.method {
        case .head:
            return Response(status: .noContent, headers: Self.uploadFields(upload))
        case .delete:
            try await uploads.remove(upload.id)
            return Response(status: .noContent)
        case .patch:
            guard let text = request.headers[.uploadOffset], let offset = Int64(text), offset >= 0 else {
                throw ServerError.badRequest(
                    "A PATCH of an upload names the offset its bytes start at in Upload-Offset.",
                    target: "Upload-Offset")
            }
            if let type = request.headers[.contentType],
                !["application/partial-upload", "application/offset+octet-stream", "application/octet-stream"]
                    .contains(type.lowercased())
            {
                throw ServerError(
                    .unsupportedMediaType, "UnsupportedMediaType",
                    "The bytes of an upload are sent as application/partial-upload.")
            }
            var complete: Bool?
            if let text = request.headers[.uploadComplete] {
                guard let flag = Self.structuredBoolean(text) else {
                    throw ServerError.badRequest("Upload-Complete is ?0 or ?1.", target: "Upload-Complete")
                }
                complete = flag
            }
            return try await service.changes.run(for: dataContext.user) {
                // Complete already (or every byte there, its completion cut short): the photo's answer.
                if upload.media != nil || upload.received == upload.length {
                    return try await completeUpload(
                        upload, dataContext: dataContext, context: context, version: version, slotTaken: true)
                }
                guard offset == upload.received else { throw Self.mismatch(upload, sentAt: offset) }
                if let text = request.headers[.contentLength] {
                    // Compared without adding: a length near Int64's end must not overflow.
                    guard let count = Int64(text), count <= upload.length - offset else {
                        throw Self.pastTheEnd(length: upload.length, held: upload.received)
                    }
                    if count < upload.length - offset, count < Int64(Self.minimumAppend) {
                        throw Self.tooShort(upload)
                    }
                    if complete == true, count != upload.length - offset {
                        throw ServerError.badRequest(
                            "Upload-Complete: ?1, but these bytes end at \(offset + count) of the upload's \(upload.length).",
                            target: "Upload-Complete")
                    }
                }
                var moved = upload
                moved.received = try await receive(request.body, into: upload, at: offset)
                if moved.received == moved.length {
                    guard let current = try await uploads.find(id: upload.id, owner: dataContext.user) else {
                        throw ServerError.notFound("The upload was removed meanwhile.")
                    }
                    return try await completeUpload(
                        current, dataContext: dataContext, context: context, version: version, slotTaken: true)
                }
                if complete == true {
                    throw ServerError.badRequest(
                        "Upload-Complete: ?1, but the server holds \(moved.received) bytes of \(moved.length).",
                        target: "Upload-Complete")
                }
                return Response(status: .noContent, headers: Self.uploadFields(moved))
            }
        default:
            throw ServerError(.methodNotAllowed, "MethodNotAllowed", "An upload takes HEAD, PATCH and DELETE.")
        }
    }

    /// Stores a request's body into `upload` from `offset`, a part (``ResumableUploadStore/partSize``) at a time, each with
    /// the offset it moves; when the connection breaks, what arrived is kept. Returns the new offset.
    ///
    /// Refused with nothing stored: bytes past the upload's end; a first chunk whose first bytes are no JPEG, PNG
    /// or HEIC (or not the one `Content-Type` declared); a chunk shorter than ``minimumAppend`` that does not end
    /// the upload.
    @concurrent func receive<Body: AsyncSequence>(_ body: Body, into upload: ResumableUpload, at offset: Int64)
        async throws -> Int64 where Body.Element == ByteBuffer
    {
        var received = offset
        var pending: [UInt8] = []
        var sniffed = offset > 0
        let declared = upload.request.fields[.contentType].flatMap(ImageKind.init(contentType:))
        func flush(_ count: Int) async throws {
            guard count > 0 else { return }
            if !sniffed {
                // What cannot be a photo is refused on its first bytes, before they are kept.
                let head = Array(pending.prefix(12))
                var refusal: MediaRefusal?
                if head.count < 12 && Int64(head.count) != upload.length {
                    refusal = MediaRefusal(reason: .notAnImage)
                } else if let kind = ImageKind(sniffing: head) {
                    if let declared, declared != kind {
                        refusal = MediaRefusal(reason: .mismatch(declared: declared, actual: kind))
                    }
                } else {
                    refusal = MediaRefusal(reason: .notAnImage)
                }
                if let refusal {
                    // An upload that is no photo is of no use: it goes.
                    try await uploads.remove(upload.id)
                    throw Self.error(for: refusal)
                }
                sniffed = true
            }
            let part = Array(pending.prefix(count))
            switch try await uploads.append(part, to: upload.id, at: received, now: service.clock.now()) {
            case .appended: break
            case .tooManyParts:
                throw ServerError(
                    .conflict, "UploadInTooManyPieces",
                    "This upload has taken \(ResumableUploadStore.maximumParts) pieces; DELETE it and send the photo again in larger chunks.",
                    target: "Upload-Offset")
            case .moved:
                // Another request (the same chunk sent twice at once) moved the upload meanwhile.
                guard let current = try await uploads.find(id: upload.id, owner: upload.owner) else {
                    throw ServerError.notFound("The upload was removed meanwhile; create it again.")
                }
                throw Self.mismatch(current, sentAt: received)
            }
            pending.removeFirst(count)
            received += Int64(count)
        }
        var iterator = body.makeAsyncIterator()
        while true {
            let next: ByteBuffer?
            do {
                next = try await iterator.next()
            } catch {
                // The connection broke: the bytes that arrived are the client's, in order; keep them.
                // Unless too few arrived to tell what they are: then they are left for the next chunk to send.
                if sniffed || pending.count >= 12 { try? await flush(pending.count) }
                throw error
            }
            guard let buffer = next else { break }
            guard Int64(pending.count + buffer.readableBytes) <= upload.length - received else {
                throw Self.pastTheEnd(length: upload.length, held: received)
            }
            pending.append(contentsOf: buffer.readableBytesView)
            while pending.count >= ResumableUploadStore.partSize { try await flush(ResumableUploadStore.partSize) }
        }
        if received == offset, pending.count < Self.minimumAppend, received + Int64(pending.count) < upload.length,
            !pending.isEmpty
        {
            var held = upload
            held.received = received
            throw Self.tooShort(held)
        }
        try await flush(pending.count)
        return received
    }

    /// Writes the photo of a complete upload — or, when that happened already, answers as it did then (the
    /// recorded request's repeatability id finds the stored answer). A refusal removes the upload; a transient
    /// failure leaves it complete, to finish again.
    func completeUpload(
        _ upload: ResumableUpload, dataContext: DataService.Context, context: BatonRequestContext,
        version: ODataVersion, slotTaken: Bool
    ) async throws -> Response {
        let media: MediaRequest = upload.request.method == "PUT" ? .replace : .create
        let intent = try Self.mediaIntent(
            media, method: upload.request.method, url: upload.request.url, headers: upload.request.fields)
        var response: Response
        if let stored = upload.media {
            var dataRequest = intent.admission
            dataRequest.media = stored
            let answer = try await execute(
                dataRequest, context: dataContext, modelOnly: false, slotTaken: slotTaken, logger: context.logger)
            response = Self.httpResponse(answer, version: version)
        } else {
            let outcome: (Response, StoredMedia)
            do {
                outcome = try await writeMedia(
                    intent, body: uploads.bytes(of: upload), expectedSize: upload.length, dataContext: dataContext,
                    context: context, version: version, slotTaken: slotTaken)
            } catch let error as ServerError where ChangeAnswer.isRefusal(status: Int(error.status.code)) {
                try await uploads.remove(upload.id)
                throw error
            }
            response = outcome.0
            let status = Int(response.status.code)
            if (200..<300).contains(status) {
                try await uploads.complete(upload.id, media: outcome.1, now: service.clock.now())
            } else if ChangeAnswer.isRefusal(status: status) {
                try await uploads.remove(upload.id)
            }
        }
        response.headers[.uploadComplete] = "?1"
        return response
    }

    /// `Upload-Offset`, `Upload-Length`, `Upload-Complete` and `Upload-Limit` of an upload, never cached.
    static func uploadFields(_ upload: ResumableUpload) -> HTTPFields {
        [
            .uploadOffset: String(upload.received), .uploadLength: String(upload.length),
            .uploadComplete: upload.received == upload.length ? "?1" : "?0",
            .uploadLimit: "max-size=\(upload.length), min-append-size=\(minimumAppend)", .cacheControl: "no-store",
        ]
    }

    /// 409 with the offset the server holds: bytes sent from anywhere else are out of order or sent again.
    static func mismatch(_ upload: ResumableUpload, sentAt offset: Int64) -> ServerError {
        var error = ServerError(
            .conflict, "MismatchingUploadOffset",
            "The server holds \(upload.received) bytes of this upload; send the bytes from there (these started at \(offset)).",
            target: "Upload-Offset")
        error.headers = [(.uploadOffset, String(upload.received)), (.uploadComplete, "?0")]
        return error
    }

    static func pastTheEnd(length: Int64, held: Int64) -> ServerError {
        var error = ServerError.badRequest(
            "The upload is \(length) bytes long (Upload-Length); these bytes go past its end.",
            target: "Upload-Offset")
        error.headers = [(.uploadOffset, String(held))]
        return error
    }

    static func tooShort(_ upload: ResumableUpload) -> ServerError {
        var error = ServerError.badRequest(
            "A chunk that does not end the upload takes at least \(minimumAppend / 1024) KiB (Upload-Limit: min-append-size).",
            target: "Upload-Offset")
        error.headers = [(.uploadOffset, String(upload.received))]
        return error
    }

    /// An RFC 8941 Boolean (`?0`, `?1`), or `nil`.
    static func structuredBoolean(_ text: String) -> Bool? {
        // By byte, around ASCII spaces and tabs only (RFC 8941): a mark combined with the digit makes it no Boolean.
        let space = { (byte: UInt8) in byte == 0x20 || byte == 0x09 }
        let bytes = Array(text.utf8.drop(while: space).reversed().drop(while: space).reversed())
        switch bytes {
        case Array("?1".utf8): return true
        case Array("?0".utf8): return false
        default: return nil
        }
    }
}
