import BatonOData
import BatonSQL
import Crypto
import Foundation
import HTTPTypes

extension DeviceRegistry {
    /// A device as the cockpit shows it.
    public struct DeviceSummary: Sendable {
        public var id: String
        public var createdAt: Date
        /// The last time the device asked for its store key or registered a user, and the app version it sent.
        public var lastSeenAt: Date?
        public var appVersion: String?
        public var revokedAt: Date?
        public var wipeOrderedAt: Date?
        /// When the device reported the wipe done.
        public var wipedAt: Date?
        /// Its users: name, whether still registered, since when.
        public var users: [(name: String, active: Bool, registeredAt: Date)]
        /// Every signing key it held: id, user, registered, retired.
        public var keys: [(id: String, user: String, registeredAt: Date, replacedAt: Date?)]
    }

    /// A `LIKE` pattern for values that contain `search` (with `ESCAPE '\\'`), escaped by code point: a `%` with a
    /// combining mark after it is one `Character` that is not `%`, which a comparison of `Character`s would leave a
    /// wildcard.
    static func containing(_ search: String) -> String {
        var pattern = String.UnicodeScalarView()
        pattern.append("%")
        for scalar in search.unicodeScalars {
            if scalar == "\\" || scalar == "%" || scalar == "_" { pattern.append("\\") }
            pattern.append(scalar)
        }
        pattern.append("%")
        return String(pattern)
    }

