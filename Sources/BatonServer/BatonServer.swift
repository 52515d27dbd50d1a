import BatonOData
import BatonSQLGRDB
import Crypto
import Foundation
import GRDB
import Hummingbird
import JWTKit
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// Everything `baton-server` needs, with every default stated.
public struct BatonServerConfiguration: Sendable {
    /// Where the database and key files live. Default: `./baton-data`.
    public var dataDirectory = URL(fileURLWithPath: "baton-data")
    /// The address to listen on. Default: `127.0.0.1`.
    public var host = "127.0.0.1"
    /// The port; 0 picks a free one. Default: 8080.
    public var port = 8080
    /// Token issuing. Its `issuer` defaults to `http://HOST:PORT` of the listening socket.
    public var oauth = OAuthConfiguration()
    /// Whether `oauth.issuer` was set explicitly (otherwise it follows the listening address). Default: `false`.
    public var fixedIssuer = false
    /// The clock. Default: the system clock.
    public var clock = ServerClock.system
    /// The bcrypt cost for new passwords. Default: 12.
    public var bcryptCost: UInt8 = 12
    /// The account password policy.
    public var passwordPolicy = PasswordPolicy()
    /// The OData data service: its model and limits.
    public var dataService = DataServiceConfiguration()
    /// The file holding the master key that seals device store keys; best kept outside the data directory (and
    /// its backups). Default: `nil` — `keys/master.key` inside the data directory.
    public var masterKeyFile: URL?
    /// The PostgreSQL database that holds the server's state — users, tokens, the sign-in throttle, settings,
    /// devices and their keys, discarded-change backups, the audit log, the OData entity data and its change log —
    /// shared by every instance that names it. Default: `nil` — SQLite files in ``dataDirectory``.
    public var database: PostgresLocation?
    /// How many connections to ``database`` this instance keeps open (a pool of fixed size, opened at start), besides
    /// the one for the writers of entities. Default: 16.
    public var databaseConnections = PostgresStorage.defaultConnections
    /// Timeouts and connection limits.
    public var connections = ConnectionLimits()
    /// The addresses of load balancers whose `X-Forwarded-For` names the client. Default: none — the header is
    /// ignored.
    public var trustedProxies: Set<String> = []
    /// Whether every request is logged at `info` (method, path, status, duration); otherwise at `debug`.
    /// Default: `false`.
    public var accessLog = false
    /// The port of the metrics endpoint (`GET /metrics`, Prometheus' text format) on ``metricsHost``, served by
    /// ``BatonServer/metricsApplication(onListening:)`` apart from the API; 0 picks a free port. Default: `nil` —
    /// `baton-server serve` serves no metrics.
    public var metricsPort: Int?
    /// The address the metrics endpoint listens on: it has no authentication, so it stays on loopback unless
    /// the operator names the scraper's network. Default: `127.0.0.1`, whatever ``host`` is.
    public var metricsHost = "127.0.0.1"
    /// The metrics endpoint's connections: a scraper needs few, and silent ones are closed as on the API.
    /// Default: 16 connections, 4 per address, 10-second timeouts.
    public var metricsConnections: ConnectionLimits = {
        var limits = ConnectionLimits()
        limits.maximumConnections = 16
        limits.maximumConnectionsPerAddress = 4
        limits.headTimeout = .seconds(10)
        limits.bodyTimeout = .seconds(10)
        return limits
    }()

    /// The defaults.
    public init() {}
}

