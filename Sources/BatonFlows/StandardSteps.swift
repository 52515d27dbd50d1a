import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Names of what Baton keeps in a user's secure store.
public enum SecureStoreKey {
    public static let serverConfiguration = "baton.serverConfiguration"
    public static let authorizationMetadata = "baton.authorizationMetadata"
    public static let tokens = "baton.tokens"
    public static let serverUser = "baton.serverUser"
    public static let settings = "baton.settings"
    /// The ETag of those settings, for the next conditional refresh.
    public static let settingsETag = "baton.settingsETag"
    public static let signingKey = "baton.signingKey"
    public static let storeKey = "baton.storeKey"
    /// The device key (P-256, raw): proves to the server that a user of this device approves another joining it.
    public static let deviceKey = "baton.deviceKey"
    /// Set when the user signed out: their tokens are revoked, so the next restore with network signs in again.
    public static let signedOut = "baton.signedOut"
}

extension OnboardingInfoKey where Value == String {
    /// The passcode that opened the secure store in this restore, kept only until the settings step checked it
    /// against the server's current policy (then removed; never saved).
    static var enteredPasscode: Self { Self("baton.passcode.entered") }
    /// The ETag of the settings in ``OnboardingInfoKey/settings``.
    static var settingsETag: Self { Self("baton.settings.etag") }
}

extension OnboardingInfoKey where Value == Bool {
    /// Set by the passcode step when this flow created the secure store (so its reset may delete it).
    static var createdSecureStore: Self { Self("baton.passcode.createdStore") }
    /// Set by the device-registration step when this flow registered the device.
    static var registeredDevice: Self { Self("baton.registration.registered") }
}

/// Turns a client error into the flow error a person can act on.
func flowsError(_ error: BatonClientError, doing action: String) -> FlowsError {
    if error.code == .unreachable {
        return FlowsError(.offline, "Cannot \(action): \(error.message)")
    }
    if error.code == .appVersionInactive { return SettingsExchangeStep.inactiveVersion(nil) }
    if error.code == .sessionInvalidated { return FlowsError(.sessionInvalidated, error.message) }
    // The client's message may say what failed already ("Cannot register this device: …"): not twice.
    let message = error.message.hasPrefix("Cannot \(action)") ? error.message : "Cannot \(action): \(error.message)"
    return FlowsError(.stepFailed, message)
}

func load<T: Decodable & Sendable>(_ type: T.Type, _ key: String, from store: SecureStore, step: String)
    async throws(FlowsError)
    -> T
{
    do {
        guard let value = try await store.value(T.self, forKey: key) else {
            throw FlowsError(.stepFailed, "Step '\(step)': the user's secure store has no '\(key)'; reset the user.")
        }
        return value
    } catch let error as FlowsError {
        throw error
    } catch {
        throw FlowsError(.storage, "Step '\(step)': cannot read the user's secure store (\(error)).")
    }
}

func save<T: Encodable & Sendable>(_ value: T, _ key: String, in store: SecureStore) async throws(FlowsError) {
    do {
        try await store.set(value, forKey: key)
    } catch {
        throw FlowsError(.storage, "Cannot write the user's secure store (\(error.message)).")
    }
}

/// Reads where the server's endpoints are (`/.well-known/baton-configuration` and the OAuth metadata).
public struct DiscoveryStep: OnboardingStep {
    public var name: String { "discovery" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        do {
            let (configuration, metadata) = try await context.client.discover()
            context.info[.serverConfiguration] = configuration
            context.info[.authorizationMetadata] = metadata
        } catch {
            throw flowsError(error, doing: "reach the server at \(context.client.serverURL.absoluteString)")
        }
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        context.info[.serverConfiguration] = try await load(
            ServerConfiguration.self, SecureStoreKey.serverConfiguration, from: store, step: name)
        context.info[.authorizationMetadata] = try await load(
            AuthorizationServerMetadata.self, SecureStoreKey.authorizationMetadata, from: store, step: name)
    }
}

