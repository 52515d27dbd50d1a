import ArgumentParser
import BatonServer
import Foundation

/// `baton-server devices list|revoke|wipe`: the tablets that joined this server, and taking one out of service
/// (as the cockpit's devices page does).
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "List devices, revoke a lost one, or order one to wipe itself.",
        subcommands: [List.self, Revoke.self, Wipe.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List devices, the most recently seen first.")
        @OptionGroup var data: DataOptions
        @Option(help: "Only devices whose id contains this.") var search = ""

        func run() async throws {
            let devices = try await data.open().devices.summaries(search: search)
            if devices.isEmpty { print("No devices.") }
            let formatter = ISO8601DateFormatter()
            for device in devices {
                var state: [String] = []
                if let at = device.revokedAt { state.append("revoked \(formatter.string(from: at))") }
                if let at = device.wipeOrderedAt { state.append("wipe ordered \(formatter.string(from: at))") }
                if let at = device.wipedAt { state.append("wiped \(formatter.string(from: at))") }
                let users = device.users.map { $0.active ? $0.name : "(\($0.name))" }.joined(separator: " ")
                print(
                    "\(device.id)  last seen \(device.lastSeenAt.map(formatter.string(from:)) ?? "never")  "
                        + "app \(device.appVersion ?? "?")  users: \(users.isEmpty ? "none" : users)"
                        + (state.isEmpty ? "" : "  [" + state.joined(separator: ", ") + "]"))
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Take a device out of service: its sign-ins stop at once, its store key is no longer released, and at its next contact it backs up its users' pending changes to the server and wipes itself."
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The device id (from `devices list`).") var device: String

        func run() async throws {
            let server = try await data.open()
            let changed = try await adminAction { try await server.devices.revoke(device: device) }
            if changed {
                try await server.audit.record(
                    AuditEntry(
                        at: Date(), actor: "admin (command line)", action: "device-revoked", subject: device,
                        address: nil, detail: nil))
            }
            print(changed ? "Revoked \(device)." : "\(device) was revoked already.")
        }
    }

    struct Wipe: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Order a device to wipe itself at its next contact: its users' pending changes are uploaded or backed up first."
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The device id (from `devices list`).") var device: String

        func run() async throws {
            let server = try await data.open()
            try await adminAction { try await server.devices.orderWipe(device: device) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "device-wipe-ordered", subject: device,
                    address: nil, detail: nil))
            print("Ordered \(device) to wipe itself at its next contact.")
        }
    }
}
