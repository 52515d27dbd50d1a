import ArgumentParser

/// The ground-crew app. Today it has `demo`, which shows the OData protocol core working against a real
/// SQLite file, and `sql`, which shows the SQL a request URL becomes.
@main
struct Baton: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton",
        abstract: "Baton: shared-device, multi-user, offline-first pre-flight checks.",
        subcommands: [DemoCommand.self, SQLCommand.self]
    )
}
