import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Creates the user's secure store under the server's passcode policy (passcode typed twice), or opens it
/// with the passcode on restore. Wrong passcodes count against the policy's retry limit; at the limit the
/// store is wiped.
public struct PasscodeStep: OnboardingStep {
    public var name: String { "passcode" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        let passcode = try await newPasscode(context)
        try await createStore(&context, passcode: passcode)
    }

    public func resetPasscode(_ context: inout OnboardingContext) async throws {
        // The new passcode is settled first: cancelling at the prompt leaves the old store in place.
        let passcode = try await newPasscode(context)
        try? SecureStore.delete(at: context.storage.secureStoreURL(for: context.onboardingID))
        try await createStore(&context, passcode: passcode)
    }

    /// Asks for a new passcode until both entries match and it meets the server's policy, naming what was
    /// wrong each time.
    func newPasscode(_ context: OnboardingContext) async throws -> String {
        let policy = Self.policy(context.info[.settings] ?? ClientSettings(), mode: context.configuration.mode)
        return try await Self.askNewPasscode(context.presenter, policy: policy, problem: nil) {
            passcode throws(SecureStoreError) in
            try policy.check(passcode)
        }
    }

    /// Asks for a new passcode (typed twice) until `accept` takes it; a `PasscodePolicy` refusal asks again with
    /// its reason, any other refusal stops with a `Storage` error. Returns the passcode taken.
    static func askNewPasscode(
        _ presenter: any OnboardingPresenter, policy: PasscodePolicy, problem: String?,
        accept: (String) async throws(SecureStoreError) -> Void
    ) async throws -> String {
        var problem = problem
        while true {
            let (passcode, confirmation) = try await presenter.newPasscode(policy: policy, problem: problem)
            guard passcode == confirmation else {
                problem = "The two passcodes differ; type the same passcode twice."
                continue
            }
            do {
                try await accept(passcode)
                return passcode
            } catch  where error.code == .passcodePolicy {
                problem = error.message
            } catch {
                throw FlowsError(.storage, "Cannot keep the new passcode: \(error.message)")
            }
        }
    }

    /// Creates the user's store and keeps in it what a restore needs without the network.
    func createStore(_ context: inout OnboardingContext, passcode: String) async throws {
        let policy = Self.policy(context.info[.settings] ?? ClientSettings(), mode: context.configuration.mode)
        let store: SecureStore
        do {
            store = try SecureStore.create(
                at: context.storage.secureStoreURL(for: context.onboardingID), passcode: passcode, policy: policy,
                kdf: context.configuration.keyDerivation())
        } catch {
            throw FlowsError(.storage, "Cannot create the secure store: \(error.message)")
        }
        context.info[.createdSecureStore] = true
        context.secureStore = store
        if let value = context.info[.serverConfiguration] {
            try await save(value, SecureStoreKey.serverConfiguration, in: store)
        }
        if let value = context.info[.authorizationMetadata] {
            try await save(value, SecureStoreKey.authorizationMetadata, in: store)
        }
        if let value = context.info[.tokens] { try await save(value, SecureStoreKey.tokens, in: store) }
        if let value = context.info[.serverUser] { try await save(value, SecureStoreKey.serverUser, in: store) }
        if let value = context.info[.settings] {
            try await SettingsExchangeStep.keep(
                value, etag: context.info[.settingsETag], in: store, users: context.users)
        }
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let url = context.storage.secureStoreURL(for: context.onboardingID)
        let displayName = await context.users.user(context.onboardingID)?.displayName ?? "this user"
        var problem: String?
        while true {
            let passcode = try await context.presenter.passcode(user: displayName, problem: problem)
            do {
                context.secureStore = try SecureStore.open(at: url, passcode: passcode)
                // Checked against the server's current policy once the settings step knows it.
                context.info[.enteredPasscode] = passcode
                return
            } catch  where error.code == .wrongPasscode {
                problem = error.message
            } catch  where error.code == .wiped {
                throw FlowsError(.wiped, error.message, onboardingID: context.onboardingID)
            } catch  where error.code == .notFound {
                throw FlowsError(
                    .wiped, "\(displayName) has no secure store on this device any more; onboard again.",
                    onboardingID: context.onboardingID)
            } catch {
                throw FlowsError(.storage, "Cannot open the secure store of \(displayName): \(error.message)")
            }
        }
    }

    public func reset(_ context: inout OnboardingContext) async {
        // Delete only what this flow made, or everything when the user is being removed.
        guard context.flowType == .reset || context.info[.createdSecureStore] == true else { return }
        context.secureStore = nil
        try? SecureStore.delete(at: context.storage.secureStoreURL(for: context.onboardingID))
    }

    /// Asks for a new passcode when `passcode` no longer meets the policy of `settings`, and protects the user's
    /// secure store with it (same data key: the user keeps everything).
    static func requireCompliance(
        _ passcode: String, settings: ClientSettings, store: SecureStore, context: OnboardingContext
    ) async throws {
        let policy = policy(settings, mode: context.configuration.mode)
        let reason: String
        do {
            try policy.check(passcode)
            return
        } catch {
            reason = error.message
        }
        _ = try await askNewPasscode(
            context.presenter, policy: policy,
            problem:
                "The server's passcode policy changed and your passcode no longer meets it (\(reason)); choose a new one."
        ) { passcode throws(SecureStoreError) in
            try await store.changePasscode(to: passcode, policy: policy, kdf: context.configuration.keyDerivation())
        }
    }

    /// The server's passcode rules. A minimum length below 4 means "no passcode" on the server; Baton always
    /// protects a user's store with one, of at least 4 characters — and, as multi-user mode requires, 8.
    static func policy(_ settings: ClientSettings, mode: FlowsConfiguration.Mode) -> PasscodePolicy {
        var policy = PasscodePolicy()
        let minimum = settings.passcode.minLength
        policy.minLength = minimum >= 4 ? minimum : (mode == .multiUser ? 8 : 4)
        policy.requireDigit = settings.passcode.requireDigit
        policy.requireLetter = settings.passcode.requireLetter
        policy.requireSymbol = settings.passcode.requireSymbol
        policy.retryLimit = settings.passcode.retryLimit
        return policy
    }
}
