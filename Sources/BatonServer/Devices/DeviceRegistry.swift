import Crypto
import Foundation
import GRDB

/// Devices, the users registered on them, every signing key each (device, user) pair ever had, and each
/// device's offline-store key.
///
/// The store key is 256 random bits created at the device's first registration, kept sealed (AES-GCM under
/// the server's master key, bound to the device id) and handed only to users registered on that device.
public struct DeviceRegistry: Sendable {
    let database: ServerDatabase
    let clock: ServerClock
    let masterKey: SymmetricKey

    /// A user's registration on a device.
    public struct Registration: Sendable, Hashable, Codable {
        /// The device id.
        public var device: String
        /// The registered user.
        public var user: String
        /// The id of the current signing key (a SHA-256 thumbprint).
        public var keyID: String
        /// When the current key was registered.
        public var registeredAt: Date
    }

    /// A signing key a (device, user) pair had, and when it was replaced.
    public struct SigningKey: Sendable, Hashable {
        /// The key id.
        public var id: String
        /// The public key.
        public var publicKey: P256.Signing.PublicKey
        /// When it was registered.
        public var registeredAt: Date
        /// When a newer key replaced it; `nil` for the current key.
        public var replacedAt: Date?

        public static func == (lhs: SigningKey, rhs: SigningKey) -> Bool {
            lhs.id == rhs.id && lhs.registeredAt == rhs.registeredAt && lhs.replacedAt == rhs.replacedAt
        }

        public func hash(into hasher: inout Hasher) { hasher.combine(id) }
    }

    /// Whether `id` is an acceptable device id: 1–128 of letters, digits, `.`, `_`, `-`, `:`.
    static func isValidDeviceID(_ id: String) -> Bool {
        (1...128).contains(id.count)
            && id.unicodeScalars.allSatisfy {
                $0.isASCII
                    && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-:".unicodeScalars.contains($0))
            }
    }

    static let invalidDeviceID = ServerError.badRequest(
        "Device id is not valid: use 1 to 128 letters, digits, '.', '_', '-' or ':'.", target: "device")

    /// Reads a P-256 public key from base64 or base64url: X9.63 (65 bytes), raw (64 bytes) or DER
    /// SubjectPublicKeyInfo.
    ///
    /// - Throws: ``ServerError`` (400) when it is none of these.
    static func parsePublicKey(_ text: String) throws(ServerError) -> P256.Signing.PublicKey {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        guard text.count <= 400, let data = Data(base64Encoded: base64) else {
            throw .badRequest("publicKey must be a base64-encoded P-256 public key.", target: "publicKey")
        }
        if let key = try? P256.Signing.PublicKey(x963Representation: data) { return key }
        if let key = try? P256.Signing.PublicKey(rawRepresentation: data) { return key }
        if let key = try? P256.Signing.PublicKey(derRepresentation: data) { return key }
        throw .badRequest(
            "publicKey is not a P-256 public key (X9.63, raw or DER SubjectPublicKeyInfo).", target: "publicKey")
    }

