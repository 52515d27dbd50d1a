import BatonClient
import BatonOData
import BatonSQL
import Crypto
import Foundation
import GRDB

/// A photo's bytes as the device holds them.
public struct LocalPhoto: Sendable, Hashable {
    /// The photo entity's id (canonical URL), such as `CheckPhotos(…)`.
    public var id: String
    public var bytes: [UInt8]
    public var kind: ImageKind
    /// The SHA-256 of the bytes, lower-case hex: what the author signed and the server keeps.
    public var sha256: String
}

extension OfflineStore {
    /// The bytes of one photo part in the store (the store's pages are encrypted with AES-GCM under the store key,
    /// so a part is too).
    static let photoPartSize = 256 * 1024

    /// Takes a photo offline: removes the location its Exif records (as the server would), keeps its bytes in the
    /// store in parts, creates its entity (`TakenBy` the current user, `SHA256`, `Size`, `ContentType` as the
    /// server will keep them) and queues its upload, signed by the current user over the bytes' SHA-256 and the
    /// properties — so the next user on shift can upload it on the author's behalf.
    ///
    /// A photo belongs to an entity the device has (its `CheckID`'s check): the upload sends it after that
    /// entity's own queued changes, and a refused check takes its photos to the error archive with it.
    ///
    /// - Parameters:
    ///   - bytes: a JPEG, PNG or HEIC file, at most `maximumSize` bytes.
    ///   - entitySet: the media entity set (`CheckPhotos`).
    ///   - values: the photo's properties: `CheckID`, optionally `ID` (a new one by default), `TakenAt` (now by
    ///     default) and `Caption`.
    ///   - maximumSize: the most bytes a photo may take (the server's limit; 20 MiB by default).
    /// - Returns: the photo entity's id.
    /// - Throws: ``OfflineError`` `BadRequest` for bytes that are not such an image, too many bytes, a property the
    ///   model refuses or a check the device does not have — nothing is written — and `NotOpen` without a user.
    @discardableResult
    public func takePhoto(
        _ bytes: [UInt8], in entitySet: String = "CheckPhotos", values: [String: PrimitiveValue],
        maximumSize: Int = 20 * 1024 * 1024
    ) throws(OfflineError) -> String {
        let user = try requireUser()
        let (set, type) = try entitySetAndType(entitySet)
        guard type.hasStream else {
            throw OfflineError(.badRequest, "\(set.name) holds no photos (its entity type has no media).")
        }
        guard !bytes.isEmpty else { throw OfflineError(.badRequest, "The photo is empty.") }
        guard bytes.count <= maximumSize else {
            throw OfflineError(.badRequest, "A photo may take at most \(maximumSize / (1024 * 1024)) MiB.")
        }
        var prepared = bytes
        let kind: ImageKind
        do {
            kind = try ImageHead.scrubFile(&prepared)
        } catch .notAnImage {
            throw OfflineError(.badRequest, "The file is not a JPEG, PNG or HEIC image.")
        } catch .truncated {
            throw OfflineError(.badRequest, "The image is truncated: it ends before its end.")
        } catch {
            throw OfflineError(
                .badRequest,
                "The image's metadata lies beyond its first \(ImageHead.length / 1024) KiB, where its location cannot be removed; export it again."
            )
        }
        let sha256 = SHA256.hash(data: prepared).lowercaseHex
        var properties = values
        if properties["ID"] == nil, type.property(named: "ID")?.type == .guid { properties["ID"] = .guid(UUID()) }
        if properties["TakenAt"] == nil, type.property(named: "TakenAt")?.type == .dateTimeOffset {
            properties["TakenAt"] = .dateTimeOffset(ODataDateTimeOffset(now()))
        }
        let (body, checked) = try body(properties, type: type, mode: .create)
        let key = try Self.key(of: type, in: checked)
        let id = ResourcePath.canonicalURL(entitySet: set.name, key: key)
        var row = checked
        for (name, value) in localServerValues(type: type, author: user.name) { row[name] = value }
        if type.property(named: "TakenBy")?.isComputed == true { row["TakenBy"] = .string(user.name) }
        if type.property(named: "ContentType")?.isComputed == true { row["ContentType"] = .string(kind.rawValue) }
        if type.property(named: "Size")?.isComputed == true { row["Size"] = .integer(Int64(prepared.count)) }
        if type.property(named: "SHA256")?.isComputed == true { row["SHA256"] = .string(sha256) }
        let insert: SQLQuery
        do {
            insert = try translator.insert(into: set.name, values: row, systemValues: [(Self.etagColumn, .null)])
        } catch {
            throw OfflineError(.badRequest, error.message)
        }
        let principals = try principalIDs(of: type, set: set, values: checked)
        // The bytes go to their sealed file first; the transaction that names it commits after, or the file goes.
        let files = try requirePhotoFiles()
        let file = try files.write(prepared)
        do {
            try recordPhoto(
                insert: insert, set: set, type: type, key: key, id: id, principals: principals, body: body,
                user: user, file: file, sha256: sha256, kind: kind, size: prepared.count)
        } catch {
            files.remove([file])
            throw error
        }
        return id
    }

