import BatonOData
import BatonSQL
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// A media upload that survives a broken connection, after the IETF's resumable uploads for HTTP
/// (draft-ietf-httpbis-resumable-upload): the client creates it with `Upload-Complete: ?0` and `Upload-Length`,
/// sends the bytes in `PATCH`es that each name the `Upload-Offset` they start at, and learns from `HEAD` how many
/// bytes the server holds; the photo is stored and its entity written when the last byte arrives.
///
/// The bytes wait in the database (`$resumablePart`, on both engines, so every instance continues every upload),
/// each part committed together with the offset it moves, so the offset the server confirms never counts a byte
/// it does not hold. A `PATCH` whose offset is not the confirmed one — a chunk sent out of order or sent again —
/// answers 409 with the right offset and changes nothing.
///
/// The entity is written exactly once: the recorded request carries a `Repeatability-Request-ID` (the client's,
/// or one the server gives it), so completing again — after a lost answer, or a creation sent again with the same
/// id — returns the stored answer instead of applying the change twice.
struct ResumableUpload: Sendable {
    /// What the creation asked for, kept to write the entity at the end: no credentials, no framing.
    struct Recorded: Codable, Sendable {
        var method: String
        var url: String
        var headers: [[String]]

        var fields: HTTPFields {
            var fields = HTTPFields()
            for pair in headers where pair.count == 2 {
                if let name = HTTPField.Name(pair[0]) { fields.append(HTTPField(name: name, value: pair[1])) }
            }
            return fields
        }
    }

    var id: String
    var owner: String
    var requestID: String
    var request: Recorded
    var length: Int64
    var received: Int64
    var parts: Int
    /// The stored bytes, once the upload completed and its entity was written.
    var media: StoredMedia?

    /// Whether `other` asks for the same as this upload: method, URL, length, and every header that makes the
    /// change what it is (the repeatability fingerprint's author, the properties, the bytes' digest and type, the
    /// device, the preconditions and the signature).
    func isSameRequest(as other: ResumableUpload) -> Bool {
        func value(_ upload: ResumableUpload, _ name: String) -> String? {
            upload.request.headers.first { $0.first.map { HeaderScanner.sameName($0, name) } ?? false }?.last
        }
        let names = [
            "slug", "content-digest", "content-type", "baton-author", "baton-device", "baton-author-signature",
            "baton-created-at", "baton-if-match", "if-match",
        ]
        return request.method == other.request.method && request.url == other.request.url && length == other.length
            && names.allSatisfy { value(self, $0) == value(other, $0) }
    }

    /// Headers never recorded: credentials (no token is ever written to the database) and the framing of the
    /// creation's own message.
    static let unrecorded: Set<String> = [
        "authorization", "proxy-authorization", "cookie", "content-length", "transfer-encoding", "connection",
        "keep-alive", "te", "upgrade", "expect", "host", "upload-complete", "upload-offset", "upload-length",
        "upload-draft-interop-version",
    ]
}

/// The uploads in progress, in the entity database.
struct ResumableUploadStore: Sendable {
    let storage: any ServerStorage

    /// The bytes of one part: a whole chunk of the tablet's (1 MiB) is one row and one commit.
    static let partSize = 1024 * 1024
    /// How long an upload nobody touches is kept (the media sweep removes it after that).
    static let expiry: TimeInterval = 24 * 3600
    static let columns = "id, owner, requestID, request, length, received, parts, media"

    static func upload(_ row: SQLRow) -> ResumableUpload? {
        guard let id = row["id"].text, let owner = row["owner"].text, let requestID = row["requestID"].text,
            let request = row["request"].text,
            let recorded = try? JSONDecoder().decode(ResumableUpload.Recorded.self, from: Data(request.utf8)),
            let length = row["length"].integer, let received = row["received"].integer,
            let parts = row["parts"].integer
        else { return nil }
        let media = row["media"].text.flatMap { try? JSONDecoder().decode(StoredMedia.self, from: Data($0.utf8)) }
        return ResumableUpload(
            id: id, owner: owner, requestID: requestID, request: recorded, length: length, received: received,
            parts: Int(parts), media: media)
    }

    /// The upload `id` of `owner` (another user's is not found).
    func find(id: String, owner: String) async throws -> ResumableUpload? {
        try await storage.read { db in
            try await db.fetchOne(
                #"SELECT \#(Self.columns) FROM "$resumable" WHERE id = ? AND owner = ?"#, id, owner
            ).flatMap(Self.upload)
        }
    }

    /// The upload `owner` created with `requestID`.
    func find(owner: String, requestID: String) async throws -> ResumableUpload? {
        try await storage.read { db in
            try await db.fetchOne(
                #"SELECT \#(Self.columns) FROM "$resumable" WHERE owner = ? AND requestID = ?"#, owner, requestID
            ).flatMap(Self.upload)
        }
    }

