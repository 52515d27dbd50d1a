import ArgumentParser
import BatonOData
import BatonServer
import Foundation

/// `baton-server settings show|set`: the policy devices receive in the settings exchange.
struct SettingsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "settings", abstract: "Show or change the shared-device, passcode and app-version settings.",
        subcommands: [Show.self, Set.self])

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show every setting.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            for line in try await data.open().settings.current().lines { print(line) }
        }
    }

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Change one setting.",
            discussion: "Settings: " + ServerSettings.keys.map { "\($0.key) (\($0.takes))" }.joined(separator: "; "))
        @OptionGroup var data: DataOptions
        @Argument(help: "The setting, e.g. passcode.min-length.") var key: String
        @Argument(help: "The new value.") var value: String

        func run() async throws {
            let server = try await data.open()
            _ = try await adminAction { try await server.settings.set(key, to: value) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "settings-changed", subject: key, address: nil,
                    detail: "value \(value.prefix(scalars: 64))"))
            print("\(key) = \(value)")
        }
    }
}
