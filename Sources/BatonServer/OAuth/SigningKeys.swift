import Crypto
import Foundation
import JWTKit
import Synchronization

/// The keys that sign access tokens: ES256 private keys kept in the server's database, each sealed (AES-GCM)
/// under the master key and bound to its key id, so every instance on one database signs and verifies the same
/// tokens and no copy of the database alone can sign one.
///
/// There is a current key, which signs, and after a rotation (``rotate(database:masterKey:clock:)``, `baton-server
/// keys rotate`) the previous one, which still verifies the tokens it signed until they expire. `/oauth/jwks`
/// lists both. An instance reloads the keys when a token names a key it does not know (another instance
/// rotated) and at least every ``reloadInterval``, so it signs with the new key soon after a rotation.
final class SigningKeys: Sendable {
    /// The keys as last loaded.
    struct Loaded: Sendable {
        /// The key that signs.
        let currentID: String
        /// Every listed key, by id: the current and, after a rotation, the previous.
        let ids: [String]
        /// The keys, for signing and verifying.
        let collection: JWTKeyCollection
        /// The public keys, as `/oauth/jwks` lists them.
        let jwks: JWKS
        /// When they were loaded (the server's clock).
        let at: Date
        /// When they were loaded, in real time: unknown key ids make a reload at most every
        /// ``unknownKeyInterval``, whatever the server's clock does.
        let loadedAt = ContinuousClock.now
    }

    /// How often, at most, a token naming an unknown key makes the keys reload: a forged key id costs a database
    /// read at most this often. 250 milliseconds.
    static let unknownKeyInterval = Duration.milliseconds(250)

    let database: ServerDatabase
    let masterKey: SymmetricKey
    let clock: ServerClock
    /// Whether ``open(database:masterKey:clock:legacyPEM:)`` stored the legacy key (so its file may go).
    let importedLegacyKey: Bool
    private let loaded: Mutex<Loaded>

    /// How long an instance signs with the keys it loaded before looking for a newer one. Default: 60 seconds.
    static let reloadInterval: TimeInterval = 60

    private init(
        database: ServerDatabase, masterKey: SymmetricKey, clock: ServerClock, loaded: Loaded, imported: Bool
    ) {
        importedLegacyKey = imported
        self.database = database
        self.masterKey = masterKey
        self.clock = clock
        self.loaded = Mutex(loaded)
    }

    /// Loads the keys, creating the first one if the database has none: from `legacyPEM` (the key file of a data
    /// directory from before keys lived in the database) or new.
    ///
    /// - Throws: ``ServerSetupError`` when the master key does not open the stored keys, or the database fails.
    static func open(
        database: ServerDatabase, masterKey: SymmetricKey, clock: ServerClock, legacyPEM: String? = nil
    ) async throws(ServerSetupError) -> SigningKeys {
        do {
            let imported = try legacyPEM.map { try P256.Signing.PrivateKey(pemRepresentation: $0) }
            let first = imported ?? P256.Signing.PrivateKey()
            let sealed = try seal(first, masterKey: masterKey)
            let now = clock.now()
            let inserted = try await database.storage.write { db -> Bool in
                guard try await db.fetchOne("SELECT id FROM tokenSigningKeys LIMIT 1") == nil else { return false }
                try await db.execute(
                    "INSERT INTO tokenSigningKeys (id, sealedKey, createdAt) VALUES (?, ?, ?)", sealed.id,
                    sealed.box, now)
                return true
            }
            let loaded = try await load(database: database, masterKey: masterKey, at: now)
            // The legacy key is in the database when this start put it there, or an earlier one did (and the
            // file's deletion failed): only then may the file go.
            return SigningKeys(
                database: database, masterKey: masterKey, clock: clock, loaded: loaded,
                imported: imported != nil && (inserted || loaded.ids.contains(sealed.id)))
        } catch let error as ServerSetupError {
            throw error
        } catch {
            throw ServerSetupError("Cannot load the token-signing keys: \(error)")
        }
    }

    /// The keys as loaded now, reloaded first when older than ``reloadInterval``.
    func current() async throws -> Loaded {
        let now = clock.now()
        let loaded = self.loaded.withLock { $0 }
        guard now.timeIntervalSince(loaded.at) >= Self.reloadInterval else { return loaded }
        return try await reload(at: now)
    }

