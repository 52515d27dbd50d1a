import ArgumentParser
import Foundation

/// The ground-crew app. With no subcommand it opens the interactive app (user list, passcode, aircraft,
/// recording checks, pending changes, sync, lock, switch); the subcommands do the same things from scripts;
/// `demo` and `sql` start the `baton-demo` executable, which this app does not link.
@main
struct Baton: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton",
        abstract: "Baton: shared-device, multi-user, offline-first pre-flight checks.",
        discussion: """
            Exit status: 0 done; 1 failed; 3 wrong passcode or password (or nobody signed in); 4 the server \
            cannot be reached; 5 the sync left changes behind (error archive, waiting for their author); \
            6 invalid input; 7 no such user, aircraft or check; 8 pending changes refuse the removal; 9 not permitted (someone else's check or change, a final check, not a supervisor, consent not given); 64 usage.
            """,
        subcommands: [
            DemoCommand.self, UsersCommand.self, SyncCommand.self, AircraftCommand.self, ChecksCommand.self,
            PhotosCommand.self, PendingCommand.self, ArchiveCommand.self, LogsCommand.self, LockCommand.self,
            SQLCommand.self,
        ]
    )

    @OptionGroup var device: DeviceOptions

    func run() async throws {
        let ui = ConsoleUI()
        let app: Device
        do {
            app = try await Device.open(
                directory: device.directory, server: device.server, offline: device.offline,
                presenter: ConsolePresenter(ui: ui),
                askServer: {
                    guard let answer = await ui.ask("Server URL [http://127.0.0.1:8080]:") else {
                        throw AppError(.usage, "No server was given.")
                    }
                    return answer.isEmpty ? "http://127.0.0.1:8080" : answer
                })
        } catch {
            let failure = AppError.from(error)
            ui.failure(failure.message)
            throw failure.exitCode
        }
        try await InteractiveApp(ui: ui, device: app).run()
    }
}
