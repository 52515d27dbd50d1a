import ArgumentParser
import BatonOData
import BatonServer
import Foundation
import Logging

/// `baton-server`: serve, and the admin commands that work on the same data directory while it runs.
@main
struct BatonServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton-server",
        abstract: "The Baton server: identity (OAuth 2.0), settings exchange, device registration.",
        subcommands: [
            ServeCommand.self, UserCommand.self, SettingsCommand.self, SeedCommand.self, BackupsCommand.self,
            KeysCommand.self,
        ]
    )
}

/// Options every subcommand shares.
struct DataOptions: ParsableArguments {
    @Option(help: "The data directory (database and keys).")
    var dataDir: String = "baton-data"

    @Option(help: "A CSDL JSON model to serve at /odata/ instead of the aircraft-checks model.")
    var model: String?

    @Option(
        help: ArgumentHelp(
            "The master-key file that seals device store keys (also BATON_MASTER_KEY_FILE); keep it outside the data directory and its backups. Default: keys/master.key in the data directory.",
            valueName: "file"))
    var masterKeyFile: String?

    /// `--master-key-file`, or `BATON_MASTER_KEY_FILE`.
    var masterKeyURL: URL? {
        (masterKeyFile ?? ProcessInfo.processInfo.environment["BATON_MASTER_KEY_FILE"]).map {
            URL(fileURLWithPath: $0)
        }
    }

    func open(bcryptCost: UInt8 = 12) async throws -> BatonServer {
        keepFilesPrivate()
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = URL(fileURLWithPath: dataDir)
        configuration.bcryptCost = bcryptCost
        configuration.dataService.model = try loadModel(model)
        configuration.masterKeyFile = masterKeyURL
        var logger = Logger(label: "baton-server")
        logger.logLevel = .warning
        do {
            return try await BatonServer(configuration: configuration, logger: logger)
        } catch let error as ServerSetupError {
            throw CommandFailure(error.description)
        }
    }
}

/// A failure reported as `Error: <message>`, exit code 1.
struct CommandFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs an admin action, turning server errors into one clear line.
func adminAction<T>(_ body: () async throws -> T) async throws -> T {
    do {
        return try await body()
    } catch let error as ServerError {
        throw CommandFailure(error.message)
    }
}

/// Files this process creates (database, WAL, keys) are readable by their owner only.
func keepFilesPrivate() {
    umask(0o077)
}

/// Reads a CSDL JSON model file, or `nil` for the bundled model.
func loadModel(_ path: String?) throws -> ServiceModel? {
    guard let path else { return nil }
    guard let data = FileManager.default.contents(atPath: path) else {
        throw CommandFailure("Cannot read the model file '\(path)'.")
    }
    do {
        return try ServiceModel(csdlJSON: String(decoding: data, as: UTF8.self))
    } catch {
        throw CommandFailure("The model file '\(path)' is not a usable CSDL JSON model: \(error.description)")
    }
}
