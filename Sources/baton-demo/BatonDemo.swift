import ArgumentParser

/// `baton-demo`: Baton shown working end to end, and the SQL an OData URL becomes. It lives apart from the
/// ground-crew app because it runs a server in-process (`BatonTesting.LiveServer`), and the app that ships to
/// tablets links no server library. `baton demo` and `baton sql` start this executable.
@main
struct BatonDemo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton-demo",
        abstract: "Baton shown working, end to end, on temporary data; and the SQL an OData URL becomes.",
        subcommands: [DemoCommand.self, SQLCommand.self],
        defaultSubcommand: DemoCommand.self
    )
}
