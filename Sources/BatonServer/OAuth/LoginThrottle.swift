import Foundation

/// Brute-force protection for sign-in that cannot be turned into a lock-out weapon.
///
/// Failures are counted per (user name, address), per user name from every address, and per address for every
/// user name. Past a few free failures each counter makes the next attempt wait, doubling with every further
/// failure up to ``Limits/maximumDelay``; a quiet ``Limits/window`` forgets it. A pair that signed in
/// successfully within ``Limits/knownFor`` is *known*: the per-user and per-address counters, which other
/// people's failures move, do not slow it — so guessing a user's password from elsewhere, or a noisy neighbour
/// behind the same NAT, never keeps a user out of their own tablet. Only their own failures slow them.
actor LoginThrottle {
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
        /// The most counters kept; past it, expired ones are dropped, then the oldest. Default: 100,000.
        var capacity = 100_000
    }

    struct Counter {
        var failures: Int
        var last: Date
    }

    let limits: Limits
    let clock: ServerClock
    var counters: [String: Counter] = [:]
    var known: [String: Date] = [:]

    init(limits: Limits, clock: ServerClock) {
        self.limits = limits
        self.clock = clock
    }

    static func pairKey(_ user: String, _ address: String) -> String { "pair:\(address)\n" + user.lowercased() }
    static func userKey(_ name: String) -> String { "user:" + name.lowercased() }
    static func addressKey(_ address: String) -> String { "address:" + address }

    /// Seconds until another attempt is allowed for this user and address, or `nil` when allowed now.
    func retryAfter(user: String, address: String) -> Int? {
        let now = clock.now()
        let pair = Self.pairKey(user, address)
        var counted = [(pair, limits.perPair)]
        if !isKnown(pair, now: now) {
            counted += [(Self.userKey(user), limits.perUser), (Self.addressKey(address), limits.perAddress)]
        }
        var wait: TimeInterval = 0
        for (key, free) in counted {
            guard let counter = counters[key] else { continue }
            let quiet = now.timeIntervalSince(counter.last)
            if quiet >= limits.window {
                counters[key] = nil
                continue
            }
            guard counter.failures >= free else { continue }
            let delay = min(limits.maximumDelay, pow(2, Double(counter.failures - free)))
            wait = max(wait, delay - quiet)
        }
        return wait > 0 ? Int(wait.rounded(.up)) : nil
    }

    func isKnown(_ pair: String, now: Date) -> Bool {
        guard let since = known[pair] else { return false }
        return now.timeIntervalSince(since) < limits.knownFor
    }

    /// Records a failed attempt.
    func recordFailure(user: String, address: String) {
        let now = clock.now()
        for key in [Self.pairKey(user, address), Self.userKey(user), Self.addressKey(address)] {
            var counter = counters[key] ?? Counter(failures: 0, last: now)
            if now.timeIntervalSince(counter.last) >= limits.window { counter.failures = 0 }
            counter.failures += 1
            counter.last = now
            counters[key] = counter
        }
        prune(now: now)
    }

    /// Forgets the pair's failures after a successful sign-in and makes the pair known.
    func recordSuccess(user: String, address: String) {
        let pair = Self.pairKey(user, address)
        counters[pair] = nil
        known[pair] = clock.now()
        prune(now: clock.now())
    }

    /// Keeps memory bounded whatever names and addresses an attacker sends.
    func prune(now: Date) {
        if counters.count > limits.capacity {
            counters = counters.filter { now.timeIntervalSince($0.value.last) < limits.window }
            if counters.count > limits.capacity {
                let keep = counters.sorted { $0.value.last > $1.value.last }.prefix(limits.capacity / 2)
                counters = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
            }
        }
        if known.count > limits.capacity {
            known = known.filter { now.timeIntervalSince($0.value) < limits.knownFor }
            if known.count > limits.capacity {
                let keep = known.sorted { $0.value > $1.value }.prefix(limits.capacity / 2)
                known = Dictionary(uniqueKeysWithValues: keep.map { ($0.key, $0.value) })
            }
        }
    }
}