/// Signs the user in with user name and password; on restore, takes their tokens from the secure store (no
/// network). Refuses a second onboarding of a user already on the device (userAlreadyExists) and, when
/// resetting a passcode, another account than the one being reset (userMismatch).
public struct SignInStep: OnboardingStep {
    public var name: String { "sign-in" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        try await signIn(&context, expected: nil)
    }

    public func resetPasscode(_ context: inout OnboardingContext) async throws {
        let expected = await context.users.user(context.onboardingID)?.serverUserID
        try await signIn(&context, expected: expected)
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        let user = try await load(ServerUser.self, SecureStoreKey.serverUser, from: store, step: name)
        let signedOut = (try? await store.value(Bool.self, forKey: SecureStoreKey.signedOut)) ?? false
        if signedOut, await context.client.isReachable() {
            // The user signed out (tokens revoked): with network, they sign in again as themselves first.
            try await signIn(&context, expected: user.name)
            do {
                try await store.set(context.info[.tokens], forKey: SecureStoreKey.tokens)
                try await store.removeValue(forKey: SecureStoreKey.signedOut)
            } catch {
                throw FlowsError(.storage, "Cannot keep the new sign-in in the secure store: \(error.message)")
            }
            // The new sign-in tells the server it is on this device (best effort): the server then counts it as
            // this user's presence here (a departure of theirs waits) and ends it if the device is revoked.
            if let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] {
                _ = try? await context.client.deviceStatus(
                    configuration, deviceID: context.deviceID, as: .token(tokens.accessToken))
            }
            return
        }
        // Offline, a signed-out user still works on the device; the first sync after sign-in needs the network.
        context.info[.tokens] = try await load(OAuthTokens.self, SecureStoreKey.tokens, from: store, step: name)
        context.info[.serverUser] = user
    }

    /// RFC 8628: shows the person the code and the page, and polls until they approved there (or denied, or the
    /// code expired).
    static func signInThroughBrowser(_ oauth: OAuthClient, _ context: OnboardingContext) async throws -> OAuthTokens {
        let started: DeviceAuthorization
        do {
            started = try await oauth.startDeviceAuthorization()
        } catch {
            throw flowsError(error, doing: "start the sign-in through a browser")
        }
        try await context.presenter.showDeviceCode(
            DeviceCodePrompt(
                userCode: started.userCode, verificationURI: started.verificationURI,
                verificationURIComplete: started.verificationURIComplete,
                expiresAt: context.configuration.now().addingTimeInterval(TimeInterval(started.expiresIn))))
        // At least a second between polls whatever the server says, and no polling past the code's life.
        var interval = max(started.interval, 1)
        let deadline = context.configuration.now().addingTimeInterval(TimeInterval(started.expiresIn))
        while true {
            do {
                try await context.configuration.pollDelay(.seconds(interval))
            } catch {
                throw FlowsError(.cancelled, "The sign-in through a browser was cancelled.")
            }
            guard context.configuration.now() < deadline else {
                throw FlowsError(.stepFailed, "The code expired before anyone signed in with it; start again.")
            }
            do {
                if let tokens = try await oauth.pollDeviceToken(started, interval: &interval) { return tokens }
            } catch  where error.serverCode == "access_denied" {
                throw FlowsError(.cancelled, "The sign-in was denied on the page.")
            } catch  where error.serverCode == "expired_token" {
                throw FlowsError(.stepFailed, "The code expired before anyone signed in with it; start again.")
            } catch  where error.serverCode == "invalid_grant" {
                throw FlowsError(.stepFailed, "The server no longer knows this sign-in's code; start again.")
            } catch {
                throw flowsError(error, doing: "sign in through a browser")
            }
        }
    }

    public func reset(_ context: inout OnboardingContext) async {
        // A failed onboarding or a removed user leaves no live session on the server (best effort offline).
        guard context.flowType != .restore, let tokens = context.info[.tokens],
            let metadata = context.info[.authorizationMetadata], let configuration = context.info[.serverConfiguration]
        else { return }
        let oauth = OAuthClient(
            metadata: metadata, clientID: configuration.clientID, transport: context.client.transport)
        try? await oauth.revoke(tokens)
        context.info[.tokens] = nil
    }

    func signIn(_ context: inout OnboardingContext, expected: String?) async throws {
        guard let configuration = context.info[.serverConfiguration],
            let metadata = context.info[.authorizationMetadata]
        else { throw FlowsError(.stepFailed, "Sign-in needs the discovery step before it.") }
        let oauth = OAuthClient(
            metadata: metadata, clientID: configuration.clientID, transport: context.client.transport,
            now: context.configuration.now)
        // What the server allows (an older server says nothing: passwords), and what this client can do.
        let allowed = configuration.signInMethods ?? ["password"]
        var available: [SignInMethod] = []
        if allowed.contains("password") { available.append(.password) }
        if allowed.contains("device"), metadata.deviceAuthorizationEndpoint != nil { available.append(.browser) }
        guard let only = available.first else {
            throw FlowsError(.stepFailed, "The server allows no way of signing in that this app knows.")
        }
        let server = context.client.serverURL.absoluteString
        let method =
            available.count == 1 ? only : try await context.presenter.signInMethod(server: server, available: available)
        var tokens: OAuthTokens
        if method == .browser {
            tokens = try await Self.signInThroughBrowser(oauth, context)
        } else {
            var problem: String?
            while true {
                let credentials = try await context.presenter.credentials(
                    server: server, username: expected, problem: problem)
                do {
                    tokens = try await oauth.signIn(username: credentials.username, password: credentials.password)
                    break
                } catch  where error.code == .invalidCredentials {
                    problem = error.message
                } catch {
                    throw flowsError(error, doing: "sign in")
                }
            }
        }
        let user: ServerUser
        do {
            user = try await context.client.me(configuration, token: tokens.accessToken)
        } catch {
            try? await oauth.revoke(tokens)
            throw flowsError(error, doing: "read the signed-in user")
        }
        if let expected, user.name != expected {
            try? await oauth.revoke(tokens)
            // Name the account that did sign in, and its user here if it has one, so the app can offer to restore
            // that user or onboard that account.
            let signedIn = await context.users.user(serverUserID: user.name)
            throw FlowsError(
                .userMismatch,
                context.flowType == .resetPasscode
                    ? "This passcode reset is for \(expected), but \(user.name) signed in; sign in as \(expected)."
                    : "This is \(expected)'s session, but \(user.name) signed in; sign in as \(expected).",
                onboardingID: signedIn?.status == .success ? signedIn?.onboardingID : nil, serverUserID: user.name)
        }
        if expected == nil, let existing = await context.users.user(serverUserID: user.name),
            existing.onboardingID != context.onboardingID
        {
            try? await oauth.revoke(tokens)
            throw FlowsError(
                .userAlreadyExists,
                "\(existing.displayName) is already a user of this device; choose them in the user list instead.",
                onboardingID: existing.onboardingID)
        }
        context.info[.tokens] = tokens
        context.info[.serverUser] = user
        if var entry = await context.users.user(context.onboardingID) {
            entry.serverUserID = user.name
            entry.displayName = user.displayName
            entry.role = user.role
            try await context.users.upsert(entry)
        }
    }
}

