import BatonOData
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The OAuth 2.0 Device Authorization Grant (RFC 8628): a device that cannot show a browser asks for a code,
/// shows the person a short user code and where to enter it, and polls the token endpoint while the person
/// signs in on their phone or computer and approves.
///
/// Device codes are stored as SHA-256 hashes, user codes as eight letters from a 20-letter alphabet without
/// vowels (no words, no look-alikes; RFC 8628 §6.1), shown as `XXXX-XXXX`. A code lives 10 minutes and is used
/// once; polling faster than the interval gets `slow_down` and a longer interval. Each code keeps a keyed hash
/// of the address that asked for it (never the address), for ``DeviceCodeLimits``.
struct DeviceAuthorizations: Sendable {
    static let grantType = "urn:ietf:params:oauth:grant-type:device_code"
    static let lifetime: TimeInterval = 600
    static let interval = 5
    static let alphabet = Array("BCDFGHJKLMNPQRSTVWXZ")

    let database: ServerDatabase
    let clock: ServerClock

    struct Started: Sendable {
        var deviceCode: String
        var userCode: String
        var expiresIn: Int
        var interval: Int
    }

    /// Starts an authorization for `client` with `scope`, asked from the address whose keyed hash is
    /// `addressKey` (``LoginThrottle/addressKey(_:)``).
    ///
    /// - Throws: ``OAuthError`` `slow_down` (429) when `limits.perAddress` unexpired codes were asked from the
    ///   address (whatever their state), `temporarily_unavailable` (503) when `limits.maximum` are unexpired in all; each with the seconds
    ///   until a place frees up.
    func start(client: String, scope: String, addressKey: String, limits: DeviceCodeLimits) async throws -> Started {
        enum Outcome: Sendable {
            case started, taken
            case addressFull(wait: Int), allFull(wait: Int)
        }
        let deviceCode = randomSecret()
        let now = clock.now().timeIntervalSince1970
        @Sendable func wait(_ row: SQLRow?) -> Int {
            max(1, Int(((row?[1].real ?? now + Self.lifetime) - now).rounded(.up)))
        }
        // A collision of user codes among live ones (1 in 25 billion per pair) is retried.
        for _ in 0..<5 {
            let userCode = String((0..<8).map { _ in Self.alphabet[Int.random(in: 0..<Self.alphabet.count)] })
            let outcome = try await database.storage.write { db -> Outcome in
                try await db.execute("DELETE FROM deviceAuthorizations WHERE expiresAt < ?", now - 3600)
                // A code holds its place until it expires, whatever its state: denying one's own codes (which
                // needs no sign-in) must not make room for more.
                let fromAddress = try await db.fetchOne(
                    "SELECT count(*), min(expiresAt) FROM deviceAuthorizations WHERE addressKey = ? AND expiresAt > ?",
                    addressKey, now)
                if fromAddress?[0].integer ?? 0 >= Int64(limits.perAddress) {
                    return .addressFull(wait: wait(fromAddress))
                }
                let all = try await db.fetchOne(
                    "SELECT count(*), min(expiresAt) FROM deviceAuthorizations WHERE expiresAt > ?",
                    now)
                if all?[0].integer ?? 0 >= Int64(limits.maximum) { return .allFull(wait: wait(all)) }
                guard try await db.fetchOne("SELECT 1 FROM deviceAuthorizations WHERE userCode = ?", userCode) == nil
                else {
                    return .taken
                }
                try await db.execute(
                    """
                    INSERT INTO deviceAuthorizations
                        (deviceCodeHash, userCode, clientID, scope, createdAt, expiresAt, pollInterval, status,
                         addressKey)
                    VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?)
                    """, secretHash(deviceCode), userCode, client, scope, now, now + Self.lifetime, Self.interval,
                    addressKey)
                return .started
            }
            switch outcome {
            case .started:
                return Started(
                    deviceCode: deviceCode, userCode: Self.display(userCode), expiresIn: Int(Self.lifetime),
                    interval: Self.interval)
            case .taken:
                continue
            case .addressFull(let wait):
                throw OAuthError(
                    "slow_down", "Too many sign-in codes are waiting for this address; use one, or try again later.",
                    status: .tooManyRequests, retryAfter: wait)
            case .allFull(let wait):
                throw OAuthError(
                    "temporarily_unavailable", "Too many sign-in codes are waiting; try again later.",
                    status: .serviceUnavailable, retryAfter: wait)
            }
        }
        throw ServerError.databaseUnavailable("No free user code; try again.")
    }

    /// `ABCD-EFGH` for stored `ABCDEFGH`.
    static func display(_ code: String) -> String { "\(code.prefix(4))-\(code.dropFirst(4))" }

    /// The stored form of what a person typed: letters only, upper-cased; `nil` when it cannot be a user code.
    static func normalized(_ typed: String) -> String? {
        let letters = typed.uppercased().filter { $0 != "-" && $0 != " " }
        guard letters.count == 8, letters.allSatisfy({ alphabet.contains($0) }) else { return nil }
        return letters
    }

