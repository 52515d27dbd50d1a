import BatonClient
import BatonOData
import BatonSQL
import BatonSQLGRDB
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
}