    /// How many devices' ids contain `search` (all when empty).
    public func deviceCount(search: String = "") async throws -> Int {
        try await database.storage.read { db in
            let count = try await db.fetchOne(
                #"SELECT COUNT(*) FROM devices WHERE id LIKE ? ESCAPE '\'"#, Self.containing(search))
            return Int(count?[0].integer ?? 0)
        }
    }

    /// Devices whose id contains `search` (all when empty), the most recently seen first: `limit` of them from
    /// `offset` (a page). Three statements, each bounded by the page, however many devices there are.
    public func summaries(search: String = "", limit: Int = 500, offset: Int = 0) async throws -> [DeviceSummary] {
        try await database.storage.read { db in
            // The page, as the devices' query and as a subquery of the users' and keys' (one shape each, so
            // PostgreSQL prepares three statements whatever the page).
            let page = """
                SELECT id FROM devices WHERE id LIKE ? ESCAPE '\\'
                ORDER BY coalesce(lastSeenAt, createdAt) DESC, id LIMIT ? OFFSET ?
                """
            let arguments: [SQLValue] = [
                .text(Self.containing(search)), .integer(Int64(limit)), .integer(Int64(offset)),
            ]
            let devices = try await db.fetchAll(
                """
                SELECT d.id, d.createdAt, d.lastSeenAt, d.appVersion, d.revokedAt, d.wipeOrderedAt, d.wipedAt
                FROM devices d JOIN (\(page)) p ON p.id = d.id ORDER BY coalesce(d.lastSeenAt, d.createdAt) DESC, d.id
                """, arguments)
            var users: [String: [(name: String, active: Bool, registeredAt: Date)]] = [:]
            for row in try await db.fetchAll(
                """
                SELECT r.device, r."user", r.active, r.registeredAt FROM deviceRegistrations r
                JOIN (\(page)) p ON p.id = r.device ORDER BY r.registeredAt
                """, arguments)
            {
                users[row["device"].text ?? "", default: []].append(
                    (row["user"].text ?? "", row["active"].bool ?? false, row["registeredAt"].date ?? .distantPast))
            }
            var keys: [String: [(id: String, user: String, registeredAt: Date, replacedAt: Date?)]] = [:]
            for row in try await db.fetchAll(
                """
                SELECT k.device, k.id, k."user", k.registeredAt, k.replacedAt FROM signingKeys k
                JOIN (\(page)) p ON p.id = k.device ORDER BY k.registeredAt
                """, arguments)
            {
                keys[row["device"].text ?? "", default: []].append(
                    (
                        row["id"].text ?? "", row["user"].text ?? "", row["registeredAt"].date ?? .distantPast,
                        row["replacedAt"].date
                    ))
            }
            return devices.map { row in
                let id = row["id"].text ?? ""
                return DeviceSummary(
                    id: id, createdAt: row["createdAt"].date ?? .distantPast, lastSeenAt: row["lastSeenAt"].date,
                    appVersion: row["appVersion"].text, revokedAt: row["revokedAt"].date,
                    wipeOrderedAt: row["wipeOrderedAt"].date, wipedAt: row["wipedAt"].date, users: users[id] ?? [],
                    keys: keys[id] ?? [])
            }
        }
    }

    /// Takes a device out of service: the tokens of every sign-in it used stop at once, its store key is no
    /// longer released, nobody can register on it again, its registrations end and its signing keys retire
    /// (changes signed there are no longer accepted on anyone's behalf).
    ///
    /// - Returns: `false` when the device was revoked already (nothing changes).
    /// - Throws: ``ServerError`` (404) for an unknown device.
    @discardableResult
    public func revoke(device: String) async throws -> Bool {
        let now = clock.now()
        let outcome = try await database.storage.write { db -> Bool? in
            guard
                try await db.execute("UPDATE devices SET revokedAt = ? WHERE id = ? AND revokedAt IS NULL", now, device)
                    > 0
            else { return try await db.fetchOne("SELECT 1 FROM devices WHERE id = ?", device) != nil ? false : nil }
            try await Self.endUsers(of: device, at: now, in: db)
            return true
        }
        database.statusChanged()
        guard let outcome else { throw ServerError.notFound("There is no device '\(device.prefix(scalars: 128))'.") }
        return outcome
    }

    /// Ends everyone's use of a device, inside a write: registrations end, signing keys retire, and the sign-ins
    /// (token families) the device used stop at once (the family is checked with every token).
    static func endUsers(of device: String, at now: Date, in db: any SQLConnection) async throws {
        try await db.execute("UPDATE deviceRegistrations SET active = 0 WHERE device = ?", device)
        try await db.execute(
            "UPDATE signingKeys SET replacedAt = ? WHERE device = ? AND replacedAt IS NULL", now, device)
        try await db.execute(
            """
            UPDATE refreshTokens SET revokedAt = ? WHERE revokedAt IS NULL
            AND family IN (SELECT family FROM deviceTokenFamilies WHERE device = ?)
            """, now, device)
    }

    /// Orders a device to wipe itself at its next contact (``status(device:)`` tells it).
    ///
    /// - Throws: ``ServerError`` (404) for an unknown device.
    public func orderWipe(device: String) async throws {
        let now = clock.now()
        let found = try await database.storage.write { db -> Bool in
            // A new order stands even after an earlier wipe was reported; an order still pending keeps its time.
            try await db.execute(
                """
                UPDATE devices SET wipeOrderedAt = CASE
                    WHEN wipeOrderedAt IS NULL OR (wipedAt IS NOT NULL AND wipedAt >= wipeOrderedAt) THEN ?
                    ELSE wipeOrderedAt END
                WHERE id = ?
                """, now, device) > 0
        }
        guard found else { throw ServerError.notFound("There is no device '\(device.prefix(scalars: 128))'.") }
    }

    /// What an admin ordered for a device, and which of the users ever registered on it were disabled or deleted
    /// since.
    public struct Status: Sendable, Hashable {
        public var revoked: Bool
        public var wipeOrdered: Bool
        /// When the device reported its wipe done.
        public var wipedAt: Date?
        /// Users once registered on the device who are now disabled or deleted, by name.
        public var withdrawnUsers: [String]
    }

    /// The status of a device; `nil` for an unknown device.
    public func status(device: String) async throws -> Status? {
        try await database.storage.read { db in
            guard
                let row = try await db.fetchOne(
                    "SELECT revokedAt, wipeOrderedAt, wipedAt FROM devices WHERE id = ?", device)
            else { return nil }
            let withdrawn = try await db.fetchAll(
                """
                SELECT r."user" FROM deviceRegistrations r LEFT JOIN users u ON u.name = r."user"
                WHERE r.device = ? AND (u.name IS NULL OR u.disabled <> 0) ORDER BY r."user"
                """, device
            ).compactMap { $0[0].text }
            // A wipe reported after the order settles it; a new order after that stands.
            let ordered = row["wipeOrderedAt"].real
            let wiped = row["wipedAt"].real
            return Status(
                revoked: row["revokedAt"] != .null, wipeOrdered: ordered.map { $0 > (wiped ?? -1) } ?? false,
                wipedAt: row["wipedAt"].date, withdrawnUsers: withdrawn)
        }
    }

    /// Records that a device reported its wipe done: its registrations end and its users' signing keys retire
    /// (their pending changes were uploaded or backed up first), and a wipe order before it is settled.
    ///
    /// - Throws: ``ServerError`` (404) for an unknown device.
    ///
    /// Only a device that was revoked or has a wipe order pending may report: otherwise nothing changes
    /// (`false`), so a report can neither settle an order it did not carry out nor shut a working device's users
    /// out.
    @discardableResult
    public func noteWiped(device: String) async throws -> Bool {
        let now = clock.now()
        let outcome = try await database.storage.write { db -> Bool? in
            guard
                let row = try await db.fetchOne(
                    "SELECT revokedAt, wipeOrderedAt, wipedAt FROM devices WHERE id = ?", device)
            else { return nil }
            let ordered = row["wipeOrderedAt"].real.map { $0 > (row["wipedAt"].real ?? -1) } ?? false
            guard row["revokedAt"] != .null || ordered else { return false }
            // Nobody is on the device any more: its sign-ins end, its device key is forgotten (no more proofs), and
            // the next user to join re-keys it (a new device key and store key).
            try await db.execute("UPDATE devices SET wipedAt = ?, publicKey = NULL WHERE id = ?", now, device)
            try await Self.endUsers(of: device, at: now, in: db)
            return true
        }
        database.statusChanged()
        guard let outcome else { throw ServerError.notFound("There is no device '\(device.prefix(scalars: 128))'.") }
        return outcome
    }

    /// Checks a device's own proof (``DeviceRequestProof``): a signature by the device key the server holds for
    /// `device`, over the request, made at most ``DeviceRequestProof/maximumAge`` (300 s) before the server's
    /// clock and at most ``DeviceRequestProof/maximumLead`` (30 s) after it.
    ///
    /// Each proof is taken once: every proof accepted is kept (`deviceProofs`, by device and time) until the window
    /// has passed it, so a replay is refused while it could still be in the window, and proofs may arrive in any
    /// order.
    ///
    /// - Throws: ``ServerError`` 401 `InvalidDeviceProof` for an unknown device, a device without a key, a proof
    ///   out of its window, a proof taken before or a signature that does not verify — one message for all, so a
    ///   caller learns nothing about which devices exist.
    func verifyProof(_ header: String, device: String, method: String, path: String, body: [UInt8])
        async throws
    {
        var refused = ServerError.unauthorized(
            "The device proof does not verify: sign the request with this device's key, with the current time.")
        refused.code = "InvalidDeviceProof"
        let now = Int64((clock.now().timeIntervalSince1970 * 1000).rounded(.down))
        guard Self.isValidDeviceID(device), let proof = DeviceRequestProof.parse(header),
            proof.time >= now - Int64(DeviceRequestProof.maximumAge * 1000),
            proof.time <= now + Int64(DeviceRequestProof.maximumLead * 1000),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: proof.signature)
        else { throw refused }
        let stored = try await database.storage.read { db in
            try await db.fetchOne("SELECT publicKey FROM devices WHERE id = ?", device)?["publicKey"].bytes
        }
        guard let stored, let key = try? P256.Signing.PublicKey(x963Representation: stored) else { throw refused }
        let message = DeviceRequestProof.message(
            method: method, path: path, device: device, time: proof.time,
            bodySHA256: SHA256.hash(data: body).lowercaseHex)
        guard key.isValidSignature(signature, for: message) else { throw refused }
        // Each proof once: a captured header replayed within the window is refused. Every proof taken is kept by its
        // time until the window has passed it, so proofs of one device may arrive in any order (a log upload and a
        // status call at once), and one from ahead of the clock blocks nothing.
        let fresh = try await database.storage.write { db -> Bool in
            try await db.execute(
                "DELETE FROM deviceProofs WHERE device = ? AND time < ?", device,
                now - Int64(DeviceRequestProof.maximumAge * 1000))
            return try await db.execute(
                "INSERT INTO deviceProofs (device, time) VALUES (?, ?) ON CONFLICT DO NOTHING", device, proof.time) > 0
        }
        guard fresh else { throw refused }
    }

    /// Whether `user` is or was registered on `device`.
    func wasRegistered(device: String, user: String) async throws -> Bool {
        try await database.storage.read { db in
            try await db.fetchOne(#"SELECT 1 FROM deviceRegistrations WHERE device = ? AND "user" = ?"#, device, user)
                != nil
        }
    }

    /// Notes that a device made contact, with the app version it sent and the sign-in (token family) it used.
    func noteContact(device: String, appVersion: String?, family: String?) async throws {
        let now = clock.now()
        try await database.storage.write { db in
            try await db.execute(
                "UPDATE devices SET lastSeenAt = ?, appVersion = coalesce(?, appVersion) WHERE id = ?", now,
                appVersion.map { $0.prefix(scalars: 32) }, device)
            if let family {
                try await db.execute(
                    "INSERT INTO deviceTokenFamilies (family, device) VALUES (?, ?) ON CONFLICT DO NOTHING", family,
                    device)
            }
        }
    }
}
