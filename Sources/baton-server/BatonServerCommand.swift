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
        abstract:
            "The Baton server: identity (OAuth 2.0, identity providers, SCIM), settings exchange, device registration, OData.",
        subcommands: [
            ServeCommand.self, UserCommand.self, SettingsCommand.self, SeedCommand.self, BackupsCommand.self,
            KeysCommand.self, MigrateCommand.self, CopyCommand.self, DevicesCommand.self, LogsCommand.self,
            AuditCommand.self, IdentityProviderCommand.self,
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

    @Option(
        help: ArgumentHelp(
            "Keep all server state in this PostgreSQL database instead of SQLite files in --data-dir: postgres://USER@HOST:PORT/DATABASE[?sslmode=disable|verify-full] (also BATON_DATABASE_URL, the only place for a password). Needs --master-key-file.",
            valueName: "url"))
    var database: String?

    /// `--database`, or `BATON_DATABASE_URL`; `nil` for SQLite.
    func databaseLocation() throws -> PostgresLocation? {
        do {
            if let database { return try PostgresLocation(parsing: database, fromCommandLine: true) }
            guard let url = ProcessInfo.processInfo.environment["BATON_DATABASE_URL"], !url.isEmpty else { return nil }
            return try PostgresLocation(parsing: url, fromCommandLine: false)
        } catch {
            throw CommandFailure(error.description)
        }
    }

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
        configuration.database = try databaseLocation()
        // An admin command sends a few statements, one after the other.
        configuration.databaseConnections = 2
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

/// `baton-server migrate`: brings the database to this version's schema, and nothing else (`serve` does it too,
/// at start).
struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate", abstract: "Create or upgrade the database's tables, then exit.")
    @OptionGroup var data: DataOptions

    func run() async throws {
        let server = try await data.open()
        server.close()
        print(
            try data.databaseLocation().map { "The PostgreSQL database \($0.database) is up to date." }
                ?? "The data directory \(data.dataDir) is up to date.")
    }
}
