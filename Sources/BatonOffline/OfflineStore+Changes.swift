import BatonOData
import BatonSQL
import BatonSQLGRDB
import Crypto
import Foundation
import GRDB

extension OfflineStore {
    /// Creates an entity on the device at once and queues its upload, signed by the current user.
    ///
    /// The values are checked as the server checks a `POST` body, by the same code and in the same words: each
    /// property the model declares, its type and facets (`MaxLength`, `Precision`, `Scale`, nullability), every
    /// required property present, before any SQL runs. A property the model gives a CSDL `DefaultValue`
    /// (`Status`: `final`) gets it when left out, as on the server. Values of server-kept (computed) properties are
    /// refused (the server would ignore them); the device shows its own until a download brings the server's.
    ///
    /// - Returns: the entity's id (canonical URL).
    /// - Throws: ``OfflineError`` `BadRequest` naming the property (``OfflineError/target``) for a value the model
    ///   refuses — nothing is written — and `NotOpen` without a user.
    @discardableResult
    public func create(in entitySet: String, values: [String: PrimitiveValue]) throws(OfflineError) -> String {
        let user = try requireUser()
        let (set, type) = try entitySetAndType(entitySet)
        let (body, checked) = try body(values, type: type, mode: .create)
        let key = try Self.key(of: type, in: checked)
        let id = ResourcePath.canonicalURL(entitySet: set.name, key: key)
        var row = checked
        for (name, value) in localServerValues(type: type, author: user.name) { row[name] = value }
        let insert: SQLQuery
        do {
            insert = try translator.insert(into: set.name, values: row, systemValues: [(Self.etagColumn, .null)])
        } catch {
            throw OfflineError(.badRequest, error.message)
        }
        try write { db in
            guard try self.storedRow(set: set, type: type, key: key, in: db) == nil else {
                throw OfflineError(.badRequest, "\(id) already exists on this device.")
            }
            try db.execute(sql: insert.sql, arguments: insert.statementArguments)
            try self.enqueue(method: "POST", url: set.name, body: body, ifMatch: nil, entityID: id, user: user, in: db)
        }
        return id
    }

    /// Changes properties of an entity on the device at once and queues the change (PATCH). The values are
    /// checked as the server checks a `PATCH` body (see ``create(in:values:)``); a key property cannot change.
    ///
    /// - Throws: ``OfflineError`` `BadRequest` naming the property, `NotFound` when the device does not have the
    ///   entity, `NotOpen` without a user.
    public func update(_ id: String, values: [String: PrimitiveValue]) throws(OfflineError) {
        let user = try requireUser()
        let (set, type, key) = try parseID(id)
        let (body, checked) = try body(values, type: type, mode: .merge)
        var changed = try Self.withoutKey(checked, key: key)
        for (name, value) in localServerValues(type: type, author: user.name) where name != "UploadedBy" {
            changed[name] = value
        }
        let update: SQLQuery
        do {
            update = try translator.update(set.name, key: key, values: changed, systemValues: [])
        } catch {
            throw OfflineError(.badRequest, error.message)
        }
        try write { db in
            let etag = try self.etag(of: id, set: set, type: type, key: key, in: db)
            try db.execute(sql: update.sql, arguments: update.statementArguments)
            try self.enqueue(
                method: "PATCH", url: id, body: body, ifMatch: etag, entityID: id, user: user, in: db)
        }
    }

    /// Deletes an entity on the device at once and queues the deletion.
    public func delete(_ id: String) throws(OfflineError) {
        let user = try requireUser()
        let (set, type, key) = try parseID(id)
        let delete: SQLQuery
        do { delete = try translator.delete(from: set.name, key: key) } catch {
            throw OfflineError(.badRequest, error.message)
        }
        try write { db in
            let etag = try self.etag(of: id, set: set, type: type, key: key, in: db)
            try db.execute(sql: delete.sql, arguments: delete.statementArguments)
            try self.enqueue(method: "DELETE", url: id, body: [], ifMatch: etag, entityID: id, user: user, in: db)
        }
    }

    // MARK: The queue