    /// The id of a key: base64url of the SHA-256 of its X9.63 form.
    static func keyID(_ key: P256.Signing.PublicKey) -> String {
        Data(SHA256.hash(data: key.x963Representation)).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Registers `user` on `device` with a signing key. The first registration creates the device and its store
    /// key. A new key replaces the previous one, which stays on record with the time it was replaced.
    ///
    /// - Throws: ``ServerError`` (400) for a bad device id or key.
    public func register(device: String, user: String, publicKey: P256.Signing.PublicKey) async throws -> Registration {
        guard Self.isValidDeviceID(device) else { throw Self.invalidDeviceID }
        let now = clock.now()
        let keyID = Self.keyID(publicKey)
        let storeKey = SymmetricKey(size: .bits256)
        let sealed = try AES.GCM.seal(
            storeKey.withUnsafeBytes { Data($0) }, using: masterKey, authenticating: Data(device.utf8))
        guard let sealedBytes = sealed.combined else {
            throw ServerError(.internalServerError, "Internal", "Sealing failed.")
        }
        return try await database.pool.write { db in
            try db.execute(
                sql: "INSERT INTO devices (id, sealedStoreKey, createdAt) VALUES (?, ?, ?) ON CONFLICT(id) DO NOTHING",
                arguments: [device, sealedBytes, now.timeIntervalSince1970])
            let current = try Row.fetchOne(
                db,
                sql: "SELECT id, registeredAt FROM signingKeys WHERE device = ? AND user = ? AND replacedAt IS NULL",
                arguments: [device, user])
            var registeredAt = now
            if let current, current["id"] as String == keyID {
                registeredAt = Date(timeIntervalSince1970: current["registeredAt"])
            } else {
                try db.execute(
                    sql: "UPDATE signingKeys SET replacedAt = ? WHERE device = ? AND user = ? AND replacedAt IS NULL",
                    arguments: [now.timeIntervalSince1970, device, user])
                try db.execute(
                    sql: """
                        INSERT INTO signingKeys (id, device, user, publicKey, registeredAt) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT(id) DO UPDATE SET device = excluded.device, user = excluded.user,
                            registeredAt = excluded.registeredAt, replacedAt = NULL
                        """,
                    arguments: [keyID, device, user, publicKey.x963Representation, now.timeIntervalSince1970])
            }
            try db.execute(
                sql: """
                    INSERT INTO deviceRegistrations (device, user, registeredAt, active) VALUES (?, ?, ?, 1)
                    ON CONFLICT(device, user) DO UPDATE SET active = 1
                    """,
                arguments: [device, user, now.timeIntervalSince1970])
            return Registration(device: device, user: user, keyID: keyID, registeredAt: registeredAt)
        }
    }

    /// Removes `user` from `device`. Their key history stays, so changes they signed still verify.
    ///
    /// - Throws: ``ServerError`` (404) when the user is not registered there.
    public func unregister(device: String, user: String) async throws {
        let changed = try await database.pool.write { db -> Bool in
            try db.execute(
                sql: "UPDATE deviceRegistrations SET active = 0 WHERE device = ? AND user = ? AND active = 1",
                arguments: [device, user])
            return db.changesCount > 0
        }
        guard changed else { throw ServerError.notFound("'\(user)' is not registered on device '\(device)'.") }
    }

    /// Whether `user` is currently registered on `device`.
    public func isRegistered(device: String, user: String) async throws -> Bool {
        try await database.pool.read { db in
            try Bool.fetchOne(
                db, sql: "SELECT active FROM deviceRegistrations WHERE device = ? AND user = ?",
                arguments: [device, user]) ?? false
        }
    }

    /// The device's store key, for a user registered on it.
    ///
    /// - Throws: ``ServerError`` (403) when the user is not registered on the device — whether or not the
    ///   device exists, so the answer does not reveal other devices.
    public func storeKey(device: String, user: String) async throws -> SymmetricKey {
        let sealed = try await database.pool.read { db -> Data? in
            try Data.fetchOne(
                db,
                sql: """
                    SELECT d.sealedStoreKey FROM devices d JOIN deviceRegistrations r ON r.device = d.id
                    WHERE d.id = ? AND r.user = ? AND r.active = 1
                    """,
                arguments: [device, user])
        }
        guard let sealed else {
            throw ServerError.forbidden(
                "You are not registered on device '\(device)'. Register this device before asking for its store key.")
        }
        let box = try AES.GCM.SealedBox(combined: sealed)
        return SymmetricKey(data: try AES.GCM.open(box, using: masterKey, authenticating: Data(device.utf8)))
    }

    /// Every signing key `user` had on `device`, oldest first.
    public func signingKeys(device: String, user: String) async throws -> [SigningKey] {
        try await database.pool.read { db in
            try Row.fetchAll(
                db,
                sql:
                    "SELECT id, publicKey, registeredAt, replacedAt FROM signingKeys WHERE device = ? AND user = ? ORDER BY registeredAt",
                arguments: [device, user]
            ).map { row in
                SigningKey(
                    id: row["id"], publicKey: try P256.Signing.PublicKey(x963Representation: row["publicKey"] as Data),
                    registeredAt: Date(timeIntervalSince1970: row["registeredAt"]),
                    replacedAt: (row["replacedAt"] as Double?).map(Date.init(timeIntervalSince1970:)))
            }
        }
    }
}

// MARK: Discarded changes

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
    /// - Throws: ``ServerError`` 403 when `uploader` is not registered on `device`; 400 when the backup is not
    ///   one sealed with the device's store key or `count` is not positive.
    public func keepDiscardedChanges(device: String, uploader: String, author: String, count: Int, sealed: Data)
        async throws -> DiscardedChanges
    {
        guard count > 0, !author.isEmpty, author.count <= 64 else {
            throw ServerError.badRequest("A backup names its author and holds at least one change.")
        }
        let key = try await storeKey(device: device, user: uploader)
        guard
            (try? AES.GCM.open(
                AES.GCM.SealedBox(combined: sealed), using: key, authenticating: Self.discardedChangesContext))
                != nil
        else {
            throw ServerError.badRequest(
                "The backup does not open with this device's store key; only the device's own backups are kept.")
        }
        let now = clock.now()
        let id = try await database.pool.write { db -> Int64 in
            try db.execute(
                sql: """
                    INSERT INTO discardedChanges (device, author, uploader, count, receivedAt, sealed)
                    VALUES (?, ?, ?, ?, ?, ?)
                    """,
                arguments: [device, author, uploader, count, now.timeIntervalSince1970, sealed])
            return db.lastInsertedRowID
        }
        return DiscardedChanges(
            id: id, device: device, author: author, uploader: uploader, count: count, receivedAt: now)
    }

    /// Every kept backup, newest first.
    ///
    /// - Throws: the database error, if the read fails.
    public func discardedChanges() async throws -> [DiscardedChanges] {
        try await database.pool.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT id, device, author, uploader, count, receivedAt FROM discardedChanges ORDER BY id DESC"
            ).map { row in
                DiscardedChanges(
                    id: row["id"], device: row["device"], author: row["author"], uploader: row["uploader"],
                    count: row["count"], receivedAt: Date(timeIntervalSince1970: row["receivedAt"]))
            }
        }
    }

    /// The discarded changes of backup `id`, opened with the device's store key (JSON, as the device wrote them).
    ///
    /// - Throws: ``ServerError`` 404 for an unknown id; the error of a damaged backup or device record.
    public func openDiscardedChanges(_ id: Int64) async throws -> Data {
        let row = try await database.pool.read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT b.sealed, d.sealedStoreKey, d.id AS device FROM discardedChanges b
                    JOIN devices d ON d.id = b.device WHERE b.id = ?
                    """,
                arguments: [id])
        }
        guard let row, let sealed = row["sealed"] as Data?, let sealedKey = row["sealedStoreKey"] as Data?,
            let device = row["device"] as String?
        else { throw ServerError.notFound("No kept backup \(id).") }
        let keyBox = try AES.GCM.SealedBox(combined: sealedKey)
        let key = SymmetricKey(data: try AES.GCM.open(keyBox, using: masterKey, authenticating: Data(device.utf8)))
        return try AES.GCM.open(
            AES.GCM.SealedBox(combined: sealed), using: key, authenticating: Self.discardedChangesContext)
    }
}