    /// Whether a user code (normalized) is pending and unexpired.
    func isPending(userCode code: String) async throws -> Bool {
        let now = clock.now().timeIntervalSince1970
        return try await database.storage.read { db in
            try await db.fetchOne(
                "SELECT 1 FROM deviceAuthorizations WHERE userCode = ? AND status = 'pending' AND expiresAt > ?", code,
                now) != nil
        }
    }

    /// Records the person's decision for a pending, unexpired user code.
    ///
    /// - Returns: `false` when there is no such pending code (unknown, expired, or decided already).
    func decide(userCode typed: String, approvedBy user: String?) async throws -> Bool {
        guard let code = Self.normalized(typed) else { return false }
        let now = clock.now().timeIntervalSince1970
        return try await database.storage.write { db in
            try await db.execute(
                """
                UPDATE deviceAuthorizations SET status = ?, "user" = ?
                WHERE userCode = ? AND status = 'pending' AND expiresAt > ?
                """, user == nil ? "denied" : "approved", user, code, now) > 0
        }
    }

    /// One poll of the token endpoint: the user and scope once approved (the code is then used up), or the
    /// RFC 8628 §3.5 error.
    func poll(deviceCode: String, client: String) async throws -> (user: String, scope: String) {
        let now = clock.now().timeIntervalSince1970
        enum Outcome { case approved(String, String), error(OAuthError) }
        let outcome = try await database.storage.write { db -> Outcome in
            guard
                let row = try await db.fetchOne(
                    """
                    SELECT clientID, scope, expiresAt, pollInterval, lastPolledAt, status, "user"
                    FROM deviceAuthorizations WHERE deviceCodeHash = ?
                    """, secretHash(deviceCode)),
                row["clientID"].text == client
            else { return .error(.invalidGrant("The device code is unknown or was issued to another client.")) }
            if (row["expiresAt"].real ?? 0) <= now {
                return .error(OAuthError("expired_token", "The device code expired; start the sign-in again."))
            }
            let interval = row["pollInterval"].integer ?? Int64(Self.interval)
            if let last = row["lastPolledAt"].real, now - last < Double(interval) {
                let slower = min(interval + 5, 60)
                try await db.execute(
                    "UPDATE deviceAuthorizations SET pollInterval = ?, lastPolledAt = ? WHERE deviceCodeHash = ?",
                    slower, now, secretHash(deviceCode))
                return .error(OAuthError("slow_down", "Polling too fast: wait \(slower) seconds between polls."))
            }
            try await db.execute(
                "UPDATE deviceAuthorizations SET lastPolledAt = ? WHERE deviceCodeHash = ?", now, secretHash(deviceCode)
            )
            switch row["status"].text {
            case "pending":
                return .error(OAuthError("authorization_pending", "The person has not approved the sign-in yet."))
            case "denied":
                return .error(OAuthError("access_denied", "The person denied the sign-in."))
            case "approved":
                // Used once: only the poll that moves it from approved to used gets tokens.
                guard
                    try await db.execute(
                        "UPDATE deviceAuthorizations SET status = 'used' WHERE deviceCodeHash = ? AND status = 'approved'",
                        secretHash(deviceCode)) == 1
                else { return .error(.invalidGrant("The device code was used already.")) }
                return .approved(row["user"].text ?? "", row["scope"].text ?? "")
            default:
                return .error(.invalidGrant("The device code was used already."))
            }
        }
        switch outcome {
        case .approved(let user, let scope): return (user, scope)
        case .error(let error): throw error
        }
    }
}

/// How many sign-in codes (RFC 8628) may wait at once: anyone who reaches the server may ask for one, so a loop
/// of requests must neither fill the database nor take every code. A code holds its place until it expires (10
/// minutes), whether it waits, was allowed, denied or used.
public struct DeviceCodeLimits: Sendable {
    /// Unexpired codes asked from one address — from one IPv6 /64 network, which is one customer's (a
    /// station's tablets behind one NAT share an address). Default: 50.
    public var perAddress: Int
    /// Unexpired codes from all addresses together: reaching it takes this many divided by `perAddress` addresses
    /// (or /64 networks). Default: 100,000 (a row is about 200 bytes).
    public var maximum: Int

    /// The limits; the defaults when nothing is given.
    public init(perAddress: Int = 50, maximum: Int = 100_000) {
        self.perAddress = perAddress
        self.maximum = maximum
    }
}

extension DeviceAuthorizations {
    /// What the per-address limit counts `address` as: an IPv6 address by its /64 network (an IPv4-mapped one as
    /// the IPv4 address), anything else as it is.
    static func network(of address: String) -> String {
        var bytes = [UInt8](repeating: 0, count: 16)
        guard inet_pton(AF_INET6, address, &bytes) == 1 else { return address }
        if bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xff, bytes[11] == 0xff {
            return bytes[12...].map(String.init).joined(separator: ".")
        }
        let hextets = stride(from: 0, to: 8, by: 2).map {
            String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16)
        }
        return hextets.joined(separator: ":") + "::/64"
    }
}
