import BatonFlows
import BatonSecureStore
import BatonServer
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle

/// A real baton-server on 127.0.0.1 (a free port) with its data in a temporary directory, for tests and the
/// demo: real HTTP, real SQLite, real tokens. Stop it to cut the network.
public final class LiveServer: Sendable {
    public let server: BatonServer
    /// `http://127.0.0.1:PORT`.
    public let url: URL
    public let directory: URL
    let group: ServiceGroup
    let task: Task<Void, any Error>

    /// Starts a server with fast password hashing (bcrypt cost 4) and `settings` applied (keys as in
    /// `baton-server settings set`).
    ///
    /// - Parameters:
    ///   - settings: server settings to apply.
    ///   - clock: the server's clock.
    ///   - directory: the data directory; a new temporary one when nil.
    ///   - port: the port; any free one when 0.
    ///   - dataService: limits and retention windows of the OData service.
    ///   - logger: where the server logs, with every request at `info` (its access log); none when nil.
    ///   - database: a PostgreSQL database to keep the state in (a master-key file is made in `directory`); SQLite
    ///     files in `directory` when nil.
    ///   - issuer: the URL devices are told to use (a proxy in front of the server); the listening address when
    ///     nil.
    /// - Returns: the running server.
    /// - Throws: when the server cannot be set up or does not start listening.
    public static func start(
        settings: [String: String] = [:], clock: ServerClock = .system, directory: URL? = nil, port: Int = 0,
        dataService: DataServiceConfiguration = DataServiceConfiguration(), logger: Logger? = nil,
        database: PostgresLocation? = nil, issuer: URL? = nil
    ) async throws -> LiveServer {
        let directory =
            directory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("baton-live-\(UUID().uuidString)")
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = directory
        if let database {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let keyFile = directory.appendingPathComponent("master.key")
            guard
                FileManager.default.createFile(
                    atPath: keyFile.path, contents: Data((0..<32).map { _ in UInt8.random(in: 0...255) }),
                    attributes: [.posixPermissions: 0o600])
            else { throw LiveServerError() }
            configuration.database = database
            configuration.databaseConnections = 4
            configuration.masterKeyFile = keyFile
        }
        configuration.port = port
        if let issuer {
            configuration.oauth.issuer = issuer.absoluteString
            configuration.fixedIssuer = true
        }
        configuration.bcryptCost = 4
        configuration.clock = clock
        configuration.dataService = dataService
        configuration.accessLog = logger != nil
        var quiet = Logger(label: "baton-live-server")
        quiet.logLevel = .critical
        let logger = logger ?? quiet
        let server = try await BatonServer(configuration: configuration, logger: logger)
        for (key, value) in settings { _ = try await server.settings.set(key, to: value) }
        let (ports, continuation) = AsyncStream<Int>.makeStream()
        let application = server.application { _, port in continuation.yield(port) }
        let group = ServiceGroup(
            configuration: .init(services: [application], gracefulShutdownSignals: [], logger: logger))
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), let url = URL(string: "http://127.0.0.1:\(port)") else {
            task.cancel()
            throw LiveServerError()
        }
        return LiveServer(server: server, url: url, directory: directory, group: group, task: task)
    }

    init(server: BatonServer, url: URL, directory: URL, group: ServiceGroup, task: Task<Void, any Error>) {
        self.server = server
        self.url = url
        self.directory = directory
        self.group = group
        self.task = task
    }

    /// Adds a user with a password.
    @discardableResult
    public func addUser(_ name: String, displayName: String? = nil, role: User.Role = .groundStaff, password: String)
        async throws -> User
    {
        try await server.users.add(name: name, displayName: displayName, role: role, password: password)
    }

    /// Stops the server (connections are refused afterwards).
    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }

    /// Stops this server, closes its databases, and starts a new one on the same port and data (the network
    /// comes back).
    public func restarted(clock: ServerClock = .system) async throws -> LiveServer {
        await stop()
        server.close()
        return try await LiveServer.start(clock: clock, directory: directory, port: url.port ?? 0)
    }

    /// Stops the server, closes its databases and deletes its data.
    public func shutDown() async {
        await stop()
        server.close()
        try? FileManager.default.removeItem(at: directory)
    }
}

/// The live server did not start listening.
public struct LiveServerError: Error, CustomStringConvertible {
    public var description: String { "The live server did not start listening on 127.0.0.1." }
}

extension LiveServer {
    /// Onboards `user` on a new single-user device in `directory`: signs in with `password`, sets `passcode`,
    /// with cheap key derivation.
    ///
    /// - Returns: the device's session manager and the open session.
    public func onboardSingleUserDevice(
        _ user: String, password: String, passcode: String = "alice-pass-1", directory: URL
    ) async throws -> (manager: OnboardingSessionManager, session: OnboardingSession) {
        var configuration = FlowsConfiguration(mode: .singleUser)
        configuration.keyDerivation = { KeyDerivation(cost: 1 << 10) }
        let manager = try OnboardingSessionManager(
            serverURL: url, directory: directory, configuration: configuration,
            presenter: ScriptedPresenter([
                .credentials(user, password), .newPasscode(passcode, confirmation: passcode),
            ]))
        return (manager, try await manager.open())
    }
}