    /// Records a new upload unless its owner has `limit` unfinished ones (counted in the same transaction, so
    /// creations at once cannot pass it); when another request created one with the same id meanwhile, returns
    /// that one.
    ///
    /// - Throws: 429 `TooManyUploads` at the limit, or a storage error.
    func create(_ upload: ResumableUpload, now: Date, limit: Int) async throws -> ResumableUpload {
        let request = String(decoding: try JSONEncoder().encode(upload.request), as: UTF8.self)
        let created: Bool
        do {
            created = try await storage.write { db in
                let open =
                    try await db.fetchOne(
                        #"SELECT count(*) FROM "$resumable" WHERE owner = ? AND media IS NULL"#, upload.owner)?[0]
                    .integer ?? 0
                guard open < limit else { return false }
                try await db.execute(
                    #"""
                    INSERT INTO "$resumable" (id, owner, requestID, request, length, received, parts, createdAt, touchedAt)
                    VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?)
                    """#, upload.id, upload.owner, upload.requestID, request, upload.length, now, now)
                return true
            }
        } catch {
            guard let existing = try await find(owner: upload.owner, requestID: upload.requestID) else { throw error }
            return existing
        }
        guard created else {
            var error = ServerError(
                .tooManyRequests, "TooManyUploads",
                "You have \(limit) unfinished uploads; finish or DELETE one first (they expire after a day).")
            error.headers = [(.retryAfter, "30")]
            throw error
        }
        return upload
    }

    /// What ``append(_:to:at:now:)`` did.
    enum Appended {
        case appended
        /// Another request moved the offset, or the upload is gone or complete.
        case moved
        /// The upload holds ``maximumParts`` parts already.
        case tooManyParts
    }

    /// The most parts one upload may take (a 20 MiB photo takes 80 of 256 KiB; broken connections add shorter
    /// ones).
    static let maximumParts = 1024

    /// Appends `bytes` as the next part when the upload still stands at `offset`.
    func append(_ bytes: [UInt8], to id: String, at offset: Int64, now: Date) async throws -> Appended {
        try await storage.write { db in
            let moved = try await db.execute(
                #"""
                UPDATE "$resumable" SET received = received + ?, parts = parts + 1, touchedAt = ?
                WHERE id = ? AND received = ? AND media IS NULL AND parts < ?
                """#, Int64(bytes.count), now, id, offset, Self.maximumParts)
            guard moved == 1 else {
                let row = try await db.fetchOne(#"SELECT received, parts FROM "$resumable" WHERE id = ?"#, id)
                let full = row?["received"].integer == offset && (row?["parts"].integer ?? 0) >= Self.maximumParts
                return full ? .tooManyParts : .moved
            }
            guard let parts = try await db.fetchOne(#"SELECT parts FROM "$resumable" WHERE id = ?"#, id)?[0].integer
            else { return .moved }
            try await db.execute(
                #"INSERT INTO "$resumablePart" (upload, part, bytes) VALUES (?, ?, ?)"#, id, parts - 1,
                SQLValue.blob(bytes))
            return .appended
        }
    }

    /// Records that the upload completed with `media`, and drops its parts.
    func complete(_ id: String, media: StoredMedia, now: Date) async throws {
        let json = String(decoding: try JSONEncoder().encode(media), as: UTF8.self)
        try await storage.write { db in
            try await db.execute(#"UPDATE "$resumable" SET media = ?, touchedAt = ? WHERE id = ?"#, json, now, id)
            try await db.execute(#"DELETE FROM "$resumablePart" WHERE upload = ?"#, id)
        }
    }

    /// Removes an upload and its parts.
    func remove(_ id: String) async throws {
        try await storage.write { db in
            try await db.execute(#"DELETE FROM "$resumablePart" WHERE upload = ?"#, id)
            try await db.execute(#"DELETE FROM "$resumable" WHERE id = ?"#, id)
        }
    }

    /// Removes the uploads nobody touched since `cutoff`, finished or not; returns how many.
    @discardableResult
    func sweep(before cutoff: Date) async throws -> Int {
        let stale = try await storage.read { db in
            try await db.fetchAll(#"SELECT id FROM "$resumable" WHERE touchedAt < ?"#, cutoff).compactMap { $0[0].text }
        }
        for id in stale { try await remove(id) }
        return stale.count
    }

    /// The bytes received, part by part, read one at a time as they are consumed.
    func bytes(of upload: ResumableUpload) -> ReceivedParts {
        ReceivedParts(storage: storage, id: upload.id, parts: upload.parts)
    }
}

/// An upload's received bytes as a stream, one part read from the database at a time.
struct ReceivedParts: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    let storage: any ServerStorage
    let id: String
    let parts: Int

    struct AsyncIterator: AsyncIteratorProtocol {
        let storage: any ServerStorage
        let id: String
        let parts: Int
        var next = 0

        mutating func next() async throws -> ByteBuffer? {
            guard next < parts else { return nil }
            let (id, index) = (id, next)
            next += 1
            let row = try await storage.read { db in
                try await db.fetchOne(#"SELECT bytes FROM "$resumablePart" WHERE upload = ? AND part = ?"#, id, index)
            }
            guard case .blob(let bytes)? = row?[0] else {
                throw ServerError(
                    .internalServerError, "UploadDamaged", "A part of this upload is missing; start it again.")
            }
            return ByteBuffer(bytes: bytes)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(storage: storage, id: id, parts: parts) }
}
