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
                        "'\(user.prefix(scalars: 64))' is registered on \(on) devices, the most one user may be on (setting devices.max-per-user); leave one first."
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
                        "'\(user.prefix(scalars: 64))' registered \(today) signing keys on device '\(device.prefix(scalars: 128))' in the last 24 hours, the most a day; register again when the oldest of them is a day old."
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
            "'\(user.prefix(scalars: 64))' was on device '\(device.prefix(scalars: 128))' less than an hour ago: the device's word that they left counts after an hour without them, or an administrator removes them from the device in the cockpit."
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
            "Device '\(device.prefix(scalars: 128))' was taken out of service by an administrator: its store key is no longer released."
        )
    }

    static func proofRequired(_ device: String) -> ServerError {
        ServerError(
            .forbidden, "DeviceProofRequired",
            "Registering on device '\(device.prefix(scalars: 128))' needs the approval of one of its users (a proof signed with the device key).",
            target: "deviceProof")
    }
}