    /// The keys, reloaded when none of them has id `keyID` (a key another instance made) and the last load is at
    /// least ``unknownKeyInterval`` old.
    func verifying(keyID: String) async throws -> Loaded {
        let loaded = self.loaded.withLock { $0 }
        guard !loaded.ids.contains(keyID), ContinuousClock.now - loaded.loadedAt >= Self.unknownKeyInterval else {
            return loaded
        }
        return try await reload(at: clock.now())
    }

    private func reload(at now: Date) async throws -> Loaded {
        let fresh = try await Self.load(database: database, masterKey: masterKey, at: now)
        loaded.withLock { $0 = fresh }
        return fresh
    }

    /// Reads and opens the listed keys, newest first.
    static func load(database: ServerDatabase, masterKey: SymmetricKey, at now: Date) async throws -> Loaded {
        let rows = try await database.storage.read { db in
            try await db.fetchAll("SELECT id, sealedKey FROM tokenSigningKeys ORDER BY createdAt DESC, id LIMIT 2")
        }
        let collection = JWTKeyCollection()
        var ids: [String] = []
        var jwks: [JWK] = []
        for row in rows {
            guard let id = row["id"].text, let box = row["sealedKey"].bytes else { continue }
            let key: P256.Signing.PrivateKey
            do {
                let raw = try AES.GCM.open(
                    AES.GCM.SealedBox(combined: box), using: masterKey, authenticating: Data(context(id).utf8))
                key = try P256.Signing.PrivateKey(rawRepresentation: raw)
            } catch {
                throw ServerSetupError(
                    "The master key does not open the token-signing keys in this database; give the master-key file it was created with."
                )
            }
            let signing = try ES256PrivateKey(backing: key)
            await collection.add(ecdsa: signing, kid: JWKIdentifier(string: id))
            ids.append(id)
            let parameters = signing.publicKey.parameters
            jwks.append(
                JWK.ecdsa(
                    .es256, identifier: JWKIdentifier(string: id), x: parameters?.x, y: parameters?.y, curve: .p256))
        }
        guard let currentID = ids.first else { throw ServerSetupError("The database holds no token-signing key.") }
        return Loaded(currentID: currentID, ids: ids, collection: collection, jwks: JWKS(keys: jwks), at: now)
    }

    /// Makes a new current key; the current one becomes the previous (it still verifies its tokens), and the one
    /// before is deleted.
    ///
    /// - Returns: the new key's id.
    @discardableResult
    static func rotate(database: ServerDatabase, masterKey: SymmetricKey, clock: ServerClock) async throws -> String {
        let sealed = try seal(P256.Signing.PrivateKey(), masterKey: masterKey)
        let now = clock.now()
        try await database.storage.write { db in
            let newest = try await db.fetchAll("SELECT id FROM tokenSigningKeys ORDER BY createdAt DESC, id").compactMap
            {
                $0["id"].text
            }
            for old in newest.dropFirst() { try await db.execute("DELETE FROM tokenSigningKeys WHERE id = ?", old) }
            // Strictly later than the current one, whatever the clock says, so the order stays the rotation order.
            let after = try await db.fetchOne("SELECT max(createdAt) FROM tokenSigningKeys")?[0].real ?? 0
            try await db.execute(
                "INSERT INTO tokenSigningKeys (id, sealedKey, createdAt) VALUES (?, ?, ?)", sealed.id, sealed.box,
                max(now.timeIntervalSince1970, after + 0.001))
        }
        return sealed.id
    }

    /// A private key sealed under the master key, with its id (the thumbprint of its public key).
    static func seal(_ key: P256.Signing.PrivateKey, masterKey: SymmetricKey) throws -> (id: String, box: Data) {
        let id = DeviceRegistry.keyID(key.publicKey)
        let sealed = try AES.GCM.seal(key.rawRepresentation, using: masterKey, authenticating: Data(context(id).utf8))
        guard let box = sealed.combined else { throw ServerSetupError("Sealing the token-signing key failed.") }
        return (id, box)
    }

    /// The additional data a key is sealed with: its id, so a sealed key cannot be passed off under another id.
    static func context(_ id: String) -> String { "baton-token-signing-key:" + id }
}
