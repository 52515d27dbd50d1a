import BatonOData
import BatonSQL
import BatonSQLGRDB
import Crypto
import Foundation
import GRDB

extension OfflineStore {
    /// Resolves an archived change by sending it again over the server's current version (its ETag): the
    /// author's change wins. Only its author may do this (the change is signed again, with a new request id).
    ///
    /// - Throws: ``OfflineError`` `NotFound` for an unknown entry, `BadRequest` when the current user is not
    ///   the author.
    public func resend(_ archived: ArchiveEntry) throws(OfflineError) {
        let user = try requireUser()
        let entry = try archivedEntry(archived.entry.requestID)
        guard entry.entry.author == user.name else {
            throw OfflineError(
                .badRequest,
                "Only \(entry.entry.author) can send their change again; the others can take the server's version.")
        }
        let base = entry.serverVersion?["@odata.etag"]?.stringValue
        try write { db in
            try self.dropArchived(entry, rebasingOn: base, in: db)
            try self.enqueue(
                method: entry.entry.method, url: entry.entry.url, body: entry.entry.body,
                ifMatch: entry.entry.method == "POST" ? nil : base, entityID: entry.entry.entityID, user: user,
                media: entry.entry.media, sequence: entry.entry.sequence, in: db)
        }
    }

    /// The archived change's entity as the server has it and as the device has it, property by property, in
    /// the model's order: what a person compares before choosing how to resolve a conflict. `server` is nil
    /// for every property when the server no longer has the entity (or did not say); `mine` is nil when the
    /// device deleted it.
    ///
    /// - Throws: ``OfflineError`` `NotFound` for an entry no longer archived, `Server` for a server version
    ///   that does not match the model.
    public func conflict(_ archived: ArchiveEntry) throws(OfflineError) -> [ConflictField] {
        let entry = try archivedEntry(archived.entry.requestID)
        let (_, type, _) = try parseID(entry.entry.entityID)
        let server = try serverValues(entry, type: type)
        // The device's version is what the change sets over the device's copy (which, once the change is in the
        // archive, a download may have replaced with the server's); a deletion has none.
        var mine = entry.entry.method == "DELETE" ? nil : try read(entry.entry.entityID).first?.values
        var changed: Set<String> = []
        let body = (try? JSONValue(parsing: entry.entry.body))?.objectMembers ?? []
        for (name, json) in body {
            guard let property = type.properties.first(where: { $0.name == name }) else { continue }
            changed.insert(name)
            if entry.entry.method != "DELETE", let value = try? PrimitiveValue(json: json, for: property) {
                mine = mine ?? [:]
                mine?[name] = value
            }
        }
        return type.properties.map { property in
            ConflictField(
                property: property.name, server: server.map { $0[property.name] ?? .null },
                mine: mine.map { $0[property.name] ?? .null }, changedHere: changed.contains(property.name))
        }
    }

    /// The archived server version decoded by the model; nil when there is none.
    func serverValues(_ entry: ArchiveEntry, type: EntityType) throws(OfflineError) -> [String: PrimitiveValue]? {
        guard let server = entry.serverVersion else { return nil }
        var decoded: [String: PrimitiveValue] = [:]
        for property in type.properties {
            guard let json = server[property.name] else { continue }
            do { decoded[property.name] = try PrimitiveValue(json: json, for: property) } catch {
                throw OfflineError(.server, "The archived server version cannot be read: \(error.description)")
            }
        }
        return decoded
    }

    /// Resolves an archived change by taking the server's version: the change is dropped and the entity on
    /// the device becomes the server's (or goes, when the server said it has none: 404 or 410). A refusal that
    /// came without the server's version (403, 400) only drops the change; the next download brings the
    /// server's version of the entity.
    public func takeServerVersion(_ archived: ArchiveEntry) throws(OfflineError) {
        let entry = try archivedEntry(archived.entry.requestID)
        let (set, type, key) = try parseID(entry.entry.entityID)
        let values = try serverValues(entry, type: type)
        let etag = entry.serverVersion?["@odata.etag"]?.stringValue
        let translator = translator
        let gone = entry.status == 404 || entry.status == 410
        try write { db in
            try self.dropArchived(entry, rebasingOn: etag, in: db)
            guard values != nil || gone else { return }
            let delete = try translator.delete(from: set.name, key: key)
            try db.execute(sql: delete.sql, arguments: delete.statementArguments)
            if let values {
                let insert = try translator.insert(
                    into: set.name, values: values, systemValues: [(Self.etagColumn, etag.map(SQLValue.text) ?? .null)])
                try db.execute(sql: insert.sql, arguments: insert.statementArguments)
            }
        }
    }

    /// Resolves an archived change by editing it: `values` are applied on the device and queued as a new
    /// change over the server's current version. Only the author may do this.
    public func edit(_ archived: ArchiveEntry, values: [String: PrimitiveValue]) throws(OfflineError) {
        let user = try requireUser()
        let entry = try archivedEntry(archived.entry.requestID)
        guard entry.entry.author == user.name else {
            throw OfflineError(.badRequest, "Only \(entry.entry.author) can edit their change.")
        }
        let (set, type, key) = try parseID(entry.entry.entityID)
        let (body, checked) = try body(values, type: type, mode: .merge)
        let changed = try Self.withoutKey(checked, key: key)
        let update: SQLQuery
        do { update = try translator.update(set.name, key: key, values: changed) } catch {
            throw OfflineError(.badRequest, error.message)
        }
        let base = entry.serverVersion?["@odata.etag"]?.stringValue
        try write { db in
            try self.dropArchived(entry, rebasingOn: base, in: db)
            try db.execute(sql: update.sql, arguments: update.statementArguments)
            try self.enqueue(
                method: "PATCH", url: entry.entry.entityID, body: body, ifMatch: base, entityID: entry.entry.entityID,
                user: user, sequence: entry.entry.sequence, in: db)
        }
    }

    func archivedEntry(_ requestID: String) throws(OfflineError) -> ArchiveEntry {
        guard let entry = try archivedEntries().first(where: { $0.entry.requestID == requestID }) else {
            throw OfflineError(.notFound, "That archived change is no longer in the archive.")
        }
        return entry
    }

    /// Removes one archive entry (never the others). The signed-in user's own changes queued behind it for the
    /// same entity now build on `etag`, signed anew (they chose that version); other authors' changes keep the
    /// version they signed, and go to the archive for their author if it no longer holds.
    func dropArchived(_ entry: ArchiveEntry, rebasingOn etag: String?, in db: Database) throws {
        try db.execute(sql: #"DELETE FROM "$archive" WHERE requestID = ?"#, arguments: [entry.entry.requestID])
        guard let user else { return }
        let later = try Row.fetchAll(
            db, sql: #"SELECT * FROM "$queue" WHERE entityID = ? AND method != 'POST' AND author = ?"#,
            arguments: [entry.entry.entityID, user.name]
        ).map(Self.entry)
        for queued in later {
            let signedIfMatch = etag ?? "*"
            let message = ChangeSignature.canonicalMessage(
                requestID: queued.requestID, method: queued.method, url: queued.url,
                bodySHA256: SHA256.hash(data: queued.body).lowercaseHex, createdAt: queued.createdAt,
                device: queued.device, author: queued.author, ifMatch: signedIfMatch)
            let signature = try user.signingKey.signature(for: Data(message)).rawRepresentation.base64URLEncoded
            try db.execute(
                sql: #"UPDATE "$queue" SET ifMatch = ?, signedIfMatch = ?, signature = ? WHERE seq = ?"#,
                arguments: [etag, signedIfMatch, signature, queued.sequence])
        }
    }
}