/// The settings exchange: what the server wants of this device (passcode policy, shared-device rules).
/// On restore, the settings kept in the secure store, refreshed from the server when it is reachable.
public struct SettingsExchangeStep: OnboardingStep {
    public var name: String { "settings" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        guard let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] else {
            throw FlowsError(.stepFailed, "The settings exchange needs discovery and sign-in before it.")
        }
        let settings: ClientSettings
        do throws(BatonClientError) {
            guard
                case .changed(let fresh, let etag) = try await context.client.settings(
                    configuration, token: tokens.accessToken, etag: nil)
            else { throw BatonClientError(.invalidResponse, "The server answered 304 to an unconditional request.") }
            settings = fresh
            context.info[.settingsETag] = etag
        } catch {
            throw flowsError(error, doing: "read the server's settings")
        }
        if let version = context.configuration.appVersion, settings.appVersions.inactive.contains(version) {
            throw Self.inactiveVersion(version)
        }
        let others = await context.users.activeUsers.filter { $0.onboardingID != context.onboardingID }
        if !settings.sharedDevices.multiUser, context.flowType == .onboard, !others.isEmpty {
            throw FlowsError(
                .multiUserNotAllowed,
                "The server allows one user per device, and this device already has one; remove that user first.")
        }
        context.info[.settings] = settings
    }

    /// The settings kept in the user's secure store, or the device's last known ones when another user's session
    /// learned newer ones; refreshed from the server (conditionally: 304 when nothing changed) when it is
    /// reachable. An app version the server retired stops the restore (`AppVersionInactive`); a passcode that
    /// no longer meets the policy must be changed now — the user keeps their data.
    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        // The user's own copy (behind their passcode) is what a conditional request names; the device's last
        // known copy (newer when another user's session learned it) applies only offline.
        let kept = try await load(ClientSettings.self, SecureStoreKey.settings, from: store, step: name)
        let keptETag = try? await store.value(String.self, forKey: SecureStoreKey.settingsETag)
        var (settings, etag) = (kept, keptETag)
        if let known = await context.users.lastKnownSettings, known.etag != etag || known.settings != settings {
            (settings, etag) = (known.settings, known.etag)
        }
        if let configuration = context.info[.serverConfiguration], context.info[.tokens] != nil,
            await context.client.isReachable()
        {
            let session = try context.authorizedSession()
            do {
                let token = try await session.accessToken()
                switch try await context.client.settings(configuration, token: token, etag: keptETag) {
                case .unchanged: (settings, etag) = (kept, keptETag)
                case .changed(let fresh, let freshETag): (settings, etag) = (fresh, freshETag)
                }
                context.info[.settingsFromServer] = true
            } catch  where error.code == .appVersionInactive {
                context.info[.tokens] = await session.tokens
                throw Self.inactiveVersion(context.configuration.appVersion)
            } catch {
                // The session manager's contact with the server tells a withdrawn user or device apart; the
                // restore carries on with the last known settings.
            }
            context.info[.tokens] = await session.tokens
        }
        try await Self.keep(settings, etag: etag, in: store, users: context.users)
        context.info[.settings] = settings
        context.info[.settingsETag] = etag
        if let version = context.configuration.appVersion, settings.appVersions.inactive.contains(version) {
            throw Self.inactiveVersion(version)
        }
        if let passcode = context.info[.enteredPasscode] {
            // Cleared only once the passcode meets the policy: a retried step checks again.
            try await PasscodeStep.requireCompliance(passcode, settings: settings, store: store, context: context)
            context.info[.enteredPasscode] = nil
        }
    }

    /// Keeps `settings` in the user's secure store and as the device's last known settings.
    static func keep(_ settings: ClientSettings, etag: String?, in store: SecureStore, users: UserManager)
        async throws(FlowsError)
    {
        if (try? await store.value(ClientSettings.self, forKey: SecureStoreKey.settings)) != settings {
            try await save(settings, SecureStoreKey.settings, in: store)
        }
        if let etag, (try? await store.value(String.self, forKey: SecureStoreKey.settingsETag)) != etag {
            try await save(etag, SecureStoreKey.settingsETag, in: store)
        }
        try await users.setLastKnownSettings(settings, etag: etag)
    }

    static func inactiveVersion(_ version: String?) -> FlowsError {
        FlowsError(
            .appVersionInactive,
            "This version of the app\(version.map { " (\($0))" } ?? "") is no longer allowed by the server. Install the current version; the changes waiting on this device are kept and upload after the update."
        )
    }
}

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

