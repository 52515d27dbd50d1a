import BatonOData
import BatonSQL
import Crypto
import Foundation
import HTTPTypes

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
        /// The users whose registration a departure sent with this one ended (``Departure``).
        public var departed: [String] = []
    }

    /// A user's departure from a device, declared with the device key (`DeviceDeparture`): it ends the user's
    /// registration there when `keyID` is their current signing key on the device.
    public struct Departure: Sendable, Hashable {
        /// The user who left.
        public var user: String
        /// Their signing key on the device when the device signed the departure.
        public var keyID: String
        /// The device key's signature over `DeviceDeparture/message(device:user:keyID:)`.
        public var signature: P256.Signing.ECDSASignature

        public init(user: String, keyID: String, signature: P256.Signing.ECDSASignature) {
            self.user = user
            self.keyID = keyID
            self.signature = signature
        }

        public static func == (lhs: Departure, rhs: Departure) -> Bool {
            lhs.user == rhs.user && lhs.keyID == rhs.keyID
                && lhs.signature.rawRepresentation == rhs.signature.rawRepresentation
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(user)
            hasher.combine(keyID)
        }
    }

    /// The most signing keys one user registers on one device in 24 hours: 20 (a passcode reset or a new
    /// onboarding makes one; a loop of them would fill the key table and the audit log).
    static let keysPerDay = 20

    /// How long a device the user left still counts against `devices.max-per-user`, in seconds: 30 days.
    static let recentDevicesWindow: TimeInterval = 30 * 86_400

    /// At most this many departures in one request.
    public static let maxDepartures = 50

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
        // "." and ".." would be path segments that mean something else in /devices/{id}/… and /admin/devices/….
        (1...128).contains(id.count) && id != "." && id != ".."
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

    /// What a device proves when a user registers on it: a signature by the device key over
    /// ``joinMessage(device:user:keyID:)``. The device key's private half lives only in the secure stores of
    /// the device's users, so a proof means a user of the device unlocked their store for this registration.
    public struct DeviceProof: Sendable {
        /// The device's public key: required for a device's first registration, ignored once the server knows it.
        public var deviceKey: P256.Signing.PublicKey?
        /// The device key's signature over the join message.
        public var signature: P256.Signing.ECDSASignature

        /// Creates a proof.
        public init(deviceKey: P256.Signing.PublicKey?, signature: P256.Signing.ECDSASignature) {
            self.deviceKey = deviceKey
            self.signature = signature
        }
    }

    /// The bytes a device key signs to let `user` register `keyID` on `device` (shared with the device app).
    public static func joinMessage(device: String, user: String, keyID: String) -> Data {
        Data(DeviceJoin.message(device: device, user: user, keyID: keyID))
    }

    /// Registers `user` on `device` with a signing key, if the device allows it:
    ///
    /// - A new device: the proof must carry the device's public key and verify with it (possession). The device,
    ///   its key and a new store key are created.
    /// - A known device: the proof must verify with the device's key — a user of this device approved — unless
    ///   `user` is registered there already (a re-registration after a passcode reset), or nobody is registered
    ///   there any more, in which case the proof's new device key replaces the old one together with a new store
    ///   key, so nothing the device held before can be decrypted with what the new user receives.
    ///
    /// A new signing key retires the previous one, which stays on record with the time it was retired. A key
    /// belongs to one user on one device for ever: registering a key the server has seen for anyone else, or a
    /// retired one, is refused.
    ///
    /// `departures` (signed by the device key the server holds) end the registrations of users who left the
    /// device without telling the server, before anything else is decided: the first user after them re-keys the
    /// device as on a device nobody is on.
    ///
    /// A user already on as many devices as the setting `devices.max-per-user` allows (default 20) joins no
    /// other.
    ///
    /// - Throws: ``ServerError`` 400 for a bad device id or key; 403 `DeviceProofRequired` without the device's
    ///   proof; 409 `KeyInUse` for a key registered before; 409 `TooManyDevices` past the devices per user.
    public func register(
        device: String, user: String, publicKey: P256.Signing.PublicKey, proof: DeviceProof?,
        departures: [Departure] = []
    ) async throws -> Registration {
        guard Self.isValidDeviceID(device) else { throw Self.invalidDeviceID }
        let now = clock.now()
        let keyID = Self.keyID(publicKey)
        let message = Self.joinMessage(device: device, user: user, keyID: keyID)
        @Sendable func proves(_ key: P256.Signing.PublicKey?) -> Bool {
            guard let key, let proof else { return false }
            return key.isValidSignature(proof.signature, for: message)
        }
        let freshStoreKey = try sealStoreKey(SymmetricKey(size: .bits256), device: device)
        return try await database.storage.write { db in
            let existing = try await db.fetchOne("SELECT publicKey, revokedAt FROM devices WHERE id = ?", device)
            if let existing, existing["revokedAt"] != .null { throw Self.revoked(device) }
            // A user's own departure means nothing while they register again (a wiped user onboarding anew): their
            // previous key retires as any replaced key does.
            let ending = try await Self.end(departures.filter { $0.user != user }, on: device, at: now, in: db)
            let departed = ending.ended
            let active =
                try await db.fetchOne(
                    "SELECT COUNT(*) FROM deviceRegistrations WHERE device = ? AND active = 1", device)?[0]
                .integer ?? 0
            let userActive =
                try await db.fetchOne(
                    #"SELECT active FROM deviceRegistrations WHERE device = ? AND "user" = ?"#, device, user)?[
                    0
                ].bool ?? false
            if !userActive {
                let limit = try await SettingsStore.current(in: db).devices.maxPerUser
                // Devices the user is on, or left within the last 30 days: joining and leaving in a loop must not
                // multiply what each device may keep (logs, usage, backups).
                let on =
                    try await db.fetchOne(
                        #"""
                        SELECT COUNT(DISTINCT device) FROM signingKeys
                        WHERE "user" = ? AND (replacedAt IS NULL OR replacedAt > ?) AND device <> ?
                        """#, user, now.addingTimeInterval(-Self.recentDevicesWindow), device)?[0].integer ?? 0
                guard on < limit else {
                    throw ServerError(
                        .conflict, "TooManyDevices",
                        "'\(user.prefix(64))' is registered on \(on) devices, the most one user may be on (setting devices.max-per-user); leave one first."
                    )
                }
            }
            if let existing {
                let stored = existing["publicKey"].bytes.flatMap {
                    try? P256.Signing.PublicKey(x963Representation: $0)
                }
                // While a departure waits, the device keeps its key: a registration offering another one (a
                // user who lost theirs with a passcode reset) would leave the tablet holding a key the server
                // does not, so it waits for the hour too.
                if let waiting = ending.waiting.first, let offered = proof?.deviceKey,
                    offered.x963Representation != stored?.x963Representation
                {
                    throw Self.departureTooSoon(device, user: waiting)
                }
                let approved = stored.map(proves) ?? false
                if !approved && !userActive {
                    guard active == 0 || stored == nil, let offered = proof?.deviceKey, proves(offered) else {
                        if let waiting = ending.waiting.first {
                            throw Self.departureTooSoon(device, user: waiting)
                        }
                        throw Self.proofRequired(device)
                    }
                    // Nobody is on the device (or it predates device keys and nobody is on it): a new device key,
                    // and a new store key so the old one reaches nobody new.
                    try await db.execute(
                        "UPDATE devices SET publicKey = ?, sealedStoreKey = ? WHERE id = ?", offered.x963Representation,
                        freshStoreKey, device)
                } else if !approved, stored == nil || active == 1, let offered = proof?.deviceKey, proves(offered) {
                    // A device from before device keys, or whose only user lost the key with their secure store
                    // (a passcode reset), takes the key that user offers.
                    try await db.execute(
                        "UPDATE devices SET publicKey = ? WHERE id = ?", offered.x963Representation, device)
                }
            } else {
                guard let offered = proof?.deviceKey, proves(offered) else { throw Self.proofRequired(device) }
                try await db.execute(
                    "INSERT INTO devices (id, sealedStoreKey, createdAt, publicKey) VALUES (?, ?, ?, ?)", device,
                    freshStoreKey, now, offered.x963Representation)
            }
            let owner = try await db.fetchOne(
                #"SELECT "user", device, registeredAt, replacedAt FROM signingKeys WHERE id = ?"#, keyID)
            var registeredAt = now
            if let owner {
                guard owner["user"].text == user, owner["device"].text == device, owner["replacedAt"] == .null
                else {
                    throw ServerError.conflict(
                        "This signing key was registered before (for another user or device, or retired); create a new key.",
                        target: "publicKey")
                }
                registeredAt = owner["registeredAt"].date ?? now
            } else {
                // A new key is a row kept for ever (it verifies what it signed): registering fresh keys in a loop
                // is bounded per device and user and day.
                let today =
                    try await db.fetchOne(
                        #"SELECT COUNT(*) FROM signingKeys WHERE device = ? AND "user" = ? AND registeredAt > ?"#,
                        device, user, now.addingTimeInterval(-86_400))?[0].integer ?? 0
                guard today < Self.keysPerDay else {
                    var error = ServerError(
                        .tooManyRequests, "TooManyRequests",
                        "'\(user.prefix(64))' registered \(today) signing keys on device '\(device.prefix(128))' in the last 24 hours, the most a day; register again when the oldest of them is a day old."
                    )
                    error.headers = [(.retryAfter, "3600")]
                    throw error
                }
                try await db.execute(
                    #"UPDATE signingKeys SET replacedAt = ? WHERE device = ? AND "user" = ? AND replacedAt IS NULL"#,
                    now,
                    device, user)
                try await db.execute(
                    #"INSERT INTO signingKeys (id, device, "user", publicKey, registeredAt) VALUES (?, ?, ?, ?, ?)"#,
                    keyID, device, user, publicKey.x963Representation, now)
            }
            try await db.execute(
                """
                INSERT INTO deviceRegistrations (device, "user", registeredAt, active) VALUES (?, ?, ?, 1)
                ON CONFLICT(device, "user") DO UPDATE SET active = 1
                """, device, user, now)
            return Registration(
                device: device, user: user, keyID: keyID, registeredAt: registeredAt, departed: departed)
        }
    }

    /// Ends the registrations that `departures` declare, inside a write: each must verify with the device key
    /// the server holds and name the user's current signing key there (a departure signed for an older key, or
    /// for a user who came back with a new one, ends nothing). The user's key retires as at
    /// ``unregister(device:user:)``.
    ///
    /// A departure is kept on the tablet outside every secure store (it must outlive a wiped one), so whoever
    /// holds the tablet's files holds one for each of its users. So it ends only the registration of a user who
    /// has been quiet on the device for ``departureQuiet``: no token refreshed through it, no key registered on
    /// it. A user the server saw there lately has not left; their departure waits (``Ending/waiting``).
    ///
    /// - Returns: the users whose registration ended, and those whose departure must wait, in order.
    static func end(_ departures: [Departure], on device: String, at now: Date, in db: any SQLConnection) async throws
        -> Ending
    {
        guard !departures.isEmpty,
            let stored = try await db.fetchOne("SELECT publicKey FROM devices WHERE id = ?", device)?["publicKey"]
                .bytes,
            let key = try? P256.Signing.PublicKey(x963Representation: stored)
        else { return Ending() }
        var ending = Ending()
        for departure in departures.prefix(maxDepartures) {
            let message = DeviceDeparture.message(device: device, user: departure.user, keyID: departure.keyID)
            guard key.isValidSignature(departure.signature, for: message) else { continue }
            let current = try await db.fetchOne(
                #"SELECT 1 FROM signingKeys WHERE id = ? AND device = ? AND "user" = ? AND replacedAt IS NULL"#,
                departure.keyID, device, departure.user)
            guard current != nil else { continue }
            let refreshed = try await db.fetchOne(
                #"""
                SELECT max(r.createdAt) FROM refreshTokens r JOIN deviceTokenFamilies f ON f.family = r.family
                WHERE f.device = ? AND r."user" = ?
                """#, device, departure.user)?[0].real
            let registered = try await db.fetchOne(
                "SELECT registeredAt FROM signingKeys WHERE id = ?", departure.keyID)?[
                    0
                ].date
            let lastSeen = max(refreshed ?? 0, registered?.timeIntervalSince1970 ?? 0)
            guard now.timeIntervalSince1970 - lastSeen >= departureQuiet else {
                ending.waiting.append(departure.user)
                continue
            }
            try await db.execute(
                #"UPDATE deviceRegistrations SET active = 0 WHERE device = ? AND "user" = ?"#, device, departure.user)
            try await db.execute("UPDATE signingKeys SET replacedAt = ? WHERE id = ?", now, departure.keyID)
            ending.ended.append(departure.user)
        }
        return ending
    }

    /// What `end(_:on:at:in:)` did with the departures it was given.
    struct Ending: Sendable {
        /// The users whose registration ended.
        var ended: [String] = []
        /// The users the server saw on the device within ``departureQuiet``: their departure waits.
        var waiting: [String] = []
    }

    /// How long a user must have been quiet on a device before a departure ends their registration there, in
    /// seconds: one hour.
    static let departureQuiet: TimeInterval = 3_600

    static func departureTooSoon(_ device: String, user: String) -> ServerError {
        ServerError(
            .forbidden, "DepartureWaits",
            "'\(user.prefix(64))' was on device '\(device.prefix(128))' less than an hour ago: the device's word that they left counts after an hour without them, or an administrator removes them from the device in the cockpit."
        )
    }

    /// Ends the registrations of users who left `device` (see `end(_:on:at:in:)`) — sent by the device itself,
    /// or by one of its current users, when it next reaches the server.
    ///
    /// - Returns: the users whose registration ended, and those seen on the device within the hour, whose
    ///   departure waits.
    public func endRegistrations(device: String, departures: [Departure]) async throws -> (
        ended: [String], waiting: [String]
    ) {
        let now = clock.now()
        let ending = try await database.storage.write { db in
            try await Self.end(departures, on: device, at: now, in: db)
        }
        return (ending.ended, ending.waiting)
    }

    /// Reads `{"user": …, "keyID": …, "signature": <base64url raw ECDSA>}` objects.
    ///
    /// - Throws: ``ServerError`` 400 naming the first that is not of that form, or more than ``maxDepartures``.
    static func parseDepartures(_ value: JSONValue?) throws(ServerError) -> [Departure] {
        guard let value, value != .null else { return [] }
        guard let array = value.arrayValue, array.count <= maxDepartures else {
            throw .badRequest("departures must be a list of at most \(maxDepartures).", target: "departures")
        }
        var departures: [Departure] = []
        for (index, item) in array.enumerated() {
            guard let user = item["user"]?.stringValue, User.isValidName(user),
                let keyID = item["keyID"]?.stringValue, (1...64).contains(keyID.count),
                let text = item["signature"]?.stringValue, let data = Data(base64URLEncoded: text),
                let signature = try? P256.Signing.ECDSASignature(rawRepresentation: data)
            else {
                throw .badRequest(
                    "Departure \(index) needs a user, a keyID and a signature (base64url raw ECDSA P-256).",
                    target: "departures")
            }
            departures.append(Departure(user: user, keyID: keyID, signature: signature))
        }
        return departures
    }

    static func revoked(_ device: String) -> ServerError {
        ServerError(
            .forbidden, "DeviceRevoked",
            "Device '\(device.prefix(128))' was taken out of service by an administrator: its store key is no longer released."
        )
    }

    static func proofRequired(_ device: String) -> ServerError {
        ServerError(
            .forbidden, "DeviceProofRequired",
            "Registering on device '\(device.prefix(128))' needs the approval of one of its users (a proof signed with the device key).",
            target: "deviceProof")
    }

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
    /// - Throws: ``ServerError`` (404) when the user is not registered there.
    public func unregister(device: String, user: String) async throws {
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
    /// - Throws: ``ServerError`` (403) when the user is not registered on the device — whether or not the
    ///   device exists, so the answer does not reveal other devices.
    public func storeKey(device: String, user: String) async throws -> SymmetricKey {
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
        guard let sealed else { throw ServerError.notFound("There is no device '\(device.prefix(128))'.") }
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
                "A backup holds only the changes of users who were registered on this device; '\(author.prefix(64))' was not."
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
                    "The server keeps \(keptCount) backup(s), \(keptBytes >> 10) KiB, of device '\(device.prefix(128))': the most it keeps (settings backups.max-per-device, backups.max-mib-per-device). The device keeps this backup and sends it again; an administrator makes room."
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

// MARK: Lifecycle (the admin cockpit)

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
        guard let outcome else { throw ServerError.notFound("There is no device '\(device.prefix(128))'.") }
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
        guard found else { throw ServerError.notFound("There is no device '\(device.prefix(128))'.") }
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
        guard let outcome else { throw ServerError.notFound("There is no device '\(device.prefix(128))'.") }
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
                appVersion.map { String($0.prefix(32)) }, device)
            if let family {
                try await db.execute(
                    "INSERT INTO deviceTokenFamilies (family, device) VALUES (?, ?) ON CONFLICT DO NOTHING", family,
                    device)
            }
        }
    }
}
