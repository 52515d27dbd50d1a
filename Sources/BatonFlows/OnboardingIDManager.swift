import Foundation

/// Which flow to run when the app opens, and for whom.
public enum OnboardingDecision: Sendable, Hashable {
    /// Onboard a new user under this onboarding id.
    case onboard(UUID)
    /// Restore this user.
    case restore(UUID)
}

/// Decides whom the next open is for, and hears which onboarding ids come and go (SAP: OnboardingIDManaging,
/// with its `flowToStart`, `store` and `remove`). An app with its own way of choosing users — a badge reader,
/// a kiosk that always opens the last user — brings its own.
public protocol OnboardingIDManaging: Sendable {
    /// Which flow to run for whom when the app opens (or switches users without naming one).
    func flowToStart(users: UserManager, presenter: any OnboardingPresenter) async throws(FlowsError)
        -> OnboardingDecision
    /// Called after an onboarding succeeded: `onboardingID` is now a user of this device.
    func store(_ onboardingID: UUID, users: UserManager) async
    /// Called after a user left the device (removed, withdrawn by the server, or wiped).
    func remove(_ onboardingID: UUID, users: UserManager) async
}

extension OnboardingIDManaging {
    /// Baton's own managers keep nothing beyond the user registry.
    public func store(_ onboardingID: UUID, users: UserManager) async {}
    public func remove(_ onboardingID: UUID, users: UserManager) async {}
}

/// One user per device (SAP: SingleUserOnboardingIDManager): restore them if onboarded, else onboard.
public struct SingleUserOnboardingIDManager: OnboardingIDManaging {
    public init() {}

    public func flowToStart(users: UserManager, presenter: any OnboardingPresenter) async throws(FlowsError)
        -> OnboardingDecision
    {
        let current = await users.currentUser
        let first = await users.activeUsers.first
        if let user = current ?? first, user.status == .success {
            return .restore(user.onboardingID)
        }
        return .onboard(UUID())
    }
}

/// Many users per device (SAP: MultiUserOnboardingIDManager): the pre-selected user if there is one,
/// otherwise the user picker (with "add user"); onboarding when nobody is on the device yet.
public struct MultiUserOnboardingIDManager: OnboardingIDManaging {
    public init() {}

    public func flowToStart(users: UserManager, presenter: any OnboardingPresenter) async throws(FlowsError)
        -> OnboardingDecision
    {
        if let transient = await users.transientUser, transient.status == .success {
            return .restore(transient.onboardingID)
        }
        let active = await users.activeUsers
        guard !active.isEmpty else { return .onboard(UUID()) }
        let choice: UserChoice
        do {
            choice = try await presenter.pickUser(active)
        } catch let error as FlowsError {
            throw error
        } catch {
            throw FlowsError(.cancelled, "No user was chosen.")
        }
        switch choice {
        case .addUser:
            return .onboard(UUID())
        case .user(let id):
            guard active.contains(where: { $0.onboardingID == id }) else {
                throw FlowsError(.unknownUser, "The chosen user is not on this device.")
            }
            return .restore(id)
        }
    }
}