/// The Baton server: identity, settings exchange, devices and audit over one data directory.
///
/// ```swift
/// let server = try await BatonServer(configuration: configuration, logger: logger)
/// try await server.application { host, port in print("listening on http://\(host):\(port)") }.runService()
/// ```
public struct BatonServer: Sendable {
    /// The configuration it was built with.
    public let configuration: BatonServerConfiguration
    /// The users.
    public let users: UserDirectory
    /// The settings document.
    public let settings: SettingsStore
    /// Devices, registrations, signing keys and store keys.
    public let devices: DeviceRegistry
    /// The audit log.
    public let audit: AuditLog
    /// The clock every part of the server reads (``BatonServerConfiguration/clock``).
    let clock: ServerClock
    /// This server's metrics (requests, sign-ins, uploads, refusals, delta pages, batch sizes, database time).
    public let metrics = ServerMetrics()
    let tokens: TokenService
    /// PostgreSQL: the connection that listens for status changes of other instances (``TokenStatusCache``).
    let statusListener: Task<Void, Never>?
    /// PostgreSQL: whether the listener hears the channel (its own heartbeat).
    let statusHealth: StatusListenerHealth?
    let data: DataService
    let issuer: IssuerBox
    /// The admin cockpit's sessions and the key that seals its sign-in cookie (derived from the master key, so
    /// every instance opens what another sealed).
    let cockpitSessions: CockpitSessions
    let cockpitKey: SymmetricKey
    /// The identity providers people sign in through and that provision them over SCIM.
    public let identityProviders: IdentityProviders
    let relyingParty: OpenIDRelyingParty
    /// Seals the cookie of a sign-in through a provider (derived from the master key, so every instance opens it).
    let providerSignInKey: SymmetricKey
    let logger: Logger
    /// Whether `logger`'s handler keeps a metadata provider (so takes a request's trace ids from
    /// `Logger.MetadataProvider.requestTrace`): swift-log's `StreamLogHandler` and Baton's `JSONLogHandler`.
    static func keepsMetadataProvider(_ logger: Logger) -> Bool {
        logger.handler is StreamLogHandler || logger.handler is JSONLogHandler
    }
    let database: ServerDatabase

    /// How many times a write ran again because PostgreSQL refused it for a conflict with another transaction (a
    /// serialization failure or a deadlock), since the start: every write of this server's, its records' and the
    /// data's (one database holds both); 0 on SQLite, whose one writer never conflicts.
    public var writesRetried: Int {
        guard case .postgres(let storage) = data.store.storage else { return 0 }
        return storage.conflictsRetried
    }

