import Foundation

/// What stopped a flow or a session operation: an opaque code and a message that says what failed. Some
/// codes carry the onboarding id they are about (for example the user to restore instead).
public struct FlowsError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The person cancelled at a prompt.
        public static let cancelled = Code("Cancelled")
        /// Someone onboarded as a user already on this device; ``FlowsError/onboardingID`` is that user,
        /// whom the next ``OnboardingSessionManager/open()`` restores.
        public static let userAlreadyExists = Code("UserAlreadyExists")
        /// A passcode reset (or a signed-out user's sign-in) signed in with another account than the expected one.
        /// ``FlowsError/serverUserID`` names the account that signed in, and ``FlowsError/onboardingID`` is that
        /// account's user on this device when it has one (restore it), `nil` when not (onboard it).
        public static let userMismatch = Code("UserMismatch")
        /// The session (or a handle obtained from it) was locked, closed or removed; open it again.
        public static let sessionInvalidated = Code("SessionInvalidated")
        /// The server no longer allows this app version: update the app. Pending changes stay on the device.
        public static let appVersionInactive = Code("AppVersionInactive")
        /// The server disabled or deleted this user: their data was removed from the device after their pending
        /// changes were uploaded or backed up to the server.
        public static let userWithdrawn = Code("UserWithdrawn")
        /// An administrator revoked this device or ordered it wiped: every user and the offline store were removed
        /// after the pending changes were uploaded or backed up to the server.
        public static let deviceWiped = Code("DeviceWiped")
        /// The person at the passcode prompt forgot their passcode: the presenter throws this from
        /// ``OnboardingPresenter/passcode(user:problem:)`` and the session manager resets the passcode (same
        /// account, online), keeping the user's data.
        public static let forgotPasscode = Code("ForgotPasscode")
        /// Multi-user mode needs sign-in and a passcode; the app's flows have no such step.
        public static let multiUserNeedsAuthentication = Code("MultiUserNeedsAuthentication")
        /// The server allows one user per device, and this device has one.
        public static let multiUserNotAllowed = Code("MultiUserNotAllowed")
        /// Too many wrong passcodes: the user's secure store was wiped; they must onboard again.
        public static let wiped = Code("Wiped")
        /// No such user on this device.
        public static let unknownUser = Code("UnknownUser")
        /// The operation needs an open (unlocked) session.
        public static let notOpen = Code("NotOpen")
        /// Only an administrator may do this.
        public static let notAllowed = Code("NotAllowed")
        /// The network is needed for this step and the server cannot be reached.
        public static let offline = Code("Offline")
        /// The device's files cannot be read or written.
        public static let storage = Code("Storage")
        /// The passcode was wrong and the presenter cannot ask again (a script, `--passcode-stdin`).
        public static let wrongPasscode = Code("WrongPasscode")
        /// The server rejected the user name or password and the presenter cannot ask again.
        public static let invalidCredentials = Code("InvalidCredentials")
        /// A step failed; the message says which and why.
        public static let stepFailed = Code("StepFailed")
    }

    public var code: Code
    public var message: String
    /// The user the error is about, when there is one.
    public var onboardingID: UUID?
    /// The server account the error is about, when there is one (`UserMismatch`: who signed in).
    public var serverUserID: String?

    public init(_ code: Code, _ message: String, onboardingID: UUID? = nil, serverUserID: String? = nil) {
        self.code = code
        self.message = message
        self.onboardingID = onboardingID
        self.serverUserID = serverUserID
    }

    public var description: String { message }
}
