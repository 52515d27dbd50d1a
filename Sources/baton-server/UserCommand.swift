import ArgumentParser
import BatonServer
import Foundation

/// `baton-server user …`: manage users, also while the server runs.
struct UserCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "user", abstract: "Add, list, disable, delete and link users.",
        subcommands: [Add.self, List.self, Disable.self, Delete.self, Link.self])

    struct Link: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Link a user to a person at an identity provider: they then sign in only through it (their Baton password is refused)."
        )
        @OptionGroup var data: DataOptions
        @Argument var name: String
        @Option(help: "The identity provider's name.") var idp: String
        @Option(help: "The person's subject (the ID token's sub) at that provider.") var subject: String

        func run() async throws {
            let server = try await data.open()
            try await adminAction { try await server.users.link(name, to: idp, subject: subject) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "user-linked", subject: name, address: nil,
                    detail: "to \(idp)"))
            print("Linked \(name) to \(idp); they sign in through it from now on.")
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add a user. The password is read from standard input.")

        @OptionGroup var data: DataOptions
        @Argument(help: "The sign-in name (1-64 ASCII letters, digits, '.', '_', '-', '@').") var name: String
        @Option(help: "The name apps show.") var displayName: String?
        @Option(help: "ground-staff, supervisor or admin.") var role: String = "ground-staff"
        @Flag(help: "Read the password from standard input (one line). Passwords are never arguments.")
        var passwordStdin = false
        @Option(help: .hidden) var bcryptCost: UInt8 = 12

        func run() async throws {
            guard let role = User.Role(rawValue: role) else {
                throw ValidationError(
                    "--role must be one of \(User.Role.allCases.map(\.rawValue).joined(separator: ", ")), not '\(role)'."
                )
            }
            guard passwordStdin else {
                throw ValidationError(
                    "Pass --password-stdin and give the password on standard input; it is never an argument.")
            }
            guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                throw CommandFailure("No password on standard input.")
            }
            let server = try await data.open(bcryptCost: bcryptCost)
            let user = try await adminAction {
                try await server.users.add(name: name, displayName: displayName, role: role, password: line)
            }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "user-added", subject: user.name, address: nil,
                    detail: "role \(user.role.rawValue)"))
            print("Added \(user.name) (\(user.role.rawValue)).")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List users.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            let users = try await data.open().users.list()
            guard !users.isEmpty else {
                print("No users yet. Add one with: baton-server user add NAME --password-stdin")
                return
            }
            let width = max(4, users.map(\.name.count).max() ?? 4)
            print(
                "NAME".padding(toLength: width, withPad: " ", startingAt: 0) + "  ROLE          STATUS    DISPLAY NAME")
            for user in users {
                print(
                    user.name.padding(toLength: width, withPad: " ", startingAt: 0) + "  "
                        + user.role.rawValue.padding(toLength: 12, withPad: " ", startingAt: 0) + "  "
                        + (user.disabled ? "disabled" : "active  ") + "  " + user.displayName)
            }
        }
    }

    struct Disable: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Disable a user: their tokens stop working at once.")
        @OptionGroup var data: DataOptions
        @Argument var name: String

        func run() async throws {
            let server = try await data.open()
            try await adminAction { try await server.users.disable(name) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "user-disabled", subject: name, address: nil,
                    detail: nil))
            print("Disabled \(name).")
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Delete a user, their tokens and device registrations.")
        @OptionGroup var data: DataOptions
        @Argument var name: String

        func run() async throws {
            let server = try await data.open()
            try await adminAction { try await server.users.delete(name) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "user-deleted", subject: name, address: nil,
                    detail: nil))
            print("Deleted \(name).")
        }
    }
}