    /// Opens (creating on first use) the data directory, database and keys.
    ///
    /// - Throws: ``ServerSetupError`` when the data directory, database or key files cannot be used.
    public init(configuration: BatonServerConfiguration, logger: Logger) async throws {
        self.configuration = configuration
        // A request's trace ids reach its log lines through the handler's metadata provider, read only when a line
        // is written, on the handlers known to keep one (swift-log's default setter drops it, with a warning in
        // debug builds; a multiplexing handler answers for any of its handlers). Any other handler gets them as the
        // request's metadata, written per request.
        var logger = logger
        if Self.keepsMetadataProvider(logger) {
            logger.handler.metadataProvider = .multiplex(
                [logger.handler.metadataProvider, .requestTrace].compactMap { $0 })
        }
        self.logger = logger
        let directory = try DataDirectory(configuration.dataDirectory)
        // What this opens is closed again when a later step fails (a wrong master key, a newer schema): the
        // connections and files go with the failed start, not with the process.
        var started = false
        var opened: [@Sendable () -> Void] = []
        defer {
            if !started { for close in opened.reversed() { close() } }
        }
        let database: ServerDatabase
        let masterKey: SymmetricKey
        var postgres: PostgresStorage?
        if let location = configuration.database {
            guard let file = configuration.masterKeyFile else {
                throw ServerSetupError(
                    "With PostgreSQL every instance needs the same master key, kept outside the database: give --master-key-file FILE (or BATON_MASTER_KEY_FILE)."
                )
            }
            masterKey = try DataDirectory.existingMasterKey(file)
            let storage = try await PostgresStorage(
                location: location, connections: configuration.databaseConnections, logger: logger)
            opened.append { storage.close() }
            database = try await ServerDatabase(postgres: storage)
            postgres = storage
            await Self.warnOfUnflushedCommits(storage, logger: logger)
        } else {
            masterKey = try directory.masterKey(file: configuration.masterKeyFile)
            database = try ServerDatabase(directory)
            opened.append { database.close() }
        }
        self.database = database
        let clock = configuration.clock
        self.clock = clock
        users = UserDirectory(
            database: database, clock: clock, bcryptCost: configuration.bcryptCost, policy: configuration.passwordPolicy
        )
        settings = SettingsStore(database: database)
        devices = DeviceRegistry(database: database, clock: clock, masterKey: masterKey)
        try await devices.checkMasterKey()
        audit = AuditLog(database: database)
        cockpitSessions = CockpitSessions(database: database, clock: clock)
        cockpitKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: masterKey, info: Data("baton-cockpit-sign-in".utf8), outputByteCount: 32)
        identityProviders = IdentityProviders(database: database, clock: clock, masterKey: masterKey)
        relyingParty = OpenIDRelyingParty(clock: clock)
        providerSignInKey = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: masterKey, info: Data("baton-provider-sign-in".utf8), outputByteCount: 32)
        // A data directory from before the keys lived in the database: its key moves in (so its tokens stay
        // valid) and the plaintext file goes.
        let legacy = directory.legacySigningKeyURL
        let legacyPEM = configuration.database == nil ? (try? String(contentsOf: legacy, encoding: .utf8)) : nil
        let signingKeys = try await SigningKeys.open(
            database: database, masterKey: masterKey, clock: clock, legacyPEM: legacyPEM)
        // A key the database does not hold stays on disk: deleting it would lose it.
        if signingKeys.importedLegacyKey { try? FileManager.default.removeItem(at: legacy) }
        issuer = IssuerBox(configuration.oauth.issuer)
        let model: ServiceModel
        do {
            model = try configuration.dataService.model ?? ServiceModel.aircraftChecks
        } catch {
            throw ServerSetupError("The bundled model cannot be loaded: \(error)")
        }
        // A model built in Swift may have been changed through its properties after it was checked.
        do {
            try model.validate()
        } catch {
            throw ServerSetupError("The data service's model is not valid: \(error.message)")
        }
        let store =
            if let postgres {
                try await DataStore(postgres: postgres, model: model)
            } else {
                try DataStore(directory: directory, model: model)
            }
        opened.append { store.close() }
        // Audit entries of changes committed just before a crash wait in the data database's outbox (on
        // PostgreSQL, only what an earlier version left there).
        do {
            try await AuditLog(database: database).collect(from: store.storage)
        } catch {
            throw ServerSetupError("Cannot move the pending audit entries into the audit log: \(error)")
        }
        // On PostgreSQL the store and the audit log are the one database `postgres` opened.
        data = DataService(
            store: store, configuration: configuration.dataService, clock: clock, auditLogWithTheData: postgres != nil,
            databaseConnections: configuration.databaseConnections)
        // The token-status cache: on SQLite it hears this process's commits and reads the epoch's word other processes
        // rewrite; on PostgreSQL it is used only while the listener hears the other instances' changes.
        let statusCache = TokenStatusCache(
            live: postgres == nil, epochURL: postgres == nil ? directory.statusEpochURL : nil,
            heartbeatDeadline: postgres == nil ? nil : StatusListenerHealth.deadline)
        database.statusChanges.subscribe { statusCache.invalidate() }
        if let postgres {
            let health = StatusListenerHealth(cache: statusCache)
            statusHealth = health
            statusListener = Task.detached {
                await withDiscardingTaskGroup { group in
                    group.addTask {
                        await postgres.listen(
                            "baton_status", onState: { health.connected($0) }, onNotification: { health.heard($0) })
                    }
                    // The heartbeat goes through the pool, as any instance's change would, and its absence turns
                    // the cache off within the deadline.
                    group.addTask {
                        while !Task.isCancelled {
                            _ = try? await postgres.write { db in
                                try await db.execute("SELECT pg_notify('baton_status', ?)", [.text(health.heartbeat)])
                            }
                            try? await Task.sleep(for: StatusListenerHealth.period)
                        }
                    }
                }
            }
        } else {
            statusListener = nil
            statusHealth = nil
        }
        tokens = TokenService(
            configuration: configuration.oauth, issuer: issuer, database: database, clock: clock,
            signingKeys: signingKeys, users: users,
            throttle: LoginThrottle(
                limits: configuration.oauth.throttle, clock: clock, database: database, masterKey: masterKey),
            audit: audit, statusCache: statusCache)
        started = true
    }

    /// The HTTP application. `onListening` is called with the bound host and port once the server accepts
    /// connections.
    public func application(onListening: @escaping @Sendable (String, Int) -> Void = { _, _ in })
        -> some ApplicationProtocol
    {
        let router = Router(context: BatonRequestContext.self)
        router.add(middleware: ForwardedAddressMiddleware(trustedProxies: configuration.trustedProxies))
        router.add(
            middleware: RequestTelemetryMiddleware(
                metrics: metrics, accessLog: configuration.accessLog,
                tracesThroughProvider: Self.keepsMetadataProvider(logger)))
        router.add(middleware: ErrorMiddleware())
        OAuthRoutes(
            tokens: tokens, configuration: configuration.oauth, metrics: metrics, settings: settings,
            providers: identityProviders, relyingParty: relyingParty, sealKey: providerSignInKey
        ).add(to: router)
        let database = self.database
        let store = data.store
        let routes = ServiceRoutes(
            settings: settings, devices: devices, users: users, audit: audit, clock: configuration.clock,
            issuerBox: issuer,
            databasesAnswer: {
                let select = "SELECT 1"
                let server = try? await database.storage.readStatement { try await $0.fetchOne(select)?[0].integer }
                // On PostgreSQL both are one database.
                if case .postgres(let first) = database.storage, case .postgres(let second) = store.storage,
                    first === second
                {
                    return server == 1
                }
                let data = try? await store.storage.readStatement { try await $0.fetchOne(select)?[0].integer }
                return server == 1 && data == 1
            })
        routes.addPublic(to: router)
        SCIMRoutes(
            providers: identityProviders, users: users, audit: audit, clock: configuration.clock, issuer: issuer,
            database: database
        ).add(to: router)
        CockpitRoutes(
            tokens: tokens, users: users, devices: devices, settings: settings, audit: audit, sessions: cockpitSessions,
            database: database,
            clock: configuration.clock, key: cockpitKey, providers: identityProviders, data: data
        ).add(to: router)
        let protected = router.group().add(
            middleware: BearerAuthenticationMiddleware(tokens: tokens, settings: settings))
        routes.addProtected(to: protected)
        routes.addTelemetryRoutes(to: protected)
        routes.addDeviceRoutes(
            to: router.group().add(
                middleware: DeviceProofMiddleware(
                    bearer: BearerAuthenticationMiddleware(tokens: tokens, settings: settings), devices: devices)))
        ODataRoutes(
            service: data, users: users, devices: devices, settings: settings, audit: audit, issuer: issuer,
            metrics: metrics
        ).add(to: protected)
        let issuer = self.issuer
        let fixedIssuer = configuration.fixedIssuer
        let host = configuration.host
        let counter = ConnectionCounter(limits: configuration.connections)
        return Application(
            router: router,
            server: .http1(
                configuration: .init(additionalChannelHandlers: [ConnectionGuard(counter: counter)], idleTimeout: nil)),
            configuration: .init(address: .hostname(host, port: configuration.port), serverName: "baton-server"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? 0
                if !fixedIssuer { issuer.set("http://\(host):\(port)") }
                onListening(host, port)
            },
            logger: logger)
    }
}

