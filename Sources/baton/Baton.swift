import ArgumentParser

/// The ground-crew app. Today it has `demo`, which plays the shift handover on an embedded server and real
/// device stores (then shows the OData core underneath), and `sql`, which shows the SQL a request URL becomes.
@main
struct Baton: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton",
        abstract: "Baton: shared-device, multi-user, offline-first pre-flight checks.",
        subcommands: [DemoCommand.self, SQLCommand.self]
    )
}
