import BatonClient
import BatonSecureStore
import Foundation

/// The app's entry point to the onboarding lifecycle (SAP: OnboardingSessionManager): open (onboard or
/// restore), lock and unlock, add and switch users, reset a passcode, sign out, close, remove users — for one
/// user or many on one device.
///
/// Switching to an already-onboarded user needs no network: restore reads everything from that user's
/// secure store.
public actor OnboardingSessionManager {
    /// Where the session stands.
    public enum State: Sendable, Hashable {
        /// No session: the next ``open()`` onboards or restores.
        case closed
        /// A user is signed in and their secure store is open.
        case open
        /// The session is locked; ``unlock()`` asks for the passcode.
        case locked
    }

    public internal(set) var state = State.closed
    /// The open session, when ``state`` is `open`.
    public internal(set) var session: OnboardingSession?
    /// The user whose session is locked.
    public internal(set) var lockedUser: UUID?
    var lastActivity: Date
    /// When the server was last asked for settings and the device's status (``contactServer()``).
    var lastContact: Date?
    /// When ``contactServer()`` last tried, reachable or not.
    var lastContactAttempt: Date?
    /// The users whose sign-in the server has been told is on this device since the app started (a status call
    /// with their token): it then counts as their presence here, and ends with the device.
    var announcedSignIns: Set<UUID> = []

    public nonisolated let users: UserManager
    public nonisolated let configuration: FlowsConfiguration
    public nonisolated let client: BatonClient
    /// This device's id (made on first use and kept in the data directory).
    public nonisolated let deviceID: String
    let storage: DeviceStorage
    let presenter: any OnboardingPresenter
    let controller: OnboardingController
    let idManager: any OnboardingIDManaging

    /// A session manager for the server at `serverURL`, keeping its files in `directory` and the device key in
    /// `keyStore` (by default a file in `directory`, ``FileDeviceKeyStore``).
    ///
    /// - Throws: ``FlowsError``: `MultiUserNeedsAuthentication` when multi-user mode is asked for with flows
    ///   that have no sign-in or passcode step; `Storage` when the directory or registry cannot be used.
    public init(
        serverURL: URL, directory: URL, configuration: FlowsConfiguration, presenter: any OnboardingPresenter,
        flowProvider: any OnboardingFlowProvider = StandardFlowProvider(),
        idManager: (any OnboardingIDManaging)? = nil, transport: any HTTPTransport = AsyncHTTPClientTransport(),
        keyStore: (any DeviceKeyStore)? = nil
    ) throws(FlowsError) {
        if configuration.mode == .multiUser {
            let steps = flowProvider.flow(for: .onboard).steps
            guard steps.contains(where: { $0 is SignInStep }), steps.contains(where: { $0 is PasscodeStep }) else {
                throw FlowsError(
                    .multiUserNeedsAuthentication,
                    "Multi-user mode needs users to sign in and protect their data with a passcode; the app's onboarding flow has no sign-in or passcode step."
                )
            }
        }
        storage = try DeviceStorage(directory: directory, keyStore: keyStore)
        users = try UserManager(storage: storage)
        deviceID = try storage.deviceID()
        self.configuration = configuration
        self.presenter = presenter
        client = BatonClient(serverURL: serverURL, transport: transport, appVersion: configuration.appVersion)
        controller = OnboardingController(
            flowProvider: flowProvider, configuration: configuration, client: client, presenter: presenter,
            users: users, storage: storage)
        self.idManager =
            idManager
            ?? (configuration.mode == .multiUser
                ? MultiUserOnboardingIDManager() : SingleUserOnboardingIDManager())
        lastActivity = configuration.now()
    }

    // MARK: Opening

    /// Onboards or restores, as the onboarding-ID manager decides (multi-user: the user picker).
    ///
    /// - Throws: ``FlowsError``; `UserAlreadyExists` pre-selects that user for the next `open()`.
    @discardableResult
    public func open() async throws(FlowsError) -> OnboardingSession {
        if let session, state == .open { return session }
        if state == .locked, let lockedUser, configuration.mode == .singleUser {
            return try await run(.restore(lockedUser))
        }
        return try await run(try await idManager.flowToStart(users: users, presenter: presenter))
    }

    /// Onboards another user while others stay on the device (the open session is locked first).
    @discardableResult
    public func addUser() async throws(FlowsError) -> OnboardingSession {
        try requireMultiUser("add a user")
        // The server may have switched multi-user mode off since: no one new joins, everyone here stays.
        let known = await users.lastKnownSettings?.settings ?? session?.settings
        if known?.sharedDevices.multiUser == false, !(await users.activeUsers.isEmpty) {
            throw FlowsError(
                .multiUserNotAllowed,
                "The server allows one user per device now; the users already here keep working, but no one new can be added."
            )
        }
        // The open session approves the newcomer with its device key (no passcode needed: it is unlocked).
        var info = OnboardingInfo()
        info[.deviceKey] = session?.info[.deviceKey]
        await lock()
        return try await run(.onboard(UUID()), info: info)
    }

    /// Locks the open session and opens another user's: `onboardingID`, or the one picked in the user list.
    /// Works without network for onboarded users.
    @discardableResult
    public func switchUser(to onboardingID: UUID? = nil) async throws(FlowsError) -> OnboardingSession {
        try requireMultiUser("switch users")
        await lock()
        if let onboardingID {
            guard let user = await users.user(onboardingID), user.status == .success else {
                throw FlowsError(.unknownUser, "That user is not on this device.")
            }
            return try await run(.restore(onboardingID))
        }
        return try await run(try await idManager.flowToStart(users: users, presenter: presenter))
    }

    func run(_ decision: OnboardingDecision, info: OnboardingInfo = OnboardingInfo()) async throws(FlowsError)
        -> OnboardingSession
    {
        let (type, id): (OnboardingFlowType, UUID)
        switch decision {
        case .onboard(let new): (type, id) = (.onboard, new)
        case .restore(let existing): (type, id) = (.restore, existing)
        }
        let session: OnboardingSession
        var settingsFromServer = false
        do {
            let context = try await controller.run(type, for: id, info: info)
            settingsFromServer = context.info[.settingsFromServer] == true
            session = try await assemble(context)
        } catch {
            if error.code == .forgotPasscode, type == .restore {
                // "Forgot passcode" at the unlock prompt: the same account signs in and sets a new passcode.
                return try await resetPasscode(for: id)
            }
            if error.code == .userAlreadyExists, let existing = error.onboardingID {
                try await users.setTransientUser(existing)
            }
            if error.code == .wiped, lockedUser == id {
                lockedUser = nil
                state = .closed
            }
            throw error
        }
        if type == .onboard { await idManager.store(id, users: users) }
        // Onboarding and a passcode reset register the device with the new sign-in, which links it there.
        if type == .onboard || type == .resetPasscode { announcedSignIns.insert(id) }
        // Online, the unlock or switch also learns what the server changed for this device and its users.
        // The restore's settings step may just have asked for the settings: then only the rest is asked.
        if type == .restore { _ = try await contactServer(settingsFromServer: settingsFromServer) }
        return self.session ?? session
    }

    func assemble(_ context: OnboardingContext) async throws(FlowsError) -> OnboardingSession {
        guard let store = context.secureStore, let settings = context.info[.settings],
            let user = await users.user(context.onboardingID)
        else {
            throw FlowsError(.stepFailed, "The flow finished without a secure store, sign-in or settings.")
        }
        let authorized = try context.authorizedSession()
        var info = context.info
        info[.enteredPasscode] = nil
        // What this flow heard from the server says nothing about the next contact.
        info[.settingsFromServer] = nil
        let session = OnboardingSession(
            user: user, deviceID: context.deviceID, secureStore: store, authorized: authorized, settings: settings,
            info: info)
        try await users.setCurrentUser(user.onboardingID, signedInAt: self.configuration.now())
        self.session = session
        state = .open
        lockedUser = nil
        lastActivity = self.configuration.now()
        return session
    }

    // MARK: Lock, unlock, close

    /// Locks the open session: its secure store is closed until the passcode is entered again.
    public func lock() async {
        guard let session else { return }
        lockedUser = session.user.onboardingID
        self.session = nil
        state = .locked
        await runBackground(session)
        await session.invalidate()
    }

    /// Runs the background flow for a session that is being locked or closed: each step's `background` —
    /// the offline-store step closes the store and forgets its key. Best effort.
    func runBackground(_ session: OnboardingSession) async {
        _ = try? await controller.run(.background, for: session.user.onboardingID, info: session.info)
    }

    /// Unlocks the locked session with the user's passcode (asked by the presenter). No network needed.
    @discardableResult
    public func unlock() async throws(FlowsError) -> OnboardingSession {
        guard state == .locked, let lockedUser else {
            throw FlowsError(.notOpen, "There is no locked session to unlock.")
        }
        return try await run(.restore(lockedUser))
    }

    /// Notes user activity (resets the inactivity timer).
    public func recordActivity() { lastActivity = configuration.now() }

    /// Locks the session when it was inactive for the policy's lock timeout; returns whether it locked.
    @discardableResult
    public func lockIfInactive() async -> Bool {
        guard state == .open, let session else { return false }
        let timeout = TimeInterval(session.settings.passcode.lockTimeoutSeconds)
        guard timeout > 0, configuration.now().timeIntervalSince(lastActivity) >= timeout else { return false }
        await lock()
        return true
    }

    /// Closes the session locally (nothing is sent to the server; tokens stay for the next restore).
    public func close() async {
        if let session {
            await runBackground(session)
            await session.invalidate()
        }
        session = nil
        lockedUser = nil
        state = .closed
    }

    /// What the signed-in user agreed to (``ConsentStep``); nil when nobody is signed in or the app asks none.
    public var consent: Consent? {
        get async {
            guard let session, state == .open else { return nil }
            return await users.user(session.user.onboardingID)?.consent
        }
    }

    /// Changes the signed-in user's answer to `kind`. Usage consent is changed freely. Data consent is what the
    /// app needs to be used at all: withdrawing it is removing oneself from the device
    /// (``removeUser(_:)``), so it is refused here with that advice.
    ///
    /// - Throws: ``FlowsError`` `NotOpen`; `ConsentDeclined` for withdrawing data consent.
    public func changeConsent(_ kind: ConsentKind, to agreed: Bool) async throws(FlowsError) {
        guard let session, state == .open, var user = await users.user(session.user.onboardingID) else {
            throw FlowsError(.notOpen, "Nobody is signed in.")
        }
        if kind == .data, !agreed {
            throw FlowsError(
                .consentDeclined,
                "Without data consent Baton cannot be used: to withdraw it, remove yourself from this device (your changes are uploaded first).",
                onboardingID: user.onboardingID)
        }
        var consent = user.consent ?? Consent(answers: [:], decidedAt: configuration.now())
        consent.answers[kind] = agreed
        consent.decidedAt = configuration.now()
        user.consent = consent
        try await users.upsert(user)
        lastActivity = configuration.now()
    }

    /// Signs the user out: the server revokes their tokens; their data on the device stays, and their next
    /// sign-in with network asks for the password again (offline, the passcode still opens their work).
    public func signOut() async throws(FlowsError) {
        guard let session else { throw FlowsError(.notOpen, "Nobody is signed in.") }
        do {
            try await session.authorized.revoke()
        } catch {
            throw flowsError(error, doing: "sign out on the server")
        }
        // The next restore with network asks for the password again (the tokens it has are revoked).
        try? await session.secureStore.set(true, forKey: SecureStoreKey.signedOut)
        await close()
    }

    // MARK: Passcode reset

    /// Resets the passcode of the open or locked user: they sign in again as the same account, choose a new
    /// passcode, and get a new secure store with new tokens, a new (re-registered) signing key and the store key.
    @discardableResult
    public func resetPasscode(for onboardingID: UUID? = nil) async throws(FlowsError) -> OnboardingSession {
        guard let id = onboardingID ?? session?.user.onboardingID ?? lockedUser else {
            throw FlowsError(.notOpen, "Choose the user whose passcode is reset.")
        }
        await session?.invalidate()
        session = nil
        state = .closed
        do {
            let context = try await controller.run(.resetPasscode, for: id)
            return try await assemble(context)
        } catch {
            if await users.user(id)?.status == .success {
                lockedUser = id
                state = .locked
            }
            throw error
        }
    }

    // MARK: Removal

    /// Removes a user from this device: the user themself (no argument, or their own id), or — for an admin
    /// with an open session — another user. Wipes the user's secure store and registry entry and, when the
    /// user themself is removed online, unregisters the device and revokes the session on the server. Then
    /// opens another user's session or starts onboarding (through ``open()``) when the current user was
    /// removed; returns that session, or the admin's still-open one.
    ///
    /// - Throws: ``FlowsError`` `NotAllowed` for a non-admin removing someone else; whatever the
    ///   configuration's `removalGuard` throws (pending changes), in which case nothing is removed.
    @discardableResult
    public func removeUser(_ onboardingID: UUID? = nil) async throws -> OnboardingSession? {
        let current = session?.user.onboardingID ?? lockedUser
        guard let target = onboardingID ?? current, let user = await users.user(target) else {
            throw FlowsError(.unknownUser, "That user is not on this device.")
        }
        let removingSelf = target == current
        if !removingSelf {
            guard let session, session.user.role == "admin" else {
                throw FlowsError(.notAllowed, "Only an administrator with an open session may remove another user.")
            }
        }
        if let guardRemoval = configuration.removalGuard { try await guardRemoval(user) }
        let info = removingSelf ? (session?.info ?? OnboardingInfo()) : OnboardingInfo()
        _ = try await controller.run(.reset, for: target, info: info)
        if !removingSelf, let session, let name = user.serverUserID,
            let configuration = session.info[.serverConfiguration]
        {
            // Their registration and signing key on the server go too (best effort: offline, they stay until the
            // admin's next removal from the cockpit).
            try? await client.unregisterDevice(
                configuration, deviceID: deviceID, user: name, token: await session.authorized.tokens.accessToken)
        }
        try? SecureStore.delete(at: storage.secureStoreURL(for: target))
        // Offline, the server may not have heard: the slip tells it (a slip for a registration that already ended
        // ends nothing).
        try? DepartureSlips(storage: storage).depart(target)
        try await users.remove(target)
        await idManager.remove(target, users: users)
        guard removingSelf else { return session }
        await close()
        return try await open()
    }

    func requireMultiUser(_ action: String) throws(FlowsError) {
        guard configuration.mode == .multiUser else {
            throw FlowsError(.multiUserNotAllowed, "This app runs in single-user mode; it cannot \(action).")
        }
    }
}
