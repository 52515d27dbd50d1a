import ArgumentParser
import BatonServer
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle

/// `baton-server serve`: runs the HTTP server until SIGINT or SIGTERM.
struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "serve", abstract: "Run the server.")

    @OptionGroup var data: DataOptions

    @Option(help: "The address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "The port to listen on; 0 picks a free port.")
    var port: Int = 8080

    @Option(help: "The public base URL clients use, if not http://HOST:PORT (e.g. behind a proxy).")
    var publicURL: String?

    @Option(help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(help: "Log format: text (one human line per event) or json (one JSON object per line, for log collectors).")
    var logFormat: LogFormat = .text

    @Flag(help: "Log every request at info (method, path, status, duration, trace id); otherwise at debug.")
    var accessLog = false

    @Option(
        help: ArgumentHelp(
            "Serve Prometheus metrics at GET /metrics on this port of --host, apart from the API and without authentication; 0 picks a free port.",
            valueName: "port"))
    var metricsPort: Int?

    @Option(
        help: ArgumentHelp(
            "The address the metrics listen on; only the scraper should reach it (default 127.0.0.1, whatever --host is).",
            valueName: "address"))
    var metricsHost: String = "127.0.0.1"

    @Option(
        name: .customLong("trusted-proxy"),
        help: ArgumentHelp(
            "The address of a load balancer whose X-Forwarded-For names the client (repeatable); from anyone else the header is ignored.",
            valueName: "address"))
    var trustedProxies: [String] = []

    @Option(
        help: ArgumentHelp(
            "With PostgreSQL: how many database connections this instance keeps open (1-1000). Every instance opens them at start, and one for the writers: keep instances × (connections + 1) below the server's max_connections.",
            valueName: "n"))
    var databaseConnections: Int = PostgresStorage.defaultConnections

    @Option(
        help: ArgumentHelp(
            "How many requests that change data one user may have running on this instance at once (1-10000); one more answers 429 at once, so that one account holder cannot fill the writers' queue. A tablet has at most two uploads in flight.",
            valueName: "n"))
    var changesPerUser: Int = DataServiceConfiguration().maximumConcurrentChangesPerUser

    @Option(
        help: ArgumentHelp(
            "How many reads one user may have running on this instance at once (1-10000); one more answers 429 at once. Default: a quarter of --database-connections, so that no account holds more than a quarter of the pool.",
            valueName: "n"))
    var readsPerUser: Int?

    func validate() throws {
        guard (1...10_000).contains(changesPerUser) else {
            throw ValidationError("--changes-per-user must be between 1 and 10000, not \(changesPerUser).")
        }
        if let readsPerUser, !(1...10_000).contains(readsPerUser) {
            throw ValidationError("--reads-per-user must be between 1 and 10000, not \(readsPerUser).")
        }
        guard (1...1_000).contains(databaseConnections) else {
            throw ValidationError("--database-connections must be between 1 and 1000, not \(databaseConnections).")
        }
        guard (0...65_535).contains(port) else {
            throw ValidationError("--port must be between 0 and 65535, not \(port).")
        }
        if let metricsPort {
            guard (0...65_535).contains(metricsPort) else {
                throw ValidationError("--metrics-port must be between 0 and 65535, not \(metricsPort).")
            }
            guard metricsPort == 0 || metricsPort != port else {
                throw ValidationError("--metrics-port must differ from --port: metrics are served apart from the API.")
            }
        }
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical.")
        }
    }

    func run() async throws {
        BatonServer.runConcurrencyOnEventLoops()
        keepFilesPrivate()
        switch logFormat {
        case .text: LoggingSystem.bootstrap(StreamLogHandler.standardError)
        case .json: LoggingSystem.bootstrap { JSONLogHandler.standardError(label: $0, metadataProvider: nil) }
        }
        var logger = Logger(label: "baton-server")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = URL(fileURLWithPath: data.dataDir)
        configuration.dataService.model = try loadModel(data.model)
        configuration.masterKeyFile = data.masterKeyURL
        configuration.database = try data.databaseLocation()
        configuration.databaseConnections = databaseConnections
        configuration.dataService.maximumConcurrentChangesPerUser = changesPerUser
        configuration.dataService.maximumConcurrentReadsPerUser = readsPerUser
        configuration.trustedProxies = Set(trustedProxies)
        configuration.host = host
        configuration.port = port
        configuration.accessLog = accessLog
        configuration.metricsPort = metricsPort
        configuration.metricsHost = metricsHost
        if let publicURL {
            configuration.oauth.issuer = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
            configuration.fixedIssuer = true
        }
        let server: BatonServer
        do {
            server = try await BatonServer(configuration: configuration, logger: logger)
            // Nothing is counted that nobody can scrape; trace ids are logged either way.
            server.metrics.isEnabled = metricsPort != nil
        } catch let error as ServerSetupError {
            throw CommandFailure(error.description)
        }
        // Unbuffered, so a parent process reading the pipe sees it at once.
        let application = server.application { host, port in
            FileHandle.standardOutput.write(Data("listening on http://\(host):\(port)\n".utf8))
        }
        var services: [any Service] = [
            application, AuditRetention(server: server, logger: logger), MediaSweep(server: server, logger: logger),
        ]
        if metricsPort != nil {
            services.append(
                server.metricsApplication { host, port in
                    FileHandle.standardOutput.write(Data("metrics on http://\(host):\(port)/metrics\n".utf8))
                })
        }
        let group = ServiceGroup(
            configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

/// How `baton-server serve` writes its log.
enum LogFormat: String, ExpressibleByArgument, CaseIterable {
    case text, json
}