extension BatonServer {
    /// Fetches a provider's discovery document and keys, as a sign-in would, and says what it found.
    ///
    /// - Throws: an error that says what is wrong (unreachable, another issuer, no usable algorithm, no keys).
    public func checkIdentityProvider(_ provider: IdentityProvider) async throws -> String {
        let party = OpenIDRelyingParty(clock: configuration.clock)
        let metadata = try await party.metadata(for: provider)
        let data = try await party.fetch(metadata.jwksURI, what: "key set")
        let keys = (try? JSONDecoder().decode(JWKS.self, from: data))?.keys.count ?? 0
        guard keys > 0 else { throw OpenIDError("\(provider.issuer) publishes no keys at \(metadata.jwksURI).") }
        return
            "\(provider.issuer): authorization at \(metadata.authorizationEndpoint), \(keys) signing keys, ID tokens in \(metadata.acceptedAlgorithms.sorted().joined(separator: ", "))."
    }

    /// Makes a new token-signing key (`SigningKeys`): every instance signs with it within a minute, and the
    /// previous key verifies its tokens until they expire. Audited.
    ///
    /// - Returns: the new key's id.
    @discardableResult
    public func rotateSigningKey(actor: String) async throws -> String {
        let id = try await SigningKeys.rotate(
            database: database, masterKey: devices.masterKey, clock: configuration.clock)
        try await audit.record(
            AuditEntry(
                at: configuration.clock.now(), actor: actor, action: "signing-key-rotated", subject: id, address: nil,
                detail: nil))
        return id
    }
}

extension BatonServer {
    /// Closes the server's databases (every connection, so their files are no longer open in this process).
    /// Call it once the application has stopped: later requests fail.
    public func close() {
        statusListener?.cancel()
        data.store.close()
        database.close()
    }
}

extension BatonServer {
    /// The metrics endpoint: `GET /metrics` in Prometheus' text format, on `configuration.metricsHost` and
    /// `configuration.metricsPort` (any free port when that is 0 or nil), within
    /// `configuration.metricsConnections`. It has no authentication: keep it reachable only by the scraper.
    /// `onListening` is called with the bound host and port.
    public func metricsApplication(onListening: @escaping @Sendable (String, Int) -> Void = { _, _ in })
        -> some ApplicationProtocol
    {
        let router = Router()
        let metrics = self.metrics
        router.get("/metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: metrics.exposition())))
        }
        let host = configuration.metricsHost
        let counter = ConnectionCounter(limits: configuration.metricsConnections)
        return Application(
            router: router,
            server: .http1(
                configuration: .init(additionalChannelHandlers: [ConnectionGuard(counter: counter)], idleTimeout: nil)),
            configuration: .init(
                address: .hostname(host, port: configuration.metricsPort ?? 0), serverName: "baton-server-metrics"),
            onServerRunning: { channel in onListening(host, channel.localAddress?.port ?? 0) },
            logger: logger)
    }
}