    /// The transaction of ``takePhoto(_:in:values:maximumSize:)``: the entity, its bytes' file named, its upload
    /// queued.
    func recordPhoto(
        insert: SQLQuery, set: EntitySet, type: EntityType, key: [KeyValue], id: String, principals: [String],
        body: [UInt8], user: OfflineUser, file: String, sha256: String, kind: ImageKind, size: Int
    ) throws(OfflineError) {
        try write { db in
            guard try self.storedRow(set: set, type: type, key: key, in: db) == nil else {
                throw OfflineError(.badRequest, "\(id) already exists on this device.")
            }
            for principal in principals {
                let (principalSet, principalType, principalKey) = try self.parseID(principal)
                guard
                    try self.storedRow(set: principalSet, type: principalType, key: principalKey, in: db) != nil
                else {
                    throw OfflineError(.badRequest, "This device has no \(principal); a photo belongs to one it has.")
                }
            }
            try db.execute(sql: insert.sql, arguments: insert.statementArguments)
            _ = try Self.storePhoto(
                file: file, size: size, id: id, sha256: sha256, kind: kind, pending: true, at: self.now(), in: db)
            try self.enqueue(
                method: "POST", url: set.name, body: body, ifMatch: nil, entityID: id, user: user, media: sha256,
                in: db)
        }
    }

    /// The ids of the entities a media entity's required single-valued navigations lead to (a photo's check).
    nonisolated func principalIDs(of type: EntityType, set: EntitySet, values: [String: PrimitiveValue])
        throws(OfflineError) -> [String]
    {
        var ids: [String] = []
        for navigation in type.navigationProperties
        where !navigation.isCollection && !navigation.isNullable && !navigation.referentialConstraints.isEmpty {
            guard let principalSet = model.targetSet(of: navigation, from: set),
                let principalType = model.entityType(of: principalSet)
            else { continue }
            var key: [KeyValue] = []
            for name in principalType.key {
                guard
                    let constraint = navigation.referentialConstraints.first(where: { $0.referencedProperty == name }),
                    let value = values[constraint.property], !value.isNull
                else {
                    throw OfflineError(
                        .badRequest, "A photo needs its \(navigation.name) ('\(name)').", target: navigation.name)
                }
                key.append(KeyValue(name: name, value: value))
            }
            ids.append(ResourcePath.canonicalURL(entitySet: principalSet.name, key: key))
        }
        return ids
    }

    /// The entities a queued photo belongs to (its check), from its properties; none when they cannot be read.
    nonisolated func principalIDs(ofQueued id: String, body: [UInt8]) -> [String] {
        guard let (set, type, _) = try? parseID(id) else { return [] }
        var values: [String: PrimitiveValue] = [:]
        for (name, json) in (try? JSONValue(parsing: body))?.objectMembers ?? [] {
            if let property = type.property(named: name), let value = try? PrimitiveValue(json: json, for: property) {
                values[name] = value
            }
        }
        return (try? principalIDs(of: type, set: set, values: values)) ?? []
    }

