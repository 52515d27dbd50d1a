import ArgumentParser
import BatonServer
import Foundation
import Logging

/// `baton-server copy`: moves a SQLite data directory into an empty PostgreSQL database, then reads every row
/// back and compares.
struct CopyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy",
        abstract: "Copy a SQLite data directory (--data-dir) into an empty PostgreSQL database (--database).",
        discussion: """
            Stop the server first. Every table moves in one transaction and is read back and compared; on any \
            failure nothing is written. Sealed values move as they are: run the PostgreSQL instances with the \
            master key this data directory used (its keys/master.key, or the --master-key-file given here).
            """)

    @OptionGroup var data: DataOptions

    func run() async throws {
        keepFilesPrivate()
        guard let target = try data.databaseLocation() else {
            throw CommandFailure("Give the PostgreSQL database to copy into: --database URL (or BATON_DATABASE_URL).")
        }
        var source = BatonServerConfiguration()
        source.dataDirectory = URL(fileURLWithPath: data.dataDir)
        source.masterKeyFile = data.masterKeyURL
        source.dataService.model = try loadModel(data.model)
        var logger = Logger(label: "baton-server")
        logger.logLevel = .warning
        let report: DataCopy.Report
        do {
            report = try await DataCopy.copy(from: source, to: target, logger: logger)
        } catch let error as ServerSetupError {
            throw CommandFailure(error.description)
        }
        let keyFile =
            data.masterKeyURL?.path ?? URL(fileURLWithPath: data.dataDir).appendingPathComponent("keys/master.key").path
        print(
            """
            Copied \(report.rows) rows of \(report.tables.count) tables into \(target.database), and read them back: they match.
            Run every instance with --database and --master-key-file \(keyFile) (or a copy of it).
            """)
    }
}
