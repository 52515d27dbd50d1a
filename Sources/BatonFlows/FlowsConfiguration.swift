import BatonClient
import BatonSecureStore
import Foundation

/// How an app uses the onboarding lifecycle.
public struct FlowsConfiguration: Sendable {
    /// One user per device, or several sharing it.
    public enum Mode: String, Sendable, Hashable {
        case singleUser, multiUser
    }

    public var mode: Mode
    /// The clock (inactivity lock, token expiry). Tests inject their own.
    public var now: @Sendable () -> Date = { Date() }
    /// The passcode key derivation for new secure stores (tests use cheap parameters).
    public var keyDerivation: @Sendable () -> KeyDerivation = { .recommended() }
    /// Sent to the server as `Baton-App-Version`.
    public var appVersion: String?
    /// Asked before a user is removed; throwing refuses the removal. The offline store plugs its rule in here
    /// (pending changes are uploaded first or their discard is confirmed).
    public var removalGuard: (@Sendable (UserManager.User) async throws -> Void)?
    /// Hands over pending changes before a user withdrawn by the server, or a wiped device, loses them: upload
    /// what the server takes, back up the rest to it. The offline store plugs in ``OfflineStoreStep/handOver(_:)``
    /// here; without it the device holds no changes of its own.
    public var handOverPendingChanges: (@Sendable (PendingChangesHandover) async throws(FlowsError) -> HandoverReport)?
    /// Waits between polls of a sign-in through a browser (tests shorten it).
    public var pollDelay: @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) }
    /// Decides retry or stop when a step fails (default: stop).
    public var errorHandler: (any OnboardingErrorHandling)?

    public init(mode: Mode) { self.mode = mode }
}
