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

/// How a person signs in on the device, among what the server allows (`sign-in.methods`).
public enum SignInMethod: String, Sendable, Hashable, CaseIterable {
    /// User name and password typed into the app.
    case password
    /// On another device's browser, with a code the app shows (RFC 8628).
    case browser
}

/// What the person needs to sign in through a browser elsewhere, shown while the device waits.
public struct DeviceCodePrompt: Sendable, Hashable {
    /// The code to type on the page (`BDFH-KLMN`).
    public var userCode: String
    /// The page.
    public var verificationURI: String
    /// The page with the code filled in (what a QR code would carry), when the server gives it.
    public var verificationURIComplete: String?
    /// When the code stops working.
    public var expiresAt: Date
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
/// `ScriptedPresenter` (BatonTesting) for tests; <doc:GettingStarted> has a whole one.
///
/// An app implements six requirements — ``credentials(server:username:problem:)``,
/// ``newPasscode(policy:problem:)``, ``passcode(user:problem:)``, ``pickUser(_:)``, ``show(_:)`` and
/// ``progress(_:fraction:)`` — and may replace the defaults of the others: ``signInMethod(server:available:)``,
/// ``showDeviceCode(_:)``, ``consent(_:user:)`` and ``approver(for:among:problem:)``.
///
/// Names of people: every `user` or `newUser` string a method gets is a **display name** (the server's
/// `displayName`, "Alice Example"), for showing; a newcomer to approve is shown with their account beside it
/// ("Mallory Example (mallory)"), since a display name alone could be anyone's. The user name that signs in (`alice`) is what
/// ``credentials(server:username:problem:)`` returns and pre-fills; ``UserManager/User`` carries both
/// (``UserManager/User/displayName``, ``UserManager/User/serverUserID``).
public protocol OnboardingPresenter: Sendable {
    /// User name and password for the server. `problem` says why it is asked again.
    func credentials(server: String, username: String?, problem: String?) async throws -> Credentials
    /// A new passcode, typed twice, under `policy`. `problem` names the rule the last attempt broke.
    func newPasscode(policy: PasscodePolicy, problem: String?) async throws -> (passcode: String, confirmation: String)
    /// The passcode of `user` (a display name). `problem` says what was wrong with the last one.
    func passcode(user: String, problem: String?) async throws -> String
    /// Which user continues: one of `users`, or someone new.
    func pickUser(_ users: [UserManager.User]) async throws -> UserChoice
    /// How to sign in when the server allows more than one way. The default: a typed password.
    func signInMethod(server: String, available: [SignInMethod]) async throws -> SignInMethod
    /// Shows where and with which code the person signs in on another device; the flow then waits for the
    /// approval. The default shows it as a message.
    func showDeviceCode(_ prompt: DeviceCodePrompt) async throws
    /// Whether `user` (a display name) agrees to `form` (``ConsentStep``). The default refuses to answer: an app
    /// that adds the consent step asks the person.
    func consent(_ form: ConsentForm, user: String) async throws -> Bool
    /// A message for the person at the device.
    func show(_ message: String) async
    /// Progress of a flow: the step running and how far the flow is (0...1).
    func progress(_ step: String, fraction: Double) async
    /// Which of `users` (already on this device) approves `newUser` (a display name) joining it, and their
    /// passcode: joining a
    /// device needs the device key, which only its users' secure stores hold. `problem` says what was wrong with
    /// the last answer. The default asks ``pickUser(_:)`` (when there is more than one) and
    /// ``passcode(user:problem:)``.
    func approver(for newUser: String, among users: [UserManager.User], problem: String?) async throws
        -> (onboardingID: UUID, passcode: String)
}

extension OnboardingPresenter {
    public func signInMethod(server: String, available: [SignInMethod]) async throws -> SignInMethod {
        available.contains(.password) ? .password : available.first ?? .password
    }

    public func consent(_ form: ConsentForm, user: String) async throws -> Bool {
        throw FlowsError(.stepFailed, "This app's presenter cannot ask for consent (\(form.title)).")
    }

    public func showDeviceCode(_ prompt: DeviceCodePrompt) async throws {
        await show(
            "Sign in on another device: open \(prompt.verificationURI) and enter the code \(prompt.userCode).")
    }

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
