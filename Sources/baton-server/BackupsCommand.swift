import ArgumentParser
import BatonServer
import Foundation

/// `baton-server backups list|show`: the changes devices discarded (a user removed before their changes
/// reached the server), kept encrypted under each device's store key.
struct BackupsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backups", abstract: "Backups of changes that devices discarded.",
        subcommands: [List.self, Show.self, Delete.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the kept backups, newest first.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            let backups = try await data.open().devices.discardedChanges()
            if backups.isEmpty { print("No backups of discarded changes.") }
            let formatter = ISO8601DateFormatter()
            for backup in backups {
                print(
                    "\(backup.id)  \(formatter.string(from: backup.receivedAt))  \(backup.count) change(s) by "
                        + "\(backup.author), sent by \(backup.uploader) from device \(backup.device)")
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print one backup's changes (decrypted with the device's store key) as JSON.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The backup's id (from `backups list`).") var id: Int64

        func run() async throws {
            let server = try await data.open()
            let plain = try await adminAction { try await server.devices.openDiscardedChanges(id) }
            print(String(decoding: plain, as: UTF8.self))
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Delete one backup, to make room when a device's bound is reached (export it with `backups show` first). Audited."
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "The backup's id (from `backups list`).") var id: Int64

        func run() async throws {
            let server = try await data.open()
            try await adminAction { try await server.devices.deleteDiscardedChanges(id) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "backup-deleted", subject: String(id),
                    address: nil, detail: nil))
            print("Deleted backup \(id).")
        }
    }
}
