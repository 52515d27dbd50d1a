import Foundation

/// Brute-force protection for sign-in: too many failures for one user name or from one client address within
/// a window lock further attempts until the window passes.
actor LoginThrottle {
    /// The limits.
    struct Limits: Sendable {
        /// Failures per user name within the window. Default: 5.
        var perUser = 5
        /// Failures per client address within the window. Default: 20.
        var perAddress = 20
        /// The window, in seconds. Default: 900.
        var window: TimeInterval = 900
    }

    let limits: Limits
    let clock: ServerClock
    var failures: [String: [Date]] = [:]

    init(limits: Limits, clock: ServerClock) {
        self.limits = limits
        self.clock = clock
    }

    static func userKey(_ name: String) -> String { "user:" + name.lowercased() }
    static func addressKey(_ address: String) -> String { "address:" + address }

    /// Seconds until another attempt is allowed for this user and address, or `nil` when allowed now.
    func retryAfter(user: String, address: String) -> Int? {
        let now = clock.now()
        var wait: TimeInterval = 0
        for (key, limit) in [(Self.userKey(user), limits.perUser), (Self.addressKey(address), limits.perAddress)] {
            let recent = (failures[key] ?? []).filter { now.timeIntervalSince($0) < limits.window }
            failures[key] = recent
            if recent.count >= limit, let oldest = recent.suffix(limit).first {
                wait = max(wait, limits.window - now.timeIntervalSince(oldest))
            }
        }
        return wait > 0 ? Int(wait.rounded(.up)) : nil
    }

    /// Records a failed attempt.
    func recordFailure(user: String, address: String) {
        let now = clock.now()
        failures[Self.userKey(user), default: []].append(now)
        failures[Self.addressKey(address), default: []].append(now)
    }

    /// Forgets a user's failures after a successful sign-in.
    func recordSuccess(user: String) {
        failures[Self.userKey(user)] = nil
    }
}
