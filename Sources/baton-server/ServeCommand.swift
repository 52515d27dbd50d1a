import ArgumentParser
import BatonServer
import Foundation
import Hummingbird
import Logging

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

    @Option(
        name: .customLong("trusted-proxy"),
        help: ArgumentHelp(
            "The address of a load balancer whose X-Forwarded-For names the client (repeatable); from anyone else the header is ignored.",
            valueName: "address"))
    var trustedProxies: [String] = []

    func validate() throws {
        guard (0...65_535).contains(port) else {
            throw ValidationError("--port must be between 0 and 65535, not \(port).")
        }
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical.")
        }
    }

    func run() async throws {
        BatonServer.runConcurrencyOnEventLoops()
        keepFilesPrivate()
        LoggingSystem.bootstrap(StreamLogHandler.standardError)
        var logger = Logger(label: "baton-server")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = URL(fileURLWithPath: data.dataDir)
        configuration.dataService.model = try loadModel(data.model)
        configuration.masterKeyFile = data.masterKeyURL
        configuration.trustedProxies = Set(trustedProxies)
        configuration.host = host
        configuration.port = port
        if let publicURL {
            configuration.oauth.issuer = publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL
            configuration.fixedIssuer = true
        }
        let server: BatonServer
        do {
            server = try await BatonServer(configuration: configuration, logger: logger)
        } catch let error as ServerSetupError {
            throw CommandFailure(error.description)
        }
        let application = server.application { host, port in
            // Unbuffered, so a parent process reading the pipe sees it at once.
            FileHandle.standardOutput.write(Data("listening on http://\(host):\(port)\n".utf8))
        }
        try await application.runService(gracefulShutdownSignals: [.sigterm, .sigint])
    }
}
