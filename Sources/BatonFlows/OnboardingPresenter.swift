import BatonSecureStore
import Foundation

/// A user name and password typed at the device.
public struct Credentials: Sendable, Hashable {
    public var username: String
    public var password: String
    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }
}

/// The answer at the user picker.
public enum UserChoice: Sendable, Hashable {
    /// This user (an onboarding id from the list shown).
    case user(UUID)
    /// Someone new onboards.
    case addUser
}

/// Everything a UI must show or ask during flows. Every question may throw (a cancelled prompt throws
/// ``FlowsError`` with code `Cancelled`). Implementations: the terminal app's console presenter, and
/// `ScriptedPresenter` (BatonTesting) for tests.
public protocol OnboardingPresenter: Sendable {
    /// User name and password for the server. `problem` says why it is asked again.
    func credentials(server: String, username: String?, problem: String?) async throws -> Credentials
    /// A new passcode, typed twice, under `policy`. `problem` names the rule the last attempt broke.
    func newPasscode(policy: PasscodePolicy, problem: String?) async throws -> (passcode: String, confirmation: String)
    /// The passcode of `user` (a display name). `problem` says what was wrong with the last one.
    func passcode(user: String, problem: String?) async throws -> String
    /// Which user continues: one of `users`, or someone new.
    func pickUser(_ users: [UserManager.User]) async throws -> UserChoice
    /// A message for the person at the device.
    func show(_ message: String) async
    /// Progress of a flow: the step running and how far the flow is (0...1).
    func progress(_ step: String, fraction: Double) async
    /// Which of `users` (already on this device) approves `newUser` joining it, and their passcode: joining a
    /// device needs the device key, which only its users' secure stores hold. `problem` says what was wrong with
    /// the last answer. The default asks ``pickUser(_:)`` (when there is more than one) and
    /// ``passcode(user:problem:)``.
    func approver(for newUser: String, among users: [UserManager.User], problem: String?) async throws
        -> (onboardingID: UUID, passcode: String)
}

extension OnboardingPresenter {
    public func approver(for newUser: String, among users: [UserManager.User], problem: String?) async throws
        -> (onboardingID: UUID, passcode: String)
    {
        if problem == nil {
            await show("\(newUser) joins this device: one of its users approves with their passcode.")
        }
        var chosen = users.first
        if users.count > 1 {
            guard case .user(let id) = try await pickUser(users) else {
                throw FlowsError(.cancelled, "Nobody on this device approved \(newUser) joining it.")
            }
            chosen = users.first { $0.onboardingID == id }
        }
        guard let chosen else {
            throw FlowsError(.cancelled, "Nobody on this device approved \(newUser) joining it.")
        }
        return (chosen.onboardingID, try await passcode(user: chosen.displayName, problem: problem))
    }
}
