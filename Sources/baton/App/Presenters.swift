import BatonFlows
import BatonOData
import BatonSecureStore
import Foundation

/// The onboarding flows' questions, asked at the terminal: sign-in, passcodes (hidden), the user list.
/// An empty answer or the end of input cancels the flow, which the screens take as "back".
struct ConsolePresenter: OnboardingPresenter {
    let ui: ConsoleUI

    /// The message of the cancellation that quits the app (from the user list).
    static let quit = "Quit."

    func cancelled(_ what: String) -> FlowsError { FlowsError(.cancelled, "\(what) cancelled.") }

    func credentials(server: String, username: String?, problem: String?) async throws -> Credentials {
        ui.heading("Sign in to \(server)")
        if let problem { ui.failure(problem) }
        let name: String
        if let username {
            ui.say("User: \(username)")
            name = username
        } else {
            guard let typed = await ui.ask("User name:"), !typed.isEmpty else { throw cancelled("Sign-in") }
            name = typed
        }
        guard let password = await ui.askSecret("Password (hidden):") else { throw cancelled("Sign-in") }
        return Credentials(username: name, password: password)
    }

    func signInMethod(server: String, available: [SignInMethod]) async throws -> SignInMethod {
        ui.heading("Sign in to \(server)")
        while true {
            guard let answer = await ui.ask("p  password here · b  browser on another device:")?.lowercased(),
                !answer.isEmpty
            else { throw cancelled("Sign-in") }
            if answer == "p", available.contains(.password) { return .password }
            if answer == "b", available.contains(.browser) { return .browser }
            ui.failure("'\(answer)' is not a choice; type p or b.")
        }
    }

    func showDeviceCode(_ prompt: DeviceCodePrompt) async throws {
        ui.heading("Sign in on your phone or computer")
        ui.say("Open  \(prompt.verificationURI)")
        ui.heading("Code  \(prompt.userCode)")
        if let complete = prompt.verificationURIComplete {
            // The page with the code filled in, for a phone's camera.
            if let code = QRCode(complete) {
                for line in code.lines() { ui.say(line) }
            } else {
                ui.dim("(or open \(complete))")
            }
        }
        ui.say("Waiting for you to sign in there; the code works for 10 minutes.")
    }

    func newPasscode(policy: PasscodePolicy, problem: String?) async throws -> (passcode: String, confirmation: String)
    {
        var rules = ["at least \(policy.minLength) characters"]
        if policy.requireDigit { rules.append("a digit") }
        if policy.requireLetter { rules.append("a letter") }
        if policy.requireSymbol { rules.append("a symbol") }
        ui.heading("Choose a passcode for this device (\(rules.joined(separator: ", ")))")
        if let problem { ui.failure(problem) }
        guard let passcode = await ui.askSecret("New passcode (hidden):"),
            let confirmation = await ui.askSecret("Type it again:")
        else { throw cancelled("Choosing a passcode") }
        return (passcode, confirmation)
    }

    func passcode(user: String, problem: String?) async throws -> String {
        if let problem { ui.failure(problem) }
        guard let passcode = await ui.askSecret("Passcode for \(user) (hidden; ? if you forgot it):") else {
            throw cancelled("Sign-in")
        }
        // No passcode is one character long: "?" asks for a passcode reset (sign in again, keep the data).
        if passcode == "?" {
            throw FlowsError(
                .forgotPasscode, "\(user) forgot their passcode: they sign in with their password and choose a new one."
            )
        }
        return passcode
    }

    func pickUser(_ users: [UserManager.User]) async throws -> UserChoice {
        ui.heading("Who is working on this device?")
        for (index, user) in users.enumerated() {
            ui.say(String(format: "  %2d  ", index + 1) + Self.describe(user))
        }
        ui.say("   a  Add a user")
        ui.say("   q  Quit")
        while true {
            guard let answer = await ui.ask("Choose:")?.lowercased(), answer != "q" else {
                throw FlowsError(.cancelled, Self.quit)
            }
            if answer == "a" { return .addUser }
            if let number = Int(answer), users.indices.contains(number - 1) { return .user(users[number - 1].id) }
            ui.failure("'\(answer)' is not on the list; type a number from 1 to \(users.count), a or q.")
        }
    }

    /// "Alice (alice) · 2 changes waiting · last in 2026-11-21 14:05Z".
    static func describe(_ user: UserManager.User) -> String {
        var text = user.displayName
        if let name = user.serverUserID, name != user.displayName { text += " (\(name))" }
        let pending = user.pendingChanges ?? 0
        if pending > 0 { text += " · \(pending) change\(pending == 1 ? "" : "s") waiting" }
        if let last = user.lastSignIn { text += " · last in " + PrimitiveValue.shortTime(ODataDateTimeOffset(last)) }
        return text
    }

