import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation
import Synchronization

/// An open, unlocked user session: the user, their secure store, their authorised connection and what the
/// flow gathered (settings, signing key, store key).
///
/// A session ends with ``invalidate()`` — the session manager calls it when it locks, closes, signs out or
/// removes the user — and from then on every handle obtained from it refuses to work: the secure store and the
/// authorised connection throw `SessionInvalidated`, and so do ``signingKey()`` and ``storeKey``.
public struct OnboardingSession: Sendable {
    public let user: UserManager.User
    public let deviceID: String
    public let secureStore: SecureStore
    /// Requests with this user's tokens (refreshed and saved to the secure store as they rotate).
    public let authorized: AuthorizedSession
    /// The server's settings as last known (the session manager refreshes them).
    public internal(set) var settings: ClientSettings
    /// Everything the flow's steps handed on, including the app's own keys — empty once the session was
    /// invalidated, so no copy of the session hands out its tokens or keys any more.
    public var info: OnboardingInfo { validity.isValid ? storedInfo : OnboardingInfo() }
    let storedInfo: OnboardingInfo
    let validity = Validity()

    init(
        user: UserManager.User, deviceID: String, secureStore: SecureStore, authorized: AuthorizedSession,
        settings: ClientSettings, info: OnboardingInfo
    ) {
        self.user = user
        self.deviceID = deviceID
        self.secureStore = secureStore
        self.authorized = authorized
        self.settings = settings
        self.storedInfo = info
    }

    /// Whether this session is still open (not invalidated).
    public var isValid: Bool { validity.isValid }

    /// Ends the session: its secure store closes (key and values leave memory) and its connection sends nothing
    /// more. Every copy of this session shares the end.
    public func invalidate() async {
        validity.invalidate()
        await secureStore.close()
        await authorized.invalidate()
    }

    /// The user's signing key on this device (for on-behalf uploads of their changes).
    public func signingKey() throws(FlowsError) -> P256.Signing.PrivateKey {
        try requireValid()
        guard let raw = info[.signingKey], let key = try? P256.Signing.PrivateKey(rawRepresentation: raw) else {
            throw FlowsError(.storage, "The signing key of \(user.displayName) is missing or damaged; reset the user.")
        }
        return key
    }

    /// The device's store key, from this user's copy (`nil` once the session was invalidated).
    public var storeKey: Data? { validity.isValid ? info[.storeKey] : nil }

    func requireValid() throws(FlowsError) {
        guard validity.isValid else {
            throw FlowsError(
                .sessionInvalidated, "\(user.displayName)'s session was locked, closed or removed; open it again.",
                onboardingID: user.onboardingID)
        }
    }

    /// Shared by every copy of one session.
    final class Validity: Sendable {
        let state = Mutex(true)
        var isValid: Bool { state.withLock { $0 } }
        func invalidate() { state.withLock { $0 = false } }
    }
}

/// Runs the flow the onboarding-ID manager chose (SAP: OnboardingController) and keeps the user registry's
/// statuses in step with it.
public struct OnboardingController: Sendable {
    public let flowProvider: any OnboardingFlowProvider
    public let configuration: FlowsConfiguration
    let client: BatonClient
    let presenter: any OnboardingPresenter
    let users: UserManager
    let storage: DeviceStorage

    /// Runs `type` for `onboardingID` and returns the context the steps left.
    func run(_ type: OnboardingFlowType, for onboardingID: UUID, info: OnboardingInfo = OnboardingInfo())
        async throws(FlowsError) -> OnboardingContext
    {
        var context = OnboardingContext(
            onboardingID: onboardingID, flowType: type, deviceID: try storage.deviceID(), client: client,
            presenter: presenter, users: users, storage: storage, configuration: configuration, info: info)
        let flow = flowProvider.flow(for: type)
        let before = await users.user(onboardingID)
        switch type {
        case .onboard:
            try await users.upsert(
                UserManager.User(onboardingID: onboardingID, displayName: "New user", status: .onboardInProgress))
        case .restore: try await users.setStatus(.restoreInProgress, for: onboardingID)
        case .resetPasscode: try await users.setStatus(.resetPasscodeInProgress, for: onboardingID)
        case .reset, .background: break
        }
        do {
            try await flow.run(&context, errorHandler: configuration.errorHandler)
        } catch {
            switch type {
            case .onboard:
                try await users.remove(onboardingID)
            case .restore where error.code == .wiped:
                // Gone offline: the device's slip says so to the server at the next chance.
                try? DepartureSlips(storage: storage).depart(onboardingID)
                try await users.remove(onboardingID)
            case .restore, .resetPasscode:
                let intact = FileManager.default.fileExists(
                    atPath: storage.secureStoreURL(for: onboardingID).path)
                try await users.setStatus(intact ? (before?.status ?? .success) : .failed, for: onboardingID)
            case .reset, .background:
                break
            }
            throw error
        }
        if type == .onboard || type == .restore || type == .resetPasscode {
            try await users.setStatus(.success, for: onboardingID)
            // An earlier failed entry of the same account is replaced by this one.
            if let name = context.info[.serverUser]?.name {
                for stale in await users.allUsers
                where stale.serverUserID == name && stale.onboardingID != onboardingID && stale.status == .failed {
                    try await users.remove(stale.onboardingID)
                }
            }
        }
        return context
    }
}
