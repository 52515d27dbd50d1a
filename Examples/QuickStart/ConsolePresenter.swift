// Examples/QuickStart/ConsolePresenter.swift
import BatonFlows
import BatonSecureStore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What the flows show and ask, in a terminal: the six requirements of `OnboardingPresenter`. The other four
/// (sign-in method, device code, consent, approver) keep their defaults.
///
/// `readLine`, `readSecret` and `write` are the terminal — a password or passcode is read without echo — and a
/// test passes its own, so the same presenter runs unattended.
public struct ConsolePresenter: OnboardingPresenter {
    let readLine: @Sendable () -> String?
    let readSecret: @Sendable (String) -> String?
    let write: @Sendable (String) -> Void

    public init(
        readLine: @escaping @Sendable () -> String? = { Swift.readLine() },
        readSecret: @escaping @Sendable (String) -> String? = { prompt in getpass(prompt).map { String(cString: $0) } },
        write: @escaping @Sendable (String) -> Void = { print($0) }
    ) {
        self.readLine = readLine
        self.readSecret = readSecret
        self.write = write
    }

    /// The next line typed; the end of input cancels the flow.
    func ask(_ prompt: String) throws -> String {
        write(prompt)
        guard let line = readLine() else { throw FlowsError(.cancelled, "No answer to '\(prompt)'.") }
        return line
    }

    /// A secret typed without echo; the end of input cancels the flow.
    func askSecret(_ prompt: String) throws -> String {
        guard let secret = readSecret(prompt) else { throw FlowsError(.cancelled, "No answer to '\(prompt)'.") }
        return secret
    }

    public func credentials(server: String, username: String?, problem: String?) async throws -> Credentials {
        if let problem { write(problem) }
        let name = try ask("User name at \(server)" + (username.map { " [\($0)]" } ?? "") + ":")
        return Credentials(username: name.isEmpty ? username ?? "" : name, password: try askSecret("Password:"))
    }

    public func newPasscode(policy: PasscodePolicy, problem: String?) async throws -> (
        passcode: String, confirmation: String
    ) {
        if let problem { write(problem) }
        return (
            try askSecret("Choose a passcode (at least \(policy.minLength) characters):"), try askSecret("Once more:")
        )
    }

    /// `user` is a display name ("Alice Example"), as in every presenter method.
    public func passcode(user: String, problem: String?) async throws -> String {
        if let problem { write(problem) }
        return try askSecret("Passcode of \(user):")
    }

    public func pickUser(_ users: [UserManager.User]) async throws -> UserChoice {
        for (number, user) in users.enumerated() { write("\(number + 1)  \(user.displayName)") }
        let answer = try ask("Who are you? (number, or + for someone new)")
        if answer == "+" { return .addUser }
        guard let number = Int(answer), users.indices.contains(number - 1) else {
            throw FlowsError(.cancelled, "'\(answer)' is not on the list.")
        }
        return .user(users[number - 1].onboardingID)
    }

    public func show(_ message: String) async { write(message) }

    public func progress(_ step: String, fraction: Double) async {}
}
