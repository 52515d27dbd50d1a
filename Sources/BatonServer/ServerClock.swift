import Foundation

/// The server's source of time, injected so expiry, rotation and lockout windows are tested without sleeping.
public struct ServerClock: Sendable {
    /// The current time.
    public var now: @Sendable () -> Date

    /// A clock reading `now`.
    public init(now: @escaping @Sendable () -> Date) { self.now = now }

    /// The system clock.
    public static let system = ServerClock { Date() }
}