/// Creates the user's P-256 signing key in their secure store and registers its public half for this device,
/// so the server can verify changes they made here even when another user uploads them.
///
/// The server registers a user on a device only with the device's approval: a signature by the device key,
/// which lives in the secure stores of the device's users. The first user of a device creates the device key;
/// a user added from an open session gets it from that session; otherwise a user already on the device
/// approves with their passcode (``OnboardingPresenter/approver(for:among:problem:)``). A user registered on
/// the device before (a passcode reset) needs no approval. So a tablet's files and someone's password are not
/// enough to join it and receive its store key.
public struct DeviceRegistrationStep: OnboardingStep {
    public var name: String { "device registration" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        guard let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] else {
            throw FlowsError(.stepFailed, "Device registration needs discovery and sign-in before it.")
        }
        let key = P256.Signing.PrivateKey()
        try await save(key.rawRepresentation, SecureStoreKey.signingKey, in: store)
        var deviceKey = context.info[.deviceKey].flatMap { try? P256.Signing.PrivateKey(rawRepresentation: $0) }
        let others = await context.users.activeUsers.filter { $0.onboardingID != context.onboardingID }
        if deviceKey == nil && others.isEmpty { deviceKey = P256.Signing.PrivateKey() }
        let user = context.info[.serverUser]?.name ?? ""
        // The first user of an emptied tablet sends the slips of users who left it offline (a store wiped by the
        // retry limit): the server ends their registrations, and this user re-keys the tablet.
        let slips = DepartureSlips(storage: context.storage)
        let departures = others.isEmpty ? (try? slips.departed()) ?? [] : []
        func register(_ deviceKey: P256.Signing.PrivateKey?) async throws(BatonClientError) {
            var proof: Data?
            if let deviceKey {
                let message = Self.joinMessage(device: context.deviceID, user: user, key: key.publicKey)
                proof = try? deviceKey.signature(for: message).rawRepresentation
            }
            try await context.client.registerDevice(
                configuration, deviceID: context.deviceID, publicKey: key.publicKey.x963Representation,
                deviceKey: deviceKey?.publicKey.x963Representation, deviceProof: proof, departures: departures,
                token: tokens.accessToken)
        }
        do {
            try await register(deviceKey)
        } catch  where error.serverCode == "DeviceProofRequired" && deviceKey == nil && !others.isEmpty {
            // The display name alone could be anyone's (an identity provider's `name` claim is not unique): the
            // person approving sees the account too.
            let newcomer =
                context.info[.serverUser].map { $0.displayName == $0.name ? $0.name : "\($0.displayName) (\($0.name))" }
                ?? user
            let approved = try await Self.approvedDeviceKey(&context, others: others, newUser: newcomer)
            do { try await register(approved) } catch { throw flowsError(error, doing: "register this device") }
            deviceKey = approved
        } catch {
            throw flowsError(error, doing: "register this device")
        }
        try? slips.forget(departures)
        if let deviceKey {
            try await save(deviceKey.rawRepresentation, SecureStoreKey.deviceKey, in: store)
            context.info[.deviceKey] = deviceKey.rawRepresentation
            // This user's own slip, signed now while the device key is at hand.
            if let slip = try? SignedDeparture(
                deviceID: context.deviceID, user: user, keyID: Self.keyID(of: key.publicKey), deviceKey: deviceKey)
            {
                try slips.keep(slip, for: context.onboardingID)
            }
        }
        context.info[.signingKey] = key.rawRepresentation
        context.info[.registeredDevice] = true
    }

    /// The bytes the device key signs to let `user` register `key` here (as the server checks them).
    static func joinMessage(device: String, user: String, key: P256.Signing.PublicKey) -> Data {
        Data(DeviceJoin.message(device: device, user: user, keyID: keyID(of: key)))
    }

    /// A signing key's id as the server names it: base64url of the SHA-256 of its X9.63 form.
    static func keyID(of key: P256.Signing.PublicKey) -> String {
        Data(SHA256.hash(data: key.x963Representation)).base64URLEncoded
    }

    /// The device key from the secure store of a user of this device who approves, asked until the passcode is
    /// right (wrong passcodes count against that user's retry limit, as at unlock).
    static func approvedDeviceKey(_ context: inout OnboardingContext, others: [UserManager.User], newUser: String)
        async throws -> P256.Signing.PrivateKey
    {
        var problem: String?
        while true {
            let (id, passcode) = try await context.presenter.approver(for: newUser, among: others, problem: problem)
            let approver = others.first { $0.onboardingID == id }?.displayName ?? "that user"
            let store: SecureStore
            do {
                store = try SecureStore.open(at: context.storage.secureStoreURL(for: id), passcode: passcode)
            } catch  where error.code == .wrongPasscode {
                problem = error.message
                continue
            } catch {
                throw FlowsError(.stepFailed, "\(approver) cannot approve: \(error.message)")
            }
            guard let raw = try? await store.value(Data.self, forKey: SecureStoreKey.deviceKey),
                let key = try? P256.Signing.PrivateKey(rawRepresentation: raw)
            else {
                problem =
                    "\(approver)'s secure store holds no device key (onboarded before device keys); another user approves."
                continue
            }
            return key
        }
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        context.info[.signingKey] = try await load(Data.self, SecureStoreKey.signingKey, from: store, step: name)
        context.info[.deviceKey] = try? await store.value(Data.self, forKey: SecureStoreKey.deviceKey)
    }

    public func reset(_ context: inout OnboardingContext) async {
        guard context.flowType == .reset || context.info[.registeredDevice] == true,
            let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens]
        else { return }
        try? await context.client.unregisterDevice(
            configuration, deviceID: context.deviceID, token: tokens.accessToken)
        context.info[.registeredDevice] = nil
    }
}

