import BatonClient
import BatonOData
import Crypto
import Foundation

/// The users of this device (SAP: UserManager): who they are, where their onboarding stands, who restores
/// next. Kept encrypted in ``DeviceStorage``; observers hear of users added, switched and removed.
public actor UserManager {
    /// Where a user's onboarding stands.
    public enum Status: String, Sendable, Hashable, Codable {
        case new, onboardInProgress, success, restoreInProgress, resetPasscodeInProgress, failed, terminated
    }

    /// A user on this device.
    public struct User: Sendable, Hashable, Codable, Identifiable {
        /// The device-local id of this user's onboarding (names their secure store).
        public var onboardingID: UUID
        /// The user's name on the server, once signed in.
        public var serverUserID: String?
        public var displayName: String
        /// The server role (`ground-staff`, `supervisor`, `admin`), once signed in.
        public var role: String?
        public var status: Status
        public var lastSignIn: Date?
        /// This user's changes waiting on the device for upload, as the app last counted them (the offline
        /// store is encrypted, so the user list before sign-in shows this copy).
        public var pendingChanges: Int?
        /// Whether ``pendingChanges`` was counted as the offline store closed, so nothing can have changed it since;
        /// a count written while the store was open (and the app may have ended without closing it) is not.
        public var pendingChangesCountedAtClose: Bool?
        /// What the user agreed to (``ConsentStep``), when the app asks.
        public var consent: Consent?

        public var id: UUID { onboardingID }

        public init(
            onboardingID: UUID, serverUserID: String? = nil, displayName: String, role: String? = nil,
            status: Status = .new, lastSignIn: Date? = nil
        ) {
            self.onboardingID = onboardingID
            self.serverUserID = serverUserID
            self.displayName = displayName
            self.role = role
            self.status = status
            self.lastSignIn = lastSignIn
        }
    }

    /// What observers hear.
    public enum Event: Sendable, Hashable {
        case userAdded(User)
        case userSwitched(from: User?, to: User)
        case userRemoved(User)
    }

    struct Registry: Codable {
        var users: [User] = []
        var transientUser: UUID?
        var currentUser: UUID?
        /// The server's settings as this device last learned them (from any user's session), and their ETag: what
        /// holds offline, for every user.
        var settings: ClientSettings?
        var settingsETag: String?
    }

    let storage: DeviceStorage
    var registry: Registry
    var observers: [UUID: @Sendable (Event) -> Void] = [:]

    /// Loads the registry of the device (empty on first use).
    ///
    /// - Throws: ``FlowsError`` `Storage` when the registry exists but cannot be decrypted or read.
    public init(storage: DeviceStorage) throws(FlowsError) {
        self.storage = storage
        registry = try Self.load(storage)
    }

    static func load(_ storage: DeviceStorage) throws(FlowsError) -> Registry {
        guard let sealed = try? Data(contentsOf: storage.registryURL) else { return Registry() }
        let key = try storage.deviceKey()
        do {
            let box = try AES.GCM.SealedBox(combined: sealed)
            let plain = try AES.GCM.open(box, using: key, authenticating: Data("baton-user-registry-v1".utf8))
            return try JSONDecoder().decode(Registry.self, from: plain)
        } catch {
            throw FlowsError(
                .storage, "The user registry in \(storage.directory.path) is damaged or was made with another key.")
        }
    }

    func save() throws(FlowsError) {
        let key = try storage.deviceKey()
        do {
            let plain = try JSONEncoder().encode(registry)
            let sealed = try AES.GCM.seal(plain, using: key, authenticating: Data("baton-user-registry-v1".utf8))
            guard let combined = sealed.combined else { throw FlowsError(.storage, "Cannot seal the registry.") }
            try storage.write(combined, to: storage.registryURL)
        } catch let error as FlowsError {
            throw error
        } catch {
            throw FlowsError(.storage, "Cannot save the user registry.")
        }
    }

    // MARK: Reading

    /// Every user, in the order they were added.
    public var allUsers: [User] { registry.users }

    /// Users who can sign in on this device (onboarded, not failed or terminated).
    public var activeUsers: [User] {
        registry.users.filter { [.success, .restoreInProgress, .resetPasscodeInProgress].contains($0.status) }
    }

    public func user(_ onboardingID: UUID) -> User? { registry.users.first { $0.onboardingID == onboardingID } }

    /// The onboarded user with this server account, if any.
    public func user(serverUserID: String) -> User? {
        registry.users.first { $0.serverUserID == serverUserID && $0.status != .failed && $0.status != .terminated }
    }

    /// The user the next restore pre-selects (SAP: transientUser).
    public var transientUser: User? { registry.transientUser.flatMap { id in user(id) } }

    /// The user whose session is (or was last) open.
    public var currentUser: User? { registry.currentUser.flatMap { id in user(id) } }

    // MARK: Changing

    /// Adds or replaces a user. Observers hear `userAdded` once the user's onboarding succeeded (here, or when
    /// ``setStatus(_:for:)`` later marks it so), never for an onboarding that failed or was refused.
    public func upsert(_ user: User) throws(FlowsError) {
        if let index = registry.users.firstIndex(where: { $0.onboardingID == user.onboardingID }) {
            let before = registry.users[index].status
            registry.users[index] = user
            try save()
            if before == .onboardInProgress && user.status == .success { emit(.userAdded(user)) }
        } else {
            registry.users.append(user)
            try save()
            if user.status == .success { emit(.userAdded(user)) }
        }
    }

    /// Changes a user's status.
    public func setStatus(_ status: Status, for onboardingID: UUID) throws(FlowsError) {
        guard let index = registry.users.firstIndex(where: { $0.onboardingID == onboardingID }) else { return }
        let before = registry.users[index].status
        registry.users[index].status = status
        try save()
        if before == .onboardInProgress && status == .success { emit(.userAdded(registry.users[index])) }
    }

    /// The server's settings as this device last learned them, with their ETag.
    public var lastKnownSettings: (settings: ClientSettings, etag: String?)? {
        registry.settings.map { ($0, registry.settingsETag) }
    }

    /// Keeps the settings the server just sent as the device's last known ones.
    public func setLastKnownSettings(_ settings: ClientSettings, etag: String?) throws(FlowsError) {
        guard registry.settings != settings || registry.settingsETag != etag else { return }
        registry.settings = settings
        registry.settingsETag = etag
        try save()
    }

    /// Pre-selects the user the next restore opens (nil: ask).
    public func setTransientUser(_ onboardingID: UUID?) throws(FlowsError) {
        registry.transientUser = onboardingID
        try save()
    }

    /// Records that `onboardingID`'s session is now the open one.
    public func setCurrentUser(_ onboardingID: UUID, signedInAt: Date) throws(FlowsError) {
        let previous = currentUser
        guard let index = registry.users.firstIndex(where: { $0.onboardingID == onboardingID }) else { return }
        registry.users[index].lastSignIn = signedInAt
        registry.currentUser = onboardingID
        registry.transientUser = nil
        try save()
        if previous?.onboardingID != onboardingID { emit(.userSwitched(from: previous, to: registry.users[index])) }
    }

    /// Records how many changes each user has waiting on the device, keyed by server user name (users not
    /// named have none).
    public func setPendingChanges(_ counts: [String: Int], countedAtClose: Bool = false) throws(FlowsError) {
        var changed = false
        for index in registry.users.indices {
            let count = registry.users[index].serverUserID.flatMap { counts[$0] } ?? 0
            if registry.users[index].pendingChanges != count
                || registry.users[index].pendingChangesCountedAtClose != countedAtClose
            {
                registry.users[index].pendingChanges = count
                registry.users[index].pendingChangesCountedAtClose = countedAtClose
                changed = true
            }
        }
        if changed { try save() }
    }

    /// The offline store opened: from now on the counts change with each change, so none counts as taken at close
    /// (the user list keeps showing them).
    public func forgetPendingChanges() throws(FlowsError) {
        guard registry.users.contains(where: { $0.pendingChangesCountedAtClose == true }) else { return }
        for index in registry.users.indices { registry.users[index].pendingChangesCountedAtClose = false }
        try save()
    }

    /// Removes a user from the registry.
    public func remove(_ onboardingID: UUID) throws(FlowsError) {
        guard let index = registry.users.firstIndex(where: { $0.onboardingID == onboardingID }) else { return }
        let removed = registry.users.remove(at: index)
        if registry.currentUser == onboardingID { registry.currentUser = nil }
        if registry.transientUser == onboardingID { registry.transientUser = nil }
        try save()
        // Only users who were announced are announced gone.
        if removed.status != .onboardInProgress && removed.status != .new { emit(.userRemoved(removed)) }
    }

    // MARK: Observers

    /// Calls `observer` for every event from now on; returns a token for ``removeObserver(_:)``.
    @discardableResult
    public func addObserver(_ observer: @escaping @Sendable (Event) -> Void) -> UUID {
        let token = UUID()
        observers[token] = observer
        return token
    }

    public func removeObserver(_ token: UUID) { observers[token] = nil }

    func emit(_ event: Event) {
        for observer in observers.values { observer(event) }
    }
}
