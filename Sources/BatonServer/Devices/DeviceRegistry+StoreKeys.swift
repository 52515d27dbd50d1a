import BatonOData
import BatonSQL
import Crypto
import Foundation
import HTTPTypes

extension DeviceRegistry {
    /// A store key sealed under the master key, bound to its device id.
    func sealStoreKey(_ key: SymmetricKey, device: String) throws -> Data {
        let sealed = try AES.GCM.seal(
            key.withUnsafeBytes { Data($0) }, using: masterKey, authenticating: Data(device.utf8))
        guard let bytes = sealed.combined else {
            throw ServerError(.internalServerError, "Internal", "Sealing failed.")
        }
        return bytes
    }

    /// Removes `user` from `device` and retires their signing key there: changes they signed before still verify,
    /// anything signed later does not.
    ///
    /// - Throws: ``ServerError`` (400) for a malformed device id, (404) when the user is not registered there.
    public func unregister(device: String, user: String) async throws {
        // Checked as registering checks it, before a lookup names it in an error.
        guard Self.isValidDeviceID(device) else { throw Self.invalidDeviceID }
        let now = clock.now()
        let changed = try await database.storage.write { db -> Bool in
            let changed =
                try await db.execute(
                    #"UPDATE deviceRegistrations SET active = 0 WHERE device = ? AND "user" = ? AND active = 1"#,
                    device,
                    user) > 0
            try await db.execute(
                #"UPDATE signingKeys SET replacedAt = ? WHERE device = ? AND "user" = ? AND replacedAt IS NULL"#, now,
                device, user)
            return changed
        }
        guard changed else { throw ServerError.notFound("'\(user)' is not registered on device '\(device)'.") }
    }

    /// Whether `user` is currently registered on `device`.
    public func isRegistered(device: String, user: String) async throws -> Bool {
        try await database.storage.read { db in
            try await db.fetchOne(
                #"SELECT active FROM deviceRegistrations WHERE device = ? AND "user" = ?"#, device, user)?[
                    0
                ]
                .bool ?? false
        }
    }

    /// The device's store key, for a user registered on it.
    ///
    /// - Throws: ``ServerError`` (400) for a malformed device id; (403) when the user is not registered on the
    ///   device — whether or not the device exists, so the answer does not reveal other devices.
    public func storeKey(device: String, user: String) async throws -> SymmetricKey {
        guard Self.isValidDeviceID(device) else { throw Self.invalidDeviceID }
        let row = try await database.storage.read { db -> SQLRow? in
            try await db.fetchOne(
                """
                SELECT d.sealedStoreKey, d.revokedAt, r.active FROM devices d JOIN deviceRegistrations r
                ON r.device = d.id WHERE d.id = ? AND r."user" = ?
                """, device, user)
        }
        // A user of a revoked device (whose registration the revocation ended) is told why.
        if let row, row["revokedAt"] != .null { throw Self.revoked(device) }
        guard let row, row["active"].bool == true, let sealed = row["sealedStoreKey"].bytes else {
            throw ServerError.forbidden(
                "You are not registered on device '\(device)'. Register this device before asking for its store key.")
        }
        let box = try AES.GCM.SealedBox(combined: sealed)
        return SymmetricKey(data: try AES.GCM.open(box, using: masterKey, authenticating: Data(device.utf8)))
    }

    /// The device's store key, whatever its registrations or revocation (for the device's own, proven requests).
    func deviceStoreKey(_ device: String) async throws -> SymmetricKey {
        let sealed = try await database.storage.read { db in
            try await db.fetchOne("SELECT sealedStoreKey FROM devices WHERE id = ?", device)?["sealedStoreKey"].bytes
        }
        guard let sealed else { throw ServerError.notFound("There is no device '\(device.prefix(scalars: 128))'.") }
        let box = try AES.GCM.SealedBox(combined: sealed)
        return SymmetricKey(data: try AES.GCM.open(box, using: masterKey, authenticating: Data(device.utf8)))
    }

    /// Checks that the master key opens the store keys already sealed in the database.
    ///
    /// - Throws: ``ServerSetupError`` when it does not (the wrong master-key file).
    func checkMasterKey() async throws(ServerSetupError) {
        let row = try? await database.storage.read { db in
            try await db.fetchOne("SELECT id, sealedStoreKey FROM devices LIMIT 1")
        }
        guard let row, let device = row["id"].text, let sealed = row["sealedStoreKey"].bytes else { return }
        guard let box = try? AES.GCM.SealedBox(combined: sealed),
            (try? AES.GCM.open(box, using: masterKey, authenticating: Data(device.utf8))) != nil
        else {
            throw ServerSetupError(
                "The master key does not open the device store keys in this database; give the master-key file it was created with."
            )
        }
    }

    /// Every signing key `user` had on `device`, oldest first.
    public func signingKeys(device: String, user: String) async throws -> [SigningKey] {
        try await database.storage.read { db in
            try await db.fetchAll(
                #"SELECT id, publicKey, registeredAt, replacedAt FROM signingKeys WHERE device = ? AND "user" = ? ORDER BY registeredAt"#,
                device, user
            ).map { row in
                SigningKey(
                    id: row["id"].text ?? "",
                    publicKey: try P256.Signing.PublicKey(x963Representation: row["publicKey"].bytes ?? []),
                    registeredAt: row["registeredAt"].date ?? .distantPast, replacedAt: row["replacedAt"].date)
            }
        }
    }
}