/// Fetches the device's store key (which encrypts the shared offline store) into the user's secure store.
public struct StoreKeyStep: OnboardingStep {
    public var name: String { "store key" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        guard let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] else {
            throw FlowsError(.stepFailed, "The store-key fetch needs discovery and sign-in before it.")
        }
        let key: Data
        do {
            key = try await context.client.storeKey(
                configuration, deviceID: context.deviceID, token: tokens.accessToken)
        } catch {
            throw flowsError(error, doing: "fetch the device's store key")
        }
        try await save(key, SecureStoreKey.storeKey, in: store)
        context.info[.storeKey] = key
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        context.info[.storeKey] = try await load(Data.self, SecureStoreKey.storeKey, from: store, step: name)
    }
}

/// Baton's standard flows, with the app's own steps after the standard ones, and the consent step when the app
/// has consent forms.
public struct StandardFlowProvider: OnboardingFlowProvider {
    /// The app's steps, run after Baton's in every flow.
    public var appSteps: [any OnboardingStep]
    /// The consent the app asks for (``ConsentStep``); none: no consent step.
    public var consentForms: [ConsentForm]

    public init(appSteps: [any OnboardingStep] = [], consentForms: [ConsentForm] = []) {
        self.appSteps = appSteps
        self.consentForms = consentForms
    }

    public func flow(for type: OnboardingFlowType) -> OnboardingFlow {
        let consent: [any OnboardingStep] = consentForms.isEmpty ? [] : [ConsentStep(forms: consentForms)]
        let onboarding: [any OnboardingStep] =
            [DiscoveryStep(), SignInStep()] + consent + [
                SettingsExchangeStep(), PasscodeStep(), DeviceRegistrationStep(), StoreKeyStep(),
            ]
        switch type {
        case .onboard, .resetPasscode, .reset:
            return OnboardingFlow(type: type, steps: onboarding + appSteps)
        case .restore:
            let steps: [any OnboardingStep] = [
                PasscodeStep(), DiscoveryStep(), SignInStep(), SettingsExchangeStep(), DeviceRegistrationStep(),
                StoreKeyStep(),
            ]
            return OnboardingFlow(type: type, steps: steps + consent + appSteps)
        case .background:
            return OnboardingFlow(type: type, steps: appSteps)
        }
    }
}
