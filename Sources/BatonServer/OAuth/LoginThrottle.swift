import BatonSQL
import Crypto
import Foundation

/// Brute-force protection for sign-in that cannot be turned into a lock-out weapon.
///
/// Failures are counted per (user name, address), per user name from every address, and per address for every
/// user name. Past a few free failures each counter makes the next attempt wait, doubling with every further
/// failure up to ``Limits/maximumDelay``; a quiet ``Limits/window`` forgets it. A pair that signed in
/// successfully within ``Limits/knownFor`` is *known*: the per-user and per-address counters, which other
/// people's failures move, do not slow it — so guessing a user's password from elsewhere, or a noisy neighbour
/// behind the same NAT, never keeps a user out of their own tablet. Only their own failures slow them.
///
/// The counters live in the server's database (`signInFailures`, `signInKnown`), so every instance on one
/// database counts the same failures; a counter is updated in one statement, so failures on two instances at
/// once both count. A counter's key is an HMAC (under a key derived from the master key) of the name and
/// address, never the typed name itself: a password typed into the name field must not reach the database, its
/// replicas or its backups.
struct LoginThrottle: Sendable {
    /// The limits, with every default stated.
    struct Limits: Sendable {
        /// Free failures for one user name from one address. Default: 5.
        var perPair = 5
        /// Free failures for one user name from all addresses together. Default: 20.
        var perUser = 20
        /// Free failures from one address for all user names together. Default: 50.
        var perAddress = 50
        /// The longest wait, in seconds. Default: 900.
        var maximumDelay: TimeInterval = 900
        /// How long a counter with no new failure lasts, in seconds. Default: 900.
        var window: TimeInterval = 900
        /// How long a successful sign-in makes its (user, address) pair known, in seconds. Default: 30 days.
        var knownFor: TimeInterval = 30 * 86_400
        /// Free unknown user codes typed on the device page from one network (an IPv6 /64 as one). Default: 10.
        var wrongCodesPerNetwork = 10
        /// Free denials sent from the device page from one network, for codes it knows or not. Default: 20.
        var denialsPerNetwork = 20
    }

    let limits: Limits
    let clock: ServerClock
    let database: ServerDatabase
    /// The key of the counters' HMACs.
    let keyKey: SymmetricKey

    init(limits: Limits, clock: ServerClock, database: ServerDatabase, masterKey: SymmetricKey) {
        self.limits = limits
        self.clock = clock
        self.database = database
        keyKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: masterKey, info: Data("baton-sign-in-throttle".utf8), outputByteCount: 32)
    }

    func pairKey(_ user: String, _ address: String) -> String { hmac("pair:\(address)\n" + user.lowercased()) }
    func userKey(_ name: String) -> String { hmac("user:" + name.lowercased()) }
    func addressKey(_ address: String) -> String { hmac("address:" + address) }

    func hmac(_ text: String) -> String {
        Data(HMAC<SHA256>.authenticationCode(for: Data(text.utf8), using: keyKey)).base64EncodedString()
    }

    /// Seconds until another attempt is allowed for this user and address, or `nil` when allowed now.
    ///
    /// - Throws: the database error, if the read fails (the sign-in is then refused with a 503).
    func retryAfter(user: String, address: String) async throws -> Int? {
        let pair = pairKey(user, address)
        let knownSince = try await database.storage.read { db in
            try await db.fetchOne("SELECT since FROM signInKnown WHERE pair = ?", pair)?[0].date
        }
        let known = knownSince.map { clock.now().timeIntervalSince($0) < limits.knownFor } ?? false
        var counters = [Counter(key: pair, free: limits.perPair)]
        if !known {
            counters.append(Counter(key: userKey(user), free: limits.perUser))
            counters.append(Counter(key: addressKey(address), free: limits.perAddress))
        }
        return try await retryAfter(counters)
    }

    /// Records a failed attempt, and forgets counters whose window has passed.
    ///
    /// - Throws: the database error, if the write fails.
    func recordFailure(user: String, address: String) async throws {
        try await recordFailure(keys: [pairKey(user, address), userKey(user), addressKey(address)])
    }

    /// One failure counter and the failures it lets through before it slows the next attempt.
    struct Counter: Sendable {
        var key: String
        var free: Int
    }

    /// The device page's counters (RFC 8628 §5.1) for the network `address` belongs to (an IPv6 /64 as one):
    /// unknown codes typed from it, and denials sent from it. Never a name shared by every address, so guesses
    /// from elsewhere cannot keep anyone off the page.
    func deviceCodeCounters(network: String) -> (wrongCodes: Counter, denials: Counter) {
        (
            Counter(key: hmac("codes:" + network), free: limits.wrongCodesPerNetwork),
            Counter(key: hmac("denials:" + network), free: limits.denialsPerNetwork)
        )
    }

    /// Seconds until `counters` allow another attempt, or `nil` when they allow one now.
    ///
    /// - Throws: the database error, if the read fails.
    func retryAfter(_ counters: [Counter]) async throws -> Int? {
        let now = clock.now()
        let limits = self.limits
        let keys = counters.map { $0.key }
        let rows = try await database.storage.read { db in
            let marks = keys.map { _ in "?" }.joined(separator: ", ")
            return try await db.fetchAll(
                "SELECT key, failures, last FROM signInFailures WHERE key IN (\(marks))", keys.map(SQLValue.text))
        }
        let free = Dictionary(counters.map { ($0.key, $0.free) }) { first, _ in first }
        var wait: TimeInterval = 0
        for row in rows {
            guard let key = row["key"].text, let allowed = free[key], let failures = row["failures"].integer,
                let last = row["last"].date
            else { continue }
            let quiet = now.timeIntervalSince(last)
            guard quiet < limits.window, failures >= allowed else { continue }
            let delay = min(limits.maximumDelay, pow(2, Double(Int(failures) - allowed)))
            wait = max(wait, delay - quiet)
        }
        return wait > 0 ? Int(wait.rounded(.up)) : nil
    }

    /// Counts one failure on each of `keys`, and forgets counters whose window has passed.
    ///
    /// - Throws: the database error, if the write fails.
    func recordFailure(keys: [String]) async throws {
        let now = clock.now()
        let expired = now.addingTimeInterval(-limits.window)
        try await database.storage.write { db in
            for key in keys {
                try await db.execute(
                    """
                    INSERT INTO signInFailures (key, failures, last) VALUES (?, 1, ?)
                    ON CONFLICT(key) DO UPDATE SET
                        failures = CASE WHEN signInFailures.last <= ? THEN 1 ELSE signInFailures.failures + 1 END,
                        last = excluded.last
                    """, key, now, expired)
            }
            try await db.execute("DELETE FROM signInFailures WHERE last <= ?", expired)
        }
    }

    /// Forgets the pair's failures after a successful sign-in and makes the pair known.
    ///
    /// - Throws: the database error, if the write fails.
    func recordSuccess(user: String, address: String) async throws {
        let now = clock.now()
        let pair = pairKey(user, address)
        let forgotten = now.addingTimeInterval(-limits.knownFor)
        try await database.storage.write { db in
            try await db.execute("DELETE FROM signInFailures WHERE key = ?", pair)
            try await db.execute(
                "INSERT INTO signInKnown (pair, since) VALUES (?, ?) ON CONFLICT(pair) DO UPDATE SET since = excluded.since",
                pair, now)
            try await db.execute("DELETE FROM signInKnown WHERE since <= ?", forgotten)
        }
    }
}
