import ArgumentParser
import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

struct UsersCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "users", abstract: "The users of this device.",
        subcommands: [List.self, Add.self, Remove.self, ConsentCommand.self], defaultSubcommand: List.self)

    struct ConsentCommand: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "consent", abstract: "Show or change what you agreed to (usage data on or off).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Option(help: ArgumentHelp("Turn usage data on or off.", valueName: "on|off")) var usage: String?

        func validate() throws {
            guard usage == nil || ["on", "off"].contains(usage ?? "") else {
                throw ValidationError("--usage takes on or off.")
            }
        }

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                if let usage { try await device.sessions.changeConsent(.usage, to: usage == "on") }
                let consent = await device.sessions.consent
                for kind in ConsentKind.allCases {
                    let answer = consent?.answers[kind].map { $0 ? "agreed" : "declined" } ?? "not asked"
                    print("\(kind.rawValue): \(answer)")
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the users (no passcode needed).")
        @OptionGroup var device: DeviceOptions
        @Flag(help: "Print JSON.") var json = false

        struct Entry: Encodable {
            let user: String
            let displayName: String
            let role: String?
            let pendingChanges: Int
            let lastSignIn: Date?
        }

        func run() async throws {
            try await runScripted(device, signIn: nil) { device, ui in
                let users = await device.sessions.users.activeUsers
                if json {
                    try printJSON(
                        users.map {
                            Entry(
                                user: $0.serverUserID ?? "", displayName: $0.displayName, role: $0.role,
                                pendingChanges: $0.pendingChanges ?? 0, lastSignIn: $0.lastSignIn)
                        })
                } else if users.isEmpty {
                    print("Nobody uses this device yet; `baton` onboards the first user.")
                } else {
                    for user in users { print(ConsolePresenter.describe(user)) }
                }
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Onboard a user: sign-in, passcode, device registration, first download.")
        @OptionGroup var device: DeviceOptions
        @Option(help: "The user's name on the server.") var user: String
        @Option(
            help: ArgumentHelp(
                "A user of this device who approves the new one joining it, with their passcode (read after the new user's, or asked); needed once the device has users.",
                valueName: "user"))
        var approver: String?
        @Flag(
            help:
                "Read the password, then the new passcode, then (with --approver) the approving user's passcode, one per line from standard input."
        )
        var passwordStdin = false
        @Option(
            help: ArgumentHelp(
                "What the user agrees to: data (needed to use Baton) and optionally usage (usage counts, no values).",
                valueName: "data[,usage]"))
        var consent: String = ""

        func consents() throws -> Set<ConsentKind> { try parseConsents(consent) }

        func validate() throws { _ = try consents() }

        func run() async throws {
            let password = passwordStdin ? readSecretLine("password") : nil
            let passcode = passwordStdin ? readSecretLine("passcode") : nil
            let approving = approver.map {
                Approver(user: $0, passcode: passwordStdin ? readSecretLine("passcode") : nil)
            }
            try await runScripted(
                device, signIn: nil, onboarding: user, password: password, passcode: passcode, approver: approving,
                consents: try consents()
            ) {
                device, ui in
                let existing = await device.sessions.users.activeUsers
                let session = existing.isEmpty ? try await device.sessions.open() : try await device.sessions.addUser()
                ui.say("\(session.user.displayName) is on this device.")
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Remove yourself from this device (refused while you have unsynced changes).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Flag(help: "Discard your unsynced changes (an encrypted backup is kept in the data directory).")
        var discardPending = false

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, ui in
                let session = try await device.session()
                if discardPending {
                    let discarded = try await device.discardChanges(of: session.user.serverUserID ?? "")
                    if discarded.count > 0 {
                        ui.warning(
                            "Discarded \(discarded.count) change(s); encrypted backup at \(discarded.backup.path)"
                                + (discarded.sent ? ", sent to the server." : "; it goes to the server with a sync."))
                    }
                }
                try await device.sessions.removeUser(session.user.id)
                ui.say("\(session.user.displayName) is removed from this device.")
            }
        }
    }
}
