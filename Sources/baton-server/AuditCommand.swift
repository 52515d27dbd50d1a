import ArgumentParser
import BatonServer
import Foundation

/// `baton-server audit prune`: deletes the audit entries older than the retention (setting
/// `audit.retention-days`, default 400), as `serve` does every hour.
struct AuditCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit", abstract: "The audit log's retention.", subcommands: [Prune.self])

    struct Prune: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete the audit entries older than the retention (setting audit.retention-days). Audited.")
        @OptionGroup var data: DataOptions
        @Option(help: "Keep this many days instead of the setting (7 or more).") var days: Int?

        func validate() throws {
            if let days, days < 7 { throw ValidationError("--days must be 7 or more, not \(days).") }
        }

        func run() async throws {
            let server = try await data.open()
            let actor = "admin (command line)"
            let deleted =
                if let days {
                    try await server.audit.prune(
                        before: Date().addingTimeInterval(-Double(days) * 86_400), actor: actor)
                } else {
                    try await server.audit.prune(settings: server.settings, now: Date(), actor: actor)
                }
            print("Deleted \(deleted) audit entr\(deleted == 1 ? "y" : "ies").")
        }
    }
}