    /// Every queued change, oldest first.
    public func pendingEntries() throws(OfflineError) -> [QueueEntry] {
        try read { db in try Row.fetchAll(db, sql: #"SELECT * FROM "$queue" ORDER BY seq"#).map(Self.entry) }
    }

    /// Queued changes per author ("2 changes by alice").
    public func pendingCounts() throws(OfflineError) -> [String: Int] {
        try read { db in
            var counts: [String: Int] = [:]
            for row in try Row.fetchAll(db, sql: #"SELECT author, COUNT(*) AS n FROM "$queue" GROUP BY author"#) {
                counts[row["author"]] = row["n"]
            }
            return counts
        }
    }

    /// Each author's changes on this device that the server does not have: queued ones and those in the error
    /// archive (what must not leave the device unseen).
    public func unsentCounts() throws(OfflineError) -> [String: Int] {
        try read { db in
            var counts: [String: Int] = [:]
            let sql = #"""
                SELECT author, COUNT(*) AS n FROM (SELECT author FROM "$queue" UNION ALL SELECT author FROM "$archive")
                GROUP BY author
                """#
            for row in try Row.fetchAll(db, sql: sql) { counts[row["author"]] = row["n"] }
            return counts
        }
    }

    /// Changes the server refused, oldest first.
    public func archivedEntries() throws(OfflineError) -> [ArchiveEntry] {
        try read { db in
            try Row.fetchAll(db, sql: #"SELECT * FROM "$archive" ORDER BY seq"#).map { row in
                ArchiveEntry(
                    entry: try Self.entry(row), status: row["status"], code: row["code"], message: row["message"],
                    serverVersion: try (row["serverVersion"] as String?).map { try JSONValue(parsing: Array($0.utf8)) })
            }
        }
    }

    /// Queues a change signed by `user`; `sequence` puts it at a given place in the queue (a resolved archive
    /// entry takes its old place), otherwise at the end.
    ///
    /// For a photo, `media` is the SHA-256 of its bytes (kept in the store): the author signs it in place of the
    /// body's, and the body — the photo's properties — as the `Slug` it is sent in.
    func enqueue(
        method: String, url: String, body: [UInt8], ifMatch: String?, entityID: String, user: OfflineUser,
        media: String? = nil, sequence: Int64? = nil, in db: Database
    ) throws {
        let requestID = UUID().uuidString.lowercased()
        let createdAt = ODataDateTimeOffset(now()).description
        let digest = media ?? SHA256.hash(data: body).lowercaseHex
        let signedIfMatch = method == "POST" ? "" : (ifMatch ?? "*")
        let message = ChangeSignature.canonicalMessage(
            requestID: requestID, method: method, url: url, bodySHA256: digest, createdAt: createdAt, device: deviceID,
            author: user.name, ifMatch: signedIfMatch, slug: media.map { _ in Self.slug(body) })
        let signature = try user.signingKey.signature(for: Data(message)).rawRepresentation.base64URLEncoded
        try db.execute(
            sql: """
                INSERT INTO "$queue" (seq, requestID, author, device, createdAt, method, url, body, ifMatch, signature,
                    entityID, signedIfMatch, media)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                sequence, requestID, user.name, deviceID, createdAt, method, url, Data(body), ifMatch, signature,
                entityID, signedIfMatch, media,
            ])
    }

    static func entry(_ row: Row) throws -> QueueEntry {
        QueueEntry(
            sequence: row["seq"], requestID: row["requestID"], author: row["author"], device: row["device"],
            createdAt: row["createdAt"], method: row["method"], url: row["url"], body: Array(row["body"] as Data),
            ifMatch: row["ifMatch"], signedIfMatch: row["signedIfMatch"], signature: row["signature"],
            entityID: row["entityID"], media: row["media"])
    }

    // MARK: Helpers

    nonisolated func entitySetAndType(_ name: String) throws(OfflineError) -> (EntitySet, EntityType) {
        guard let set = model.entitySet(named: name), let type = model.entityType(of: set) else {
            throw OfflineError(.badRequest, "The model has no entity set '\(name)'.")
        }
        return (set, type)
    }

    nonisolated func parseID(_ id: String) throws(OfflineError) -> (EntitySet, EntityType, [KeyValue]) {
        let parsed: ODataURL
        do { parsed = try ODataURL(parsing: id, model: model) } catch {
            throw OfflineError(.badRequest, error.description)
        }
        guard case .resource(let segments) = parsed.path, segments.count == 2,
            case .entitySet(let name) = segments[0], case .key(let key) = segments[1]
        else { throw OfflineError(.badRequest, "'\(id)' does not address one entity.") }
        let (set, type) = try entitySetAndType(name)
        return (set, type, key)
    }

    /// The JSON body of a change and the values it sets, checked by the server's own payload rules
    /// (`EntityPayload`): the same checks, the same words, defaults applied on a create. A computed property is
    /// refused, where the server ignores it: the app learns at once that its value would be lost.
    func body(_ values: [String: PrimitiveValue], type: EntityType, mode: EntityPayload.Mode) throws(OfflineError)
        -> (body: [UInt8], values: [String: PrimitiveValue])
    {
        for property in type.properties where property.isComputed && values[property.name] != nil {
            throw OfflineError(
                .badRequest, "'\(property.name)' is kept by the server and cannot be set.", target: property.name)
        }
        var members: [(String, JSONValue)] = []
        for property in type.properties where !property.isComputed {
            if let value = values[property.name] { members.append((property.name, value.json(as: property.type))) }
        }
        // Names the model does not declare go into the body too, so the payload check refuses them in its words.
        for (name, value) in values.sorted(by: { $0.key < $1.key }) where type.property(named: name) == nil {
            members.append((name, value.json(as: value.literalType ?? .string)))
        }
        let body = JSONValue.object(members).serializedBytes
        do {
            let payload = try EntityPayload(decoding: body, as: type, mode: mode)
            return (body, payload.values)
        } catch {
            throw OfflineError(.badRequest, error.description, target: error.target)
        }
    }

    /// `values` without the entity's key properties, which a change may repeat but not alter. Values compare by
    /// their canonical text — strings by Unicode scalar, so a look-alike (`K` and the Kelvin sign) is a change.
    ///
    /// - Throws: ``OfflineError`` `BadRequest` naming the key property a change would alter.
    static func withoutKey(_ values: [String: PrimitiveValue], key: [KeyValue]) throws(OfflineError)
        -> [String: PrimitiveValue]
    {
        var values = values
        for part in key {
            guard let given = values.removeValue(forKey: part.name) else { continue }
            guard given.isIdentical(to: part.value) else {
                throw OfflineError(
                    .badRequest, "Key property '\(part.name)' cannot change; create a new entity instead.",
                    target: part.name)
            }
        }
        return values
    }

    /// What the server will set, shown locally until a download brings the server's values.
    func localServerValues(type: EntityType, author: String) -> [String: PrimitiveValue] {
        var values: [String: PrimitiveValue] = [:]
        if type.property(named: "CheckedBy")?.isComputed == true { values["CheckedBy"] = .string(author) }
        if type.property(named: "ChangedAt")?.isComputed == true {
            values["ChangedAt"] = .dateTimeOffset(ODataDateTimeOffset(now()))
        }
        return values
    }

    /// The stored row of an entity (its key and `$etag`), or nil when the device does not have it.
    func storedRow(set: EntitySet, type: EntityType, key: [KeyValue], in db: Database) throws -> Row? {
        var options = QueryOptions()
        options.filter = ODataExpression.conjunction(ODataExpression.keyConditions(key, of: type))
        options.select = type.key
        options.top = 1
        let query = try translator.select(from: set.name, options: options, extraColumns: [Self.etagColumn])
        return try Row.fetchOne(db, sql: query.sql, arguments: query.statementArguments)
    }

    /// The server ETag of an entity on the device; `NotFound` when the device does not have it.
    func etag(of id: String, set: EntitySet, type: EntityType, key: [KeyValue], in db: Database) throws -> String? {
        guard let row = try storedRow(set: set, type: type, key: key, in: db) else {
            throw OfflineError(.notFound, "\(id) is not on this device.")
        }
        return row[Self.etagColumn]
    }

    func write<T>(_ body: (Database) throws -> T) throws(OfflineError) -> T {
        let database = try requireDatabase()
        do {
            return try database.write(body)
        } catch let error as OfflineError {
            throw error
        } catch let error as DatabaseError {
            throw Self.writeFailure(error)
        } catch {
            throw OfflineError(.storage, "Cannot write the offline store: \(error)")
        }
    }

    /// A failed write, in words a person can act on: a full disk, a failing one and a damaged store are said so.
    /// The transaction was rolled back, so nothing of it is kept — except after a failed `fsync` of its commit,
    /// which a crash before the next write may still bring back, and the words say so.
    static func writeFailure(_ error: DatabaseError) -> OfflineError {
        switch (error.resultCode, error.extendedResultCode.rawValue) {
        case (.SQLITE_FULL, _):
            OfflineError(
                .storage, "The device's storage is full: nothing was written. Free some space, then try again.")
        case (_, IOError.data):
            OfflineError(
                .storage,
                "The offline store is damaged or was altered (a page failed its check): nothing was written."
            )
        case (_, IOError.fsync):
            OfflineError(
                .storage,
                "The device's storage failed to confirm a write: it may not have been kept. Look before recording it again; if it keeps failing, the device needs service."
            )
        case (.SQLITE_IOERR, _):
            OfflineError(
                .storage,
                "The device's storage failed while writing: nothing was written. Try again; if it keeps failing, the device needs service."
            )
        default:
            OfflineError(.storage, "Cannot write the offline store: \(error)")
        }
    }

    func read<T>(_ body: (Database) throws -> T) throws(OfflineError) -> T {
        let database = try requireDatabase()
        do {
            return try database.read(body)
        } catch let error as OfflineError {
            throw error
        } catch {
            throw OfflineError(.storage, "Cannot read the offline store: \(error)")
        }
    }
}
