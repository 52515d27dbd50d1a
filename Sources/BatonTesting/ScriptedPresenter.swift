import BatonClient
import BatonFlows
import BatonSecureStore
import Foundation
import Synchronization

/// A presenter that answers from a script, for tests: each question takes the next answer, which must be of
/// the kind asked (otherwise the flow fails with a message naming both). Records every question and message.
public actor ScriptedPresenter: OnboardingPresenter {
    /// One scripted answer.
    public enum Answer: Sendable {
        case credentials(String, String)
        case newPasscode(String, confirmation: String)
        case passcode(String)
        /// "Forgot passcode" at the passcode prompt.
        case forgotPasscode
        /// The way to sign in, when the server offers several.
        case signInMethod(SignInMethod)
        /// At a device code: the person signs in on the page as this user and approves (over HTTP, as a browser
        /// would post the form).
        case approveInBrowser(String, String)
        /// At a device code: the person denies on the page.
        case denyInBrowser
        /// At a device code: `approve` runs what the person does elsewhere (a real browser on the page, signing
        /// in at the company's identity provider); the flow goes on when it returns.
        case approveElsewhere(@Sendable (DeviceCodePrompt) async throws -> Void)
        /// Agrees (true) or not to the consent form asked.
        case consent(Bool)
        /// Picks the user with this display name.
        case pick(String)
        case addUser
        /// Cancels whatever is asked.
        case cancel
    }

    var answers: [Answer]
    /// Every question asked and message shown, in order (`credentials`, `newPasscode: <problem>`…).
    public private(set) var transcript: [String] = []

    public init(_ answers: [Answer] = []) { self.answers = answers }

    /// Adds answers to the end of the script.
    public func append(_ more: [Answer]) { answers += more }

    /// Answers not used yet.
    public var remaining: Int { answers.count }

    func next(_ question: String, problem: String?) throws(FlowsError) -> Answer {
        transcript.append(problem.map { "\(question): \($0)" } ?? question)
        guard !answers.isEmpty else { throw FlowsError(.cancelled, "The script has no answer for '\(question)'.") }
        let answer = answers.removeFirst()
        if case .cancel = answer { throw FlowsError(.cancelled, "Cancelled at '\(question)'.") }
        return answer
    }

    func mismatch(_ question: String, _ answer: Answer) -> FlowsError {
        FlowsError(.cancelled, "The script answers '\(question)' with \(answer).")
    }

    public func credentials(server: String, username: String?, problem: String?) async throws -> Credentials {
        let answer = try next("credentials", problem: problem)
        guard case .credentials(let user, let password) = answer else { throw mismatch("credentials", answer) }
        return Credentials(username: user, password: password)
    }

    public func newPasscode(policy: PasscodePolicy, problem: String?) async throws -> (
        passcode: String, confirmation: String
    ) {
        let answer = try next("newPasscode", problem: problem)
        guard case .newPasscode(let passcode, let confirmation) = answer else { throw mismatch("newPasscode", answer) }
        return (passcode, confirmation)
    }

    public func passcode(user: String, problem: String?) async throws -> String {
        let answer = try next("passcode(\(user))", problem: problem)
        if case .forgotPasscode = answer { throw FlowsError(.forgotPasscode, "Forgot the passcode.") }
        guard case .passcode(let passcode) = answer else { throw mismatch("passcode", answer) }
        return passcode
    }

    public func pickUser(_ users: [UserManager.User]) async throws -> UserChoice {
        let answer = try next("pickUser(\(users.map(\.displayName).joined(separator: ",")))", problem: nil)
        switch answer {
        case .addUser: return .addUser
        case .pick(let name):
            guard let user = users.first(where: { $0.displayName == name }) else {
                throw FlowsError(.unknownUser, "The script picks \(name), who is not in the list.")
            }
            return .user(user.onboardingID)
        default: throw mismatch("pickUser", answer)
        }
    }

    public func signInMethod(server: String, available: [SignInMethod]) async throws -> SignInMethod {
        let answer = try next("signInMethod(\(available.map(\.rawValue).joined(separator: ",")))", problem: nil)
        guard case .signInMethod(let method) = answer else { throw mismatch("signInMethod", answer) }
        return method
    }

    public func showDeviceCode(_ prompt: DeviceCodePrompt) async throws {
        let answer = try next("deviceCode(\(prompt.userCode))", problem: nil)
        if case .approveElsewhere(let approve) = answer {
            try await approve(prompt)
            transcript.append("approved elsewhere")
            return
        }
        var fields = [("user_code", prompt.userCode)]
        switch answer {
        case .approveInBrowser(let user, let password):
            fields += [("username", user), ("password", password), ("action", "approve")]
        case .denyInBrowser:
            fields.append(("action", "deny"))
        default:
            throw mismatch("deviceCode", answer)
        }
        guard let url = URL(string: prompt.verificationURI) else {
            throw FlowsError(.stepFailed, "The verification page is not a URL.")
        }
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let body = fields.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
            .joined(separator: "&")
        let response = try await AsyncHTTPClientTransport().send(
            ClientRequest(
                method: "POST", url: url, headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Array(body.utf8)))
        transcript.append("page: HTTP \(response.status)")
    }

    public func consent(_ form: ConsentForm, user: String) async throws -> Bool {
        let answer = try next("consent(\(form.kind.rawValue), \(user))", problem: nil)
        guard case .consent(let agreed) = answer else { throw mismatch("consent", answer) }
        return agreed
    }

    public func show(_ message: String) async { transcript.append("message: \(message)") }

    /// The progress reports, in order.
    public private(set) var progressReports: [(step: String, fraction: Double)] = []

    public func progress(_ step: String, fraction: Double) async { progressReports.append((step, fraction)) }
}

/// A clock tests move by hand.
public final class TestClock: Sendable {
    let current: Mutex<Date>

    public init(_ start: Date = Date(timeIntervalSince1970: 1_800_000_000)) { current = Mutex(start) }

    public var now: Date { current.withLock { $0 } }

    public func advance(by seconds: TimeInterval) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }

    /// The clock as the closure configurations take.
    public var closure: @Sendable () -> Date { { [self] in now } }
}