    func consent(_ form: ConsentForm, user: String) async throws -> Bool {
        ui.heading("\(form.title) — \(user)")
        ui.say(form.text)
        while true {
            guard let answer = await ui.ask("Do you agree? (y/n):")?.lowercased(), !answer.isEmpty else {
                throw cancelled("Onboarding")
            }
            if ["y", "yes"].contains(answer) { return true }
            if ["n", "no"].contains(answer) { return false }
            ui.failure("'\(answer)' is not y or n.")
        }
    }

    func show(_ message: String) async { ui.warning(message) }

    /// Flow steps are quick apart from the first download, which has its own progress bar.
    func progress(_ step: String, fraction: Double) async {}
}

/// The questions of a scriptable subcommand: the named user, the passcode (and for `users add` the password)
/// read once from standard input or a hidden prompt. A second attempt is never asked: a wrong answer ends the
/// command with the reason.
actor ScriptPresenter: OnboardingPresenter {
    let username: String?
    var password: String?
    var passcode: String?
    var approving: Approver?
    let ui: ConsoleUI

    /// What the user agrees to (`users add --consent`); asked only at onboarding.
    let consents: Set<ConsentKind>

    init(
        ui: ConsoleUI, username: String?, password: String?, passcode: String?, approver: Approver? = nil,
        consents: Set<ConsentKind> = []
    ) {
        self.ui = ui
        self.consents = consents
        self.username = username
        self.password = password
        self.passcode = passcode
        self.approving = approver
    }

    /// The user named with `--approver`, with their passcode: never the new user's own.
    func approver(for newUser: String, among users: [UserManager.User], problem: String?) async throws
        -> (onboardingID: UUID, passcode: String)
    {
        if let problem { throw FlowsError(.wrongPasscode, problem) }
        guard let approving else {
            throw FlowsError(
                .notAllowed,
                "\(newUser) joins a device that has users: one of them approves. Name them with --approver USER.")
        }
        guard let user = users.first(where: { $0.serverUserID == approving.user }) else {
            throw FlowsError(.unknownUser, "\(approving.user) is not on this device; `baton users` lists who is.")
        }
        if self.approving?.passcode == nil {
            self.approving?.passcode = await ui.askSecret("Passcode of \(user.displayName), who approves (hidden):")
        }
        guard let code = self.approving?.passcode else {
            throw FlowsError(.wrongPasscode, "No passcode was given for \(approving.user).")
        }
        return (user.onboardingID, code)
    }

    func credentials(server: String, username: String?, problem: String?) async throws -> Credentials {
        if let problem { throw FlowsError(.invalidCredentials, problem) }
        guard let name = username ?? self.username else {
            throw FlowsError(.invalidCredentials, "Name the user with --user.")
        }
        if password == nil { password = await ui.askSecret("Password for \(name) (hidden):") }
        guard let password else { throw FlowsError(.invalidCredentials, "No password was given.") }
        return Credentials(username: name, password: password)
    }

    func newPasscode(policy: PasscodePolicy, problem: String?) async throws -> (passcode: String, confirmation: String)
    {
        if let problem { throw FlowsError(.wrongPasscode, problem) }
        let code = try await secret()
        return (code, code)
    }

    func passcode(user: String, problem: String?) async throws -> String {
        if let problem { throw FlowsError(.wrongPasscode, problem) }
        return try await secret()
    }

    func secret() async throws -> String {
        if passcode == nil { passcode = await ui.askSecret("Passcode (hidden):") }
        guard let passcode else { throw FlowsError(.wrongPasscode, "No passcode was given.") }
        return passcode
    }

    func pickUser(_ users: [UserManager.User]) async throws -> UserChoice {
        guard let username else { throw FlowsError(.unknownUser, "Name the user with --user.") }
        guard let user = users.first(where: { $0.serverUserID == username }) else {
            throw FlowsError(.unknownUser, "\(username) is not on this device; `baton users` lists who is.")
        }
        return .user(user.id)
    }

    func consent(_ form: ConsentForm, user: String) async throws -> Bool {
        guard consents.contains(form.kind) || !form.isRequired else {
            throw FlowsError(
                .consentDeclined,
                "\(user) has not agreed to \(form.title.lowercased()), which Baton needs: give --consent data (or data,usage), or answer in the app."
            )
        }
        return consents.contains(form.kind)
    }

    nonisolated func show(_ message: String) async { ui.warning(message) }
    nonisolated func progress(_ step: String, fraction: Double) async {}
}

/// `--approver`: who approves a new user joining the device, and their passcode if already read.
struct Approver: Sendable {
    var user: String
    var passcode: String?
}
