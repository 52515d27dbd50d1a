import BatonOData
import BatonSQL
import Crypto
import Foundation
import HTTPTypes

extension DeviceRegistry {
    /// A backup of changes a device discarded (a user removed with changes the server never got).
    public struct DiscardedChanges: Sendable, Hashable, Codable {
        public var id: Int64
        public var device: String
        /// Whose changes they were.
        public var author: String
        /// Who was signed in when they were discarded.
        public var uploader: String
        public var count: Int
        public var receivedAt: Date
    }

    /// The additional data every backup is sealed with (as the device's offline store writes it).
    static let discardedChangesContext = Data("baton-discarded-v1".utf8)

    /// Keeps a device's backup of discarded changes. The uploader must be registered on the device, and the
    /// backup must open with the device's store key — so only that device's own backups are accepted.
    ///
    /// At most `backups.max-per-device` backups (default 100) and `backups.max-mib-per-device` MiB of them
    /// (default 16) are kept per device: past either, the backup is refused and nothing older is dropped — a
    /// backup is evidence. An admin makes room with ``deleteDiscardedChanges(_:)``.
    ///
    /// - Throws: ``ServerError`` 403 when `uploader` is not registered on `device`; 400 when the backup is not
    ///   one sealed with the device's store key or `count` is not positive; 507 `BackupsFull` past the bounds.
    public func keepDiscardedChanges(device: String, uploader: String, author: String, count: Int, sealed: Data)
        async throws -> DiscardedChanges
    {
        guard count > 0, User.isValidName(author) else {
            throw ServerError.badRequest("A backup names its author and holds at least one change.")
        }
        // The device itself (its own proof) hands back what it holds even after a revocation; a user must be
        // registered on it (checked first, so a stranger learns nothing of who was on the device).
        let byDevice = uploader == "device:\(device)"
        let key = byDevice ? try await deviceStoreKey(device) : try await storeKey(device: device, user: uploader)
        // Only changes of users who were registered on the device: nobody files a backup under another name.
        if try await !wasRegistered(device: device, user: author) {
            throw ServerError.badRequest(
                "A backup holds only the changes of users who were registered on this device; '\(author.prefix(scalars: 64))' was not."
            )
        }
        guard
            (try? AES.GCM.open(
                AES.GCM.SealedBox(combined: sealed), using: key, authenticating: Self.discardedChangesContext))
                != nil
        else {
            throw ServerError.badRequest(
                "The backup does not open with this device's store key; only the device's own backups are kept.")
        }
        let now = clock.now()
        let id = try await database.storage.write { db -> Int64 in
            // The device's row is locked first (on PostgreSQL), so two backups at once cannot both pass the bounds.
            try await db.execute("UPDATE devices SET id = id WHERE id = ?", device)
            let bounds = try await SettingsStore.current(in: db).backups
            // The device's own handback before a wipe counts apart from its users' uploads, so that users
            // filling the bound cannot hold back an admin's wipe.
            let kept = try await db.fetchOne(
                """
                SELECT COUNT(*), COALESCE(SUM(length(sealed)), 0) FROM discardedChanges
                WHERE device = ? AND uploader \(byDevice ? "=" : "<>") ?
                """, device, "device:\(device)")
            let keptCount = kept?[0].integer ?? 0
            let keptBytes = kept?[1].integer ?? 0
            guard keptCount < bounds.maxPerDevice,
                keptBytes + Int64(sealed.count) <= Int64(bounds.maxMiBPerDevice) << 20
            else {
                throw ServerError(
                    HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage"), "BackupsFull",
                    "The server keeps \(keptCount) backup(s), \(keptBytes >> 10) KiB, of device '\(device.prefix(scalars: 128))': the most it keeps (settings backups.max-per-device, backups.max-mib-per-device). The device keeps this backup and sends it again; an administrator makes room."
                )
            }
            return try await db.fetchOne(
                """
                INSERT INTO discardedChanges (device, author, uploader, count, receivedAt, sealed, sealedStoreKey)
                VALUES (?, ?, ?, ?, ?, ?, (SELECT sealedStoreKey FROM devices WHERE id = ?)) RETURNING id
                """, device, author, uploader, count, now, sealed, device)?[0].integer ?? 0
        }
        return DiscardedChanges(
            id: id, device: device, author: author, uploader: uploader, count: count, receivedAt: now)
    }

    /// Deletes kept backup `id` (an admin's decision, audited by the caller: the backup was read or exported
    /// first).
    ///
    /// - Throws: ``ServerError`` 404 for an unknown id.
    public func deleteDiscardedChanges(_ id: Int64) async throws {
        let deleted = try await database.storage.write { db in
            try await db.execute("DELETE FROM discardedChanges WHERE id = ?", id)
        }
        guard deleted > 0 else { throw ServerError.notFound("No kept backup \(id).") }
    }

    /// Kept backups, newest first: those whose device, author or uploader contains `search` (all when empty),
    /// older than backup `before` (a page's position; from the newest when `nil`), at most `limit`.
    ///
    /// - Throws: the database error, if the read fails.
    public func discardedChanges(search: String = "", before: Int64? = nil, limit: Int = .max) async throws
        -> [DiscardedChanges]
    {
        try await database.storage.read { db in
            let pattern = Self.containing(search)
            return try await db.fetchAll(
                """
                SELECT id, device, author, uploader, count, receivedAt FROM discardedChanges
                WHERE id < ? AND (device LIKE ? ESCAPE '\\' OR author LIKE ? ESCAPE '\\' OR uploader LIKE ? ESCAPE '\\')
                ORDER BY id DESC LIMIT ?
                """, before ?? .max, pattern, pattern, pattern, Int64(clamping: limit)
            ).map { row in
                DiscardedChanges(
                    id: row["id"].integer ?? 0, device: row["device"].text ?? "", author: row["author"].text ?? "",
                    uploader: row["uploader"].text ?? "", count: Int(row["count"].integer ?? 0),
                    receivedAt: row["receivedAt"].date ?? .distantPast)
            }
        }
    }

    /// The discarded changes of backup `id`, opened with the device's store key (JSON, as the device wrote them).
    ///
    /// - Throws: ``ServerError`` 404 for an unknown id; the error of a damaged backup or device record.
    public func openDiscardedChanges(_ id: Int64) async throws -> Data {
        let row = try await database.storage.read { db in
            try await db.fetchOne(
                """
                SELECT b.sealed, COALESCE(b.sealedStoreKey, d.sealedStoreKey) AS sealedStoreKey, d.id AS device
                FROM discardedChanges b
                JOIN devices d ON d.id = b.device WHERE b.id = ?
                """, id)
        }
        guard let row, let sealed = row["sealed"].bytes, let sealedKey = row["sealedStoreKey"].bytes,
            let device = row["device"].text
        else { throw ServerError.notFound("No kept backup \(id).") }
        let keyBox = try AES.GCM.SealedBox(combined: sealedKey)
        let key = SymmetricKey(data: try AES.GCM.open(keyBox, using: masterKey, authenticating: Data(device.utf8)))
        return try AES.GCM.open(
            AES.GCM.SealedBox(combined: sealed), using: key, authenticating: Self.discardedChangesContext)
    }
}
