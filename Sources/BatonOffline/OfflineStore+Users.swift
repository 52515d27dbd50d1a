import BatonFiles
import BatonOData
import BatonSQL
import BatonSQLGRDB
import BatonSecureStore
import Crypto
import Foundation
import GRDB

extension OfflineStore {
    /// Refuses when `author` still has changes on this device that are not on the server — the rule before
    /// removing a user: upload first, or discard explicitly (``discardPendingChanges(of:backupTo:key:)``).
    ///
    /// - Throws: ``OfflineError`` `PendingChanges` with a message that says how many.
    public func requireNoPendingChanges(of author: String) throws(OfflineError) {
        let count = try unsentCounts()[author] ?? 0
        guard count == 0 else { throw Self.pendingChanges(of: author, count: count) }
    }

    /// The error for `author`'s `count` changes the server does not have.
    public static func pendingChanges(of author: String, count: Int) -> OfflineError {
        OfflineError(
            .pendingChanges,
            "\(author) has \(count) change\(count == 1 ? "" : "s") on this device that the server does not have; upload first, or confirm discarding them."
        )
    }

    /// Discards `author`'s queued and archived changes after writing them, encrypted with `key` (AES-GCM), to
    /// `backupTo` — so a confirmed discard can still be recovered by an administrator. A photo's bytes go into the
    /// backup with it.
    ///
    /// - Returns: how many changes were discarded.
    @discardableResult
    public func discardPendingChanges(of author: String, backupTo url: URL, key: SymmetricKey) throws(OfflineError)
        -> Int
    {
        let entries =
            try pendingEntries().filter { $0.author == author }
            + archivedEntries().filter { $0.entry.author == author }.map(\.entry)
        guard !entries.isEmpty else { return 0 }
        struct Backup: Encodable {
            var requestID, author, device, createdAt, method, url, body, signature, entityID, signedIfMatch: String
            var ifMatch: String?
            /// A photo's SHA-256 (what its author signed) and its bytes, base64.
            var media: String?
            var photo: String?
        }
        var backup: [Backup] = []
        for entry in entries {
            var photo: String?
            if entry.media != nil {
                let files = photoFiles
                photo = try read { db in try Self.keptPhoto(entry.entityID, files: files, in: db) }.map {
                    Data($0.bytes).base64EncodedString()
                }
            }
            backup.append(
                Backup(
                    requestID: entry.requestID, author: entry.author, device: entry.device,
                    createdAt: entry.createdAt, method: entry.method, url: entry.url,
                    body: Data(entry.body).base64EncodedString(), signature: entry.signature,
                    entityID: entry.entityID, signedIfMatch: entry.signedIfMatch, ifMatch: entry.ifMatch,
                    media: entry.media, photo: photo))
        }
        do {
            let plain = try JSONEncoder().encode(backup)
            let sealed = try AES.GCM.seal(plain, using: key, authenticating: Data("baton-discarded-v1".utf8))
            guard let combined = sealed.combined else { throw OfflineError(.storage, "Cannot seal the backup.") }
            // On the disk before the changes leave the queue, whatever happens to the tablet's power.
            try AtomicFile.write(combined, to: url)
        } catch let error as OfflineError {
            throw error
        } catch {
            throw OfflineError(.storage, "Cannot write the backup of \(author)'s changes; nothing was discarded.")
        }
        let files = try write { db -> [String] in
            try db.execute(sql: #"DELETE FROM "$queue" WHERE author = ?"#, arguments: [author])
            try db.execute(sql: #"DELETE FROM "$archive" WHERE author = ?"#, arguments: [author])
            // Their photos' bytes are in the backup now.
            var files: [String] = []
            for entry in entries where entry.media != nil {
                if let file = try String.fetchOne(
                    db, sql: #"SELECT file FROM "$mediaInfo" WHERE entityID = ?"#, arguments: [entry.entityID])
                {
                    files.append(file)
                }
                try db.execute(sql: #"DELETE FROM "$mediaPart" WHERE entityID = ?"#, arguments: [entry.entityID])
                try db.execute(sql: #"DELETE FROM "$mediaInfo" WHERE entityID = ?"#, arguments: [entry.entityID])
            }
            return files
        }
        photoFiles?.remove(files)
        return entries.count
    }

    /// Whose changes a backup written by ``discardPendingChanges(of:backupTo:key:)`` holds, and how many.
    ///
    /// - Throws: ``OfflineError`` `Storage` when the backup does not open with `key` or is damaged.
    public static func describeBackup(_ sealed: Data, key: SymmetricKey) throws(OfflineError) -> (
        author: String, count: Int
    ) {
        struct Entry: Decodable { var author: String }
        do {
            let plain = try AES.GCM.open(
                AES.GCM.SealedBox(combined: sealed), using: key, authenticating: Data("baton-discarded-v1".utf8))
            let entries = try JSONDecoder().decode([Entry].self, from: plain)
            guard let author = entries.first?.author else { throw OfflineError(.storage, "The backup is empty.") }
            return (author, entries.count)
        } catch let error as OfflineError {
            throw error
        } catch {
            throw OfflineError(.storage, "The backup does not open with this device's store key, or is damaged.")
        }
    }

    /// Removes every entity, queued change, archived change, delta link and query membership (when the last user
    /// leaves the device). The store stays usable for the next onboarding.
    public func wipe() throws(OfflineError) {
        let sets = model.entitySets.map(\.name)
        try write { db in
            for set in sets { try db.execute(sql: "DELETE FROM \"\(set)\"") }
            try db.execute(
                sql:
                    #"DELETE FROM "$queue"; DELETE FROM "$archive"; DELETE FROM "$deltaLinks"; DELETE FROM "$held"; DELETE FROM "$mediaPart"; DELETE FROM "$mediaInfo""#
            )
        }
        photoFiles?.removeAll()
        user = nil
    }

    /// Closes the store and moves its files (database, write-ahead log, photos) aside, to `NAME.orphan-TIMESTAMP`, so a
    /// new store starts empty: for a device whose users all left. Nothing is deleted — the old files stay
    /// encrypted under their old store key.
    ///
    /// - Returns: where the database went, or `nil` when there was none.
    /// - Throws: ``OfflineError`` `Storage` when a file cannot be moved.
    @discardableResult
    public func setFilesAside() throws(OfflineError) -> URL? {
        close()
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        let stamp = Int(now().timeIntervalSince1970)
        for suffix in ["", "-wal", "-media"] where FileManager.default.fileExists(atPath: url.path + suffix) {
            do {
                try FileManager.default.moveItem(
                    atPath: url.path + suffix, toPath: url.path + suffix + ".orphan-\(stamp)")
            } catch {
                throw OfflineError(
                    .storage, "Cannot move the old offline store file \(url.lastPathComponent)\(suffix) aside.")
            }
        }
        try? FileManager.default.removeItem(atPath: url.path + "-shm")
        return URL(fileURLWithPath: url.path + ".orphan-\(stamp)")
    }
}

extension OfflineStore {
    /// Closes the store and deletes its files (database, write-ahead log, shared memory, photos, and the files earlier
    /// stores left aside): a device wiped by order of an administrator keeps nothing, not even under an old key.
    ///
    /// - Throws: ``OfflineError`` `Storage` when a file cannot be deleted.
    public func removeFiles() throws(OfflineError) {
        close()
        let directory = url.deletingLastPathComponent()
        let name = url.lastPathComponent
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for file in names where file == name || file.hasPrefix(name + "-") || file.hasPrefix(name + ".orphan-") {
            do {
                try FileManager.default.removeItem(at: directory.appendingPathComponent(file))
            } catch {
                throw OfflineError(.storage, "Cannot delete the offline store file \(file).")
            }
        }
    }
}

extension OfflineStore {
    /// Inserts rows in one transaction and returns how long it took — the encrypted-insert baseline of the
    /// benchmark (not for apps: the rows bypass the queue).
    public func measureBulkInsert(_ rows: [[String: PrimitiveValue]], into entitySet: String) throws(OfflineError)
        -> Duration
    {
        let translator = translator
        let clock = ContinuousClock()
        let start = clock.now
        let sql: String
        do {
            sql = try translator.insert(into: entitySet, values: [:], systemValues: [(Self.etagColumn, .null)]).sql
        } catch { throw OfflineError(.badRequest, error.message) }
        try write { db in
            let statement = try db.cachedStatement(sql: sql)
            for row in rows {
                let arguments = try translator.insertArguments(into: entitySet, values: row, systemValues: [.null])
                try statement.execute(
                    arguments: StatementArguments(arguments.map { $0.databaseValue } as [DatabaseValue]))
            }
        }
        return clock.now - start
    }
}
