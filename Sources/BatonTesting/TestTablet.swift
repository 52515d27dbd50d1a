import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSecureStore
import Crypto
import Foundation

/// A shared tablet for tests, built as the app builds one: a device directory, its offline store, a scripted
/// presenter and a multi-user session manager, with cheap key derivation (a test's passcodes need no real work
/// factor).
///
/// Each user's sign-in (credentials, then a new passcode) is scripted in order when the tablet is made; nobody is
/// onboarded until the test says so (``onboardAll()``, or the manager's `open()` and `addUser()` by hand, which
/// take the scripted answers in turn). The store either follows the sessions by itself (`storeStep`: the
/// `BatonFlows/OfflineStoreStep` in the flows opens it per user and downloads) or is opened by the test
/// (`openStore(as:)`, ``switchTo(_:)``).
///
/// Used by one task at a time, as a tablet is used by one person at a time.
public final class TestTablet: @unchecked Sendable {
    /// A person on the tablet.
    public struct User: Sendable {
        /// Their name on the server.
        public var name: String
        /// Their display name on the server (what the user list shows and a pick names).
        public var displayName: String
        public var password: String
        public var passcode: String

        /// A person; `displayName` defaults to `name`.
        public init(_ name: String, displayName: String? = nil, password: String, passcode: String) {
            (self.name, self.displayName, self.password, self.passcode) = (
                name, displayName ?? name, password, passcode
            )
        }
    }

    /// What a tablet keeps offline unless a test says otherwise: the aircraft and every check.
    public static let aircraftAndChecks = [
        DefiningQuery(name: "aircraft", url: "Aircraft"), DefiningQuery(name: "checks", url: "PreflightChecks"),
    ]

    public let directory: URL
    public let presenter: ScriptedPresenter
    public let manager: OnboardingSessionManager
    public let store: OfflineStore
    public let users: [User]
    /// The session of the user the tablet was last switched to through ``switchTo(_:)`` or ``onboardAll()``.
    public private(set) var session: OnboardingSession?
    /// Each user's store credentials as their session last held them (a session that is no longer the open one
    /// has dropped its keys): what `openStore(as: name)` opens the store with, no passcode asked.
    private var credentials: [String: (user: OfflineUser, key: SymmetricKey)] = [:]

    /// Makes the tablet, each user's sign-in scripted in order, nobody onboarded.
    ///
    /// - Parameters:
    ///   - server: The server (or a proxy in front of it).
    ///   - users: The people, in the order they will sign in.
    ///   - directory: The device directory; a new temporary one by default.
    ///   - definingQueries: What the store keeps offline.
    ///   - storeStep: Whether the flows open the store per user and download (`BatonFlows/OfflineStoreStep`).
    ///   - transport: The HTTP transport of the sessions.
    ///   - idManager: How the manager keeps which user is onboarded (the flows' default when nil).
    ///   - configure: Changes to the flows' configuration (multi-user, cheap key derivation) before the manager
    ///     is made; it gets the store for rules that consult it.
    /// - Throws: When the directory, the store or the manager cannot be made.
    public init(
        server: URL, users: [User], directory: URL? = nil, definingQueries: [DefiningQuery] = aircraftAndChecks,
        storeStep: Bool = false, transport: any HTTPTransport = AsyncHTTPClientTransport(),
        idManager: (any OnboardingIDManaging)? = nil,
        configure: (inout FlowsConfiguration, OfflineStore) -> Void = { _, _ in }
    ) throws {
        let directory =
            directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("baton-tablet-\(UUID())")
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: try DeviceStorage(directory: directory).deviceID(), definingQueries: definingQueries)
        var configuration = FlowsConfiguration(mode: .multiUser)
        configuration.keyDerivation = { KeyDerivation(cost: 1 << 10) }
        configure(&configuration, store)
        let presenter = ScriptedPresenter(
            users.flatMap { user -> [ScriptedPresenter.Answer] in
                [.credentials(user.name, user.password), .newPasscode(user.passcode, confirmation: user.passcode)]
            })
        manager = try OnboardingSessionManager(
            serverURL: server, directory: directory, configuration: configuration, presenter: presenter,
            flowProvider: storeStep
                ? StandardFlowProvider(appSteps: [OfflineStoreStep(store: store)]) : StandardFlowProvider(),
            idManager: idManager, transport: transport)
        (self.directory, self.presenter, self.store, self.users) = (directory, presenter, store, users)
    }

    /// Onboards every user: the first opens the tablet, the others join it in order. The last one's session is
    /// left open (with `storeStep`, so is the store).
    ///
    /// - Returns: Each user's session, in order.
    /// - Throws: `BatonFlows/FlowsError` from the flows.
    @discardableResult
    public func onboardAll() async throws -> [OnboardingSession] {
        var sessions: [OnboardingSession] = []
        for index in users.indices {
            let session = index == 0 ? try await manager.open() : try await manager.addUser()
            try remember(session)
            sessions.append(session)
        }
        session = sessions.last
        return sessions
    }

    /// Closes the store and opens it again as `session`'s user, with the keys the session unlocked.
    ///
    /// - Throws: `BatonOffline/OfflineError` when the store does not open; a test failure when the session has
    ///   no store key.
    public func openStore(as session: OnboardingSession) async throws {
        let (user, key) = try remember(session)
        await store.close()
        try await store.open(as: user, key: key)
    }

    /// Closes the store and opens it again as `name`, with the keys their session held when it was last open, as
    /// a test that plays several people on the store without the session manager does.
    ///
    /// - Throws: When `name` was never onboarded or switched to here, or the store does not open.
    public func openStore(as name: String) async throws {
        guard let (user, key) = credentials[name] else { throw TestTabletError("\(name) has no session here yet.") }
        await store.close()
        try await store.open(as: user, key: key)
    }

    @discardableResult
    private func remember(_ session: OnboardingSession) throws -> (OfflineUser, SymmetricKey) {
        guard let key = session.storeKey, let name = session.user.serverUserID else {
            throw TestTabletError("\(session.user.displayName)'s session is not open: it has no store key.")
        }
        let credentials = (OfflineUser(name: name, signingKey: try session.signingKey()), SymmetricKey(data: key))
        self.credentials[name] = credentials
        return credentials
    }

    /// Switches to `name` as a person would (picks them in the user list, types their passcode; no network needed)
    /// and opens the store as theirs.
    ///
    /// - Returns: Their session.
    /// - Throws: When `name` is not one of the tablet's users, or the switch fails.
    @discardableResult
    public func switchTo(_ name: String) async throws -> OnboardingSession {
        guard let user = users.first(where: { $0.name == name }) else {
            throw TestTabletError("No user \(name) on this tablet.")
        }
        await presenter.append([.pick(user.displayName), .passcode(user.passcode)])
        let switched = try await manager.switchUser()
        try await openStore(as: switched)
        session = switched
        return switched
    }

    /// Closes the store and deletes the device directory.
    public func remove() async {
        await store.close()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// A test tablet was asked for what it cannot do.
public struct TestTabletError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