/// The issuer URL, fixed before the first request: with `--port 0` it is known only once the socket is bound.
final class IssuerBox: Sendable {
    /// The issuer and the data service's root under it, made once per change (read on every request).
    let storage: Mutex<(value: String, serviceRoot: String)>

    init(_ value: String) { storage = Mutex((value, value + "/odata/")) }

    var value: String { storage.withLock { $0.value } }

    /// The data service's root: the issuer followed by `/odata/`.
    var serviceRoot: String { storage.withLock { $0.serviceRoot } }

    func set(_ value: String) { storage.withLock { $0 = (value, value + "/odata/") } }

    /// Whether the issuer is plain HTTP on loopback (tests, a laptop): cookies may then go without `Secure`.
    var isLoopbackHTTP: Bool { BatonServer.isLoopbackHTTP(value) }
}

extension BatonServer {
    /// Whether `url` is `http` to a loopback host (127.0.0.1, localhost, ::1): the only place Baton accepts plain
    /// HTTP for itself or an identity provider.
    static func isLoopbackHTTP(_ url: String) -> Bool {
        guard let components = URLComponents(string: url), components.scheme == "http" else { return false }
        return ["127.0.0.1", "localhost", "[::1]", "::1"].contains(components.host ?? "")
    }
}

extension BatonServer {
    /// Makes the event loops of NIO's shared group Swift concurrency's global executor, so a request's handler
    /// runs on the thread that read the request and writes the answer there, instead of hopping to the
    /// concurrency pool and back: two thread wake-ups per request, on a small machine the larger part of a short
    /// read's cost (see docs/BENCHMARKS.md).
    ///
    /// Call it once, first thing in `main`, before the server starts. Nothing the server runs may block a
    /// thread for long, as it would stall the connections of its event loop: bcrypt runs on NIO's thread pool,
    /// database writes on GRDB's writer queue, and the reads done in place take microseconds.
    ///
    /// NIO runs a global job as its loop's serial executor, so each call into code that asks for the generic
    /// executor would queue the task on the loop again; a request therefore runs preferring its loop as a task
    /// executor (`EventLoopTaskExecutor`), where such calls go straight on.
    ///
    /// - Returns: whether the executor was installed (it is not on every platform, and only once).
    @discardableResult
    public static func runConcurrencyOnEventLoops() -> Bool {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }
}

extension BatonServer {
    /// Logs a warning when the PostgreSQL cluster does not flush its commits: a change the server answered for
    /// (and the device removed from its queue) could then be lost with the database machine's power. The
    /// cluster's settings are the operator's; the server only says what they cost.
    static func warnOfUnflushedCommits(_ storage: PostgresStorage, logger: Logger) async {
        let settings = try? await storage.read { db in
            try await db.fetchOne(
                """
                SELECT current_setting('fsync') AS f, current_setting('synchronous_commit') AS s,
                    current_setting('full_page_writes') AS p
                """)
        }
        guard let settings = settings ?? nil else { return }
        for warning in unflushedCommitWarnings(
            fsync: settings["f"].text, synchronousCommit: settings["s"].text, fullPageWrites: settings["p"].text)
        {
            logger.warning("\(warning)")
        }
    }

    /// What a cluster's settings put at risk, one sentence each.
    static func unflushedCommitWarnings(fsync: String?, synchronousCommit: String?, fullPageWrites: String?)
        -> [String]
    {
        var warnings: [String] = []
        if fsync == "off" {
            warnings.append(
                "PostgreSQL runs with fsync=off: changes this server answered for can be lost if the database machine loses power or crashes. Set fsync=on for production."
            )
        }
        if synchronousCommit == "off" {
            warnings.append(
                "PostgreSQL runs with synchronous_commit=off: the last changes this server answered for can be lost if PostgreSQL crashes. Set synchronous_commit=on for production."
            )
        }
        if fullPageWrites == "off" {
            warnings.append(
                "PostgreSQL runs with full_page_writes=off: a power cut can tear pages and lose changes this server answered for. Set full_page_writes=on for production."
            )
        }
        return warnings
    }
}