    /// Names a photo's sealed file (``PhotoFiles``), replacing any kept before; returns the file it replaced, to
    /// remove once the transaction committed.
    static func storePhoto(
        file: String, size: Int, id: String, sha256: String, kind: ImageKind, pending: Bool, at date: Date,
        in db: Database
    ) throws -> String? {
        let replaced = try String.fetchOne(
            db, sql: #"SELECT file FROM "$mediaInfo" WHERE entityID = ?"#, arguments: [id])
        try db.execute(sql: #"DELETE FROM "$mediaPart" WHERE entityID = ?"#, arguments: [id])
        try db.execute(
            sql: """
                INSERT OR REPLACE INTO "$mediaInfo" (entityID, sha256, size, contentType, pending, lastUsed, file)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [id, sha256, size, kind.rawValue, pending, date.timeIntervalSince1970, file])
        return replaced
    }

    /// A kept photo's bytes, checked against their SHA-256; `nil` when the device does not hold them. From its
    /// sealed file, or from parts in the store for a photo kept before photos had files.
    static func keptPhoto(_ id: String, files: PhotoFiles?, in db: Database) throws -> LocalPhoto? {
        guard let info = try Row.fetchOne(db, sql: #"SELECT * FROM "$mediaInfo" WHERE entityID = ?"#, arguments: [id])
        else { return nil }
        var bytes: [UInt8] = []
        if let file = info["file"] as String? {
            guard let files else { throw OfflineError(.notOpen, "The store is closed.") }
            bytes = try files.read(file)
        } else {
            for part in try Data.fetchAll(
                db, sql: #"SELECT bytes FROM "$mediaPart" WHERE entityID = ? ORDER BY part"#, arguments: [id])
            {
                bytes += part
            }
        }
        let sha256: String = info["sha256"]
        guard SHA256.hash(data: bytes).lowercaseHex == sha256, let kind = ImageKind(contentType: info["contentType"])
        else {
            throw OfflineError(.storage, "The photo \(id) on this device is damaged.")
        }
        return LocalPhoto(id: id, bytes: bytes, kind: kind, sha256: sha256)
    }

    func requirePhotoFiles() throws(OfflineError) -> PhotoFiles {
        guard let photoFiles else { throw OfflineError(.notOpen, "The store is closed; unlock the device first.") }
        return photoFiles
    }

    /// Removes the photo files no row names (see ``PhotoFiles/sweep(keeping:olderThan:)``).
    func sweepPhotoFiles() throws(OfflineError) {
        guard let photoFiles else { return }
        let named = try read { db in
            Set(try String.fetchAll(db, sql: #"SELECT file FROM "$mediaInfo" WHERE file IS NOT NULL"#))
        }
        photoFiles.sweep(keeping: named)
    }

    /// A photo's bytes: from the device (a photo taken here, or one opened before), or else downloaded now — a
    /// download brings photos' properties only — checked against the SHA-256 the entity names and kept in the
    /// photo cache, which holds at most ``photoCacheLimit`` bytes of photos already on the server (the least
    /// recently opened go first; photos waiting for their upload never do).
    ///
    /// - Throws: ``OfflineError`` `NotFound` for an unknown photo, `Offline` when it must be downloaded and the
    ///   server cannot be reached, `Server` when the server's bytes do not match the photo's SHA-256.
    public func photo(_ id: String, using session: AuthorizedSession?) async throws(OfflineError) -> LocalPhoto {
        let now = now()
        let files = try requirePhotoFiles()
        if let kept = try write({ db -> LocalPhoto? in
            guard let photo = try Self.keptPhoto(id, files: files, in: db) else { return nil }
            try db.execute(
                sql: #"UPDATE "$mediaInfo" SET lastUsed = ? WHERE entityID = ?"#,
                arguments: [now.timeIntervalSince1970, id])
            return photo
        }) {
            return kept
        }
        guard let entity = try read(id).first else { throw OfflineError(.notFound, "This device has no \(id).") }
        guard case .string(let sha256)? = entity.values["SHA256"] else {
            throw OfflineError(.notFound, "\(id) has no bytes.")
        }
        guard let session else {
            throw OfflineError(
                .offline, "\(id) is not on this device yet; it downloads when the server can be reached.")
        }
        guard let url = URL(string: session.configuration.odataServiceRoot + id + "/$value") else {
            throw OfflineError(.badRequest, "\(id) is not a URL.")
        }
        let response: ClientResponse
        let opened = closings
        do {
            response = try await session.send(ClientRequest(url: url, timeout: requestTimeout))
        } catch {
            throw Self.offlineError(error, doing: "download the photo")
        }
        // Closed meanwhile (locked, or another user's store now): nothing of this download is kept.
        guard closings == opened, photoFiles != nil else {
            throw OfflineError(.notOpen, "The store was closed while \(id) downloaded; nothing was kept.")
        }
        guard response.status == 200 else {
            throw OfflineError(.server, "The server could not send \(id) (HTTP \(response.status)).")
        }
        guard SHA256.hash(data: response.body).lowercaseHex == sha256,
            let kind = ImageKind(sniffing: response.body)
        else {
            throw OfflineError(.server, "The server's bytes for \(id) do not match its SHA-256; nothing was kept.")
        }
        let limit = photoCacheLimit
        let file = try files.write(response.body)
        let gone: [String]
        do {
            gone = try write { db in
                let replaced = try Self.storePhoto(
                    file: file, size: response.body.count, id: id, sha256: sha256, kind: kind, pending: false,
                    at: now, in: db)
                return try Self.evictPhotos(over: limit, keeping: id, in: db) + (replaced.map { [$0] } ?? [])
            }
        } catch {
            files.remove([file])
            throw error
        }
        files.remove(gone)
        return LocalPhoto(id: id, bytes: response.body, kind: kind, sha256: sha256)
    }

    /// Removes the least recently opened photos already on the server until those left hold at most `limit`
    /// bytes (`keeping` stays whatever its size). Returns the files of the photos that went, to remove once the
    /// transaction committed.
    static func evictPhotos(over limit: Int, keeping: String, in db: Database) throws -> [String] {
        let cached = try Row.fetchAll(
            db, sql: #"SELECT entityID, size, file FROM "$mediaInfo" WHERE pending = 0 ORDER BY lastUsed DESC"#)
        var total = 0
        var files: [String] = []
        for row in cached {
            let id: String = row["entityID"]
            total += row["size"] as Int
            guard total > limit, id != keeping else { continue }
            try db.execute(sql: #"DELETE FROM "$mediaPart" WHERE entityID = ?"#, arguments: [id])
            try db.execute(sql: #"DELETE FROM "$mediaInfo" WHERE entityID = ?"#, arguments: [id])
            if let file = row["file"] as String? { files.append(file) }
        }
        return files
    }

    /// How many bytes of photos this device keeps besides the ones waiting for their upload.
    public func photoCacheBytes() throws(OfflineError) -> Int {
        try read { db in
            try Int.fetchOne(db, sql: #"SELECT COALESCE(SUM(size), 0) FROM "$mediaInfo" WHERE pending = 0"#) ?? 0
        }
    }

    /// Sets ``photoCacheLimit`` (bytes of photos already on the server the device keeps; default 200 MiB).
    public func setPhotoCacheLimit(_ bytes: Int) throws(OfflineError) {
        photoCacheLimit = max(0, bytes)
        let limit = photoCacheLimit
        let gone = try write { db in try Self.evictPhotos(over: limit, keeping: "", in: db) }
        photoFiles?.remove(gone)
    }

    // MARK: Upload

    /// Uploads the queued photos that may go now, oldest first, each in a request of its own (its bytes are the
    /// body): one whose check still has changes queued waits for them; one whose check was refused goes to the
    /// error archive with it; another author's waits unless `allowOnBehalf`. Returns whether some must wait for a
    /// later upload (the server was busy midway), and how many photos went.
    func uploadPhotos(
        user: OfflineUser, session: AuthorizedSession, allowOnBehalf: Bool, into report: inout UploadReport
    ) async throws(OfflineError) -> (retryLater: Bool, uploaded: Int) {
        var uploaded = 0
        let candidates = try read { db in
            try Row.fetchAll(db, sql: #"SELECT * FROM "$queue" WHERE media IS NOT NULL ORDER BY seq"#).map(Self.entry)
        }
        for entry in candidates {
            guard entry.author == user.name || allowOnBehalf else { continue }
            let principals = principalIDs(ofQueued: entry.entityID, body: entry.body)
            let (waiting, refused) = try read { db -> (Bool, String?) in
                for principal in principals {
                    if let code = try String.fetchOne(
                        db, sql: #"SELECT code FROM "$archive" WHERE entityID = ? LIMIT 1"#, arguments: [principal])
                    {
                        return (false, "\(principal) was refused (\(code))")
                    }
                    if try Bool.fetchOne(
                        db, sql: #"SELECT EXISTS (SELECT 1 FROM "$queue" WHERE entityID = ? AND seq < ?)"#,
                        arguments: [principal, entry.sequence]) == true
                    {
                        return (true, nil)
                    }
                }
                let earlier = try Bool.fetchOne(
                    db,
                    sql:
                        #"SELECT EXISTS (SELECT 1 FROM "$queue" WHERE entityID = ? AND seq < ?) OR EXISTS (SELECT 1 FROM "$archive" WHERE entityID = ?)"#,
                    arguments: [entry.entityID, entry.sequence, entry.entityID])
                return (earlier == true, nil)
            }
            if let refused {
                let response = BatchResponse(
                    id: String(entry.sequence), status: 424,
                    body: .object([
                        (
                            "error",
                            .object([
                                ("code", .string("PrincipalRefused")),
                                ("message", .string("The photo was not sent: \(refused); it stays here with it.")),
                            ])
                        )
                    ]))
                report.archived.append(try archive(entry, response: response, serverVersion: nil))
                continue
            }
            if waiting { continue }
            try markFirstSent([entry])
            let response: ClientResponse
            do {
                response = try await sendPhoto(entry, user: user, session: session)
            } catch {
                if error.code == .offline { throw error }
                return (true, uploaded)
            }
            switch response.status {
            case 200..<300:
                let body = try? JSONValue(parsing: response.body)
                let answer = BatchResponse(
                    id: String(entry.sequence), status: response.status,
                    headers: response.headers.map { ($0.name, $0.value) },
                    body: body)
                try applied([(entry, answer)])
                try write { db in
                    try db.execute(
                        sql: #"UPDATE "$mediaInfo" SET pending = 0 WHERE entityID = ?"#, arguments: [entry.entityID])
                }
                report.uploaded.append(entry)
                uploaded += 1
            case let status where !ChangeAnswer.isRefusal(status: status):
                return (true, uploaded)
            default:
                let answer = BatchResponse(
                    id: String(entry.sequence), status: response.status,
                    headers: response.headers.map { ($0.name, $0.value) },
                    body: try? JSONValue(parsing: response.body))
                report.archived.append(try archive(entry, response: answer, serverVersion: nil))
            }
        }
        return (false, uploaded)
    }

    /// Sends one queued photo in a resumable upload (the server's `$uploads`, after the IETF's resumable uploads
    /// for HTTP): its properties in `Slug`, its author's signature when someone else uploads it, its bytes in
    /// chunks of ``photoChunkSize``, each at the offset the server confirmed. Returns the server's answer to the
    /// photo (its entity, or why it was refused).
    ///
    /// The upload is found again by the queued change's `Repeatability-Request-ID`: after a broken connection —
    /// in this call, or at a later sync after the app stopped — the creation sent again answers with the offset
    /// the server holds, or with the photo's stored answer when its last chunk arrived, so no byte is sent twice
    /// that the server confirmed and the photo is written once.
    func sendPhoto(_ entry: QueueEntry, user: OfflineUser, session: AuthorizedSession) async throws(OfflineError)
        -> ClientResponse
    {
        let files = try requirePhotoFiles()
        guard let photo = try read({ db in try Self.keptPhoto(entry.entityID, files: files, in: db) }) else {
            throw OfflineError(.storage, "The bytes of \(entry.entityID) are missing on this device.")
        }
        let firstSent = try read { db in
            try String.fetchOne(
                db, sql: #"SELECT firstSentAt FROM "$queue" WHERE seq = ?"#, arguments: [entry.sequence])
        }
        let bytes = photo.bytes
        var headers: [(String, String)] = [
            ("Content-Type", photo.kind.rawValue), ("Slug", Self.slug(entry.body)),
            // RFC 9530: the server keeps nothing that arrives other than sent.
            ("Content-Digest", "sha-256=:" + Data(SHA256.hash(data: bytes)).base64EncodedString() + ":"),
            ("Repeatability-Request-ID", entry.requestID),
            ("Repeatability-First-Sent", firstSent ?? Self.imfFixdate(now())), ("Prefer", "return=minimal"),
            ("Baton-Device", entry.device), ("Upload-Complete", "?0"), ("Upload-Length", String(bytes.count)),
        ]
        if entry.author != user.name {
            headers += [
                ("Baton-Author", entry.author), ("Baton-Author-Signature", entry.signature),
                ("Baton-Created-At", entry.createdAt), ("Baton-If-Match", entry.signedIfMatch),
            ]
        }
        guard let url = URL(string: session.configuration.odataServiceRoot + entry.url) else {
            throw OfflineError(.server, "The server's OData service root is not a URL.")
        }
        let chunk = photoChunkSize
        // The creation carries the first chunk: a photo of one chunk takes one request. Sent again without a body,
        // it asks where the upload stands (the server answers with its offset, or with the photo when every byte
        // is there), so no byte the server confirmed is sent twice.
        let create = ClientRequest(
            method: "POST", url: url, headers: headers, body: Array(bytes.prefix(chunk)), timeout: requestTimeout)
        var ask = create
        ask.body = []
        var response = try await sendBusy(create, doing: "upload the photo", session: session)
        var location: URL?
        var setbacks = 0
        while true {
            // An upload in progress says `Upload-Complete: ?0` and where it stands; any other answer is the
            // photo's (its entity, or why it was refused).
            guard response.header("Upload-Complete") == "?0",
                let offset = response.header("Upload-Offset").flatMap(Int.init), (0...bytes.count).contains(offset)
            else { return response }
            if let created = response.header("Location").flatMap({ URL(string: $0) }) { location = created }
            guard let location, offset < bytes.count else {
                response = try await askAgain(ask, setbacks: &setbacks, session: session)
                continue
            }
            let end = min(bytes.count, offset + chunk)
            let patch = ClientRequest(
                method: "PATCH", url: location,
                headers: [
                    ("Content-Type", "application/partial-upload"), ("Upload-Offset", String(offset)),
                    ("Upload-Complete", end == bytes.count ? "?1" : "?0"),
                ], body: Array(bytes[offset..<end]), timeout: requestTimeout)
            do {
                response = try await sendBusy(patch, doing: "upload the photo", session: session)
                // Gone (it expired, or was removed): the creation starts it again, or finds the photo's answer.
                if response.status == 404 { response = try await askAgain(ask, setbacks: &setbacks, session: session) }
            } catch {
                response = try await askAgain(ask, setbacks: &setbacks, session: session, after: error)
            }
        }
    }

    /// After a broken connection, a lost upload or an answer with no place to go on: asks again where the upload
    /// stands (`ask`, the creation without a body), a few times in one upload.
    func askAgain(
        _ ask: ClientRequest, setbacks: inout Int, session: AuthorizedSession, after error: OfflineError? = nil
    ) async throws(OfflineError) -> ClientResponse {
        setbacks += 1
        guard setbacks < Self.busyAttempts else {
            throw error ?? OfflineError(.offline, "The photo's upload did not get through; it is retried later.")
        }
        return try await sendBusy(ask, doing: "upload the photo", session: session)
    }

    /// Sends `request`, waiting and sending it again while the server answers 429 (a few times).
    func sendBusy(_ request: ClientRequest, doing what: String, session: AuthorizedSession)
        async throws(OfflineError) -> ClientResponse
    {
        var attempt = 1
        while true {
            let response: ClientResponse
            do {
                response = try await session.send(request)
            } catch {
                throw Self.offlineError(error, doing: what)
            }
            guard response.status == 429, attempt < Self.busyAttempts else { return response }
            attempt += 1
            do {
                try await Task.sleep(for: .seconds(Self.retryAfter(response)))
            } catch {
                throw OfflineError(.offline, "The upload was stopped; the photo stays on this device.")
            }
        }
    }

    /// The `Slug` a photo's properties travel in: their JSON, percent-encoded (every byte but ASCII letters and
    /// digits), exactly as its author signed it.
    static func slug(_ body: [UInt8]) -> String {
        String(decoding: body, as: UTF8.self).addingPercentEncoding(withAllowedCharacters: slugAllowed) ?? ""
    }

    static let slugAllowed = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
}
