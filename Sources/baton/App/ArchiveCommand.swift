import ArgumentParser
import BatonOData
import BatonOffline
import Foundation

/// An archived conflict as a person compares it: the server's version beside the device's, field by field.
/// The interactive archive screen and `baton archive` print the same lines.
enum ConflictView {
    /// The header and one line per field that differs or that the change sets (`*`), then how many fields
    /// agree. Without a server version (a refusal that is no conflict) only what the change sets. Fits 80
    /// columns.
    static func lines(_ fields: [ConflictField], status: Int) -> [String] {
        let known = fields.contains { $0.server != nil }
        let shown = fields.filter { $0.changedHere || (known && $0.differs) }
        let unknown = status == 404 || status == 410 ? "(deleted)" : "(not sent)"
        var lines = [row("", "FIELD", "ON THE SERVER", "ON THIS DEVICE")]
        for field in shown {
            lines.append(
                row(
                    field.changedHere ? "*" : "", field.property, field.server.map(\.display) ?? unknown,
                    field.mine.map(\.display) ?? "(deleted)"))
        }
        let same = fields.count - shown.count
        if known, same > 0 { lines.append("    \(same) other field\(same == 1 ? "" : "s") the same on both") }
        return lines
    }

    static func row(_ mark: String, _ property: String, _ server: String, _ mine: String) -> String {
        func cell(_ text: String, _ width: Int) -> String {
            let flat = text.replacingOccurrences(of: "\n", with: " ")
            let clipped = flat.count > width - 1 ? String(flat.prefix(width - 2)) + "…" : flat
            return clipped.padding(toLength: width, withPad: " ", startingAt: 0)
        }
        let line = "  " + cell(mark, 2) + cell(property, 22) + cell(server, 27) + cell(mine, 27)
        return String(line.reversed().drop { $0 == " " }.reversed())
    }
}

// MARK: archive

struct ArchiveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "archive",
        abstract: "Changes the server refused (the error archive), with the server's version beside yours.",
        subcommands: [Show.self, Resolve.self], defaultSubcommand: Show.self)

    struct Field: Encodable {
        let property: String
        let server: String?
        let mine: String?
        let changedHere: Bool
    }

    struct Entry: Encodable {
        let number: Int
        let requestID: String
        let author: String
        let method: String
        let entity: String
        let status: Int
        let code: String
        let reason: String
        let fields: [Field]
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "show", abstract: "List the error archive; conflicts show both versions side by side.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                let archive = try await device.store.archivedEntries()
                var entries: [Entry] = []
                var printed: [String] = []
                for (index, archived) in archive.enumerated() {
                    let fields = try await device.store.conflict(archived)
                    entries.append(
                        Entry(
                            number: index + 1, requestID: archived.entry.requestID, author: archived.entry.author,
                            method: archived.entry.method, entity: archived.entry.entityID, status: archived.status,
                            code: archived.code, reason: archived.message,
                            fields: fields.map {
                                Field(
                                    property: $0.property, server: $0.server?.jsonText, mine: $0.mine?.jsonText,
                                    changedHere: $0.changedHere)
                            }))
                    printed.append(
                        "\(index + 1)  \(InteractiveApp.describe(archived.entry)) by \(archived.entry.author)")
                    printed.append("   request \(archived.entry.requestID) · \(archived.status) \(archived.code)")
                    printed.append("   " + archived.message)
                    printed += ConflictView.lines(fields, status: archived.status)
                }
                if json {
                    try printJSON(entries)
                } else {
                    print(
                        archive.isEmpty
                            ? "The error archive is empty." : ConsoleUI.wrapped(printed.joined(separator: "\n")))
                }
            }
        }
    }

    struct Resolve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "resolve",
            abstract: "Resolve an archived change: keep yours, take the server's, or edit and send again.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The entry's number in `baton archive` or its request id.") var entry: String
        @Flag(help: "Send your change again over the server's version (only its author).") var keepMine = false
        @Flag(help: "Take the server's version; your change is dropped.") var takeTheirs = false
        @Flag(help: "Send the values given below over the server's version (only its author).") var edit = false
        @OptionGroup var changes: CheckChanges

        func validate() throws {
            guard [keepMine, takeTheirs, edit].filter({ $0 }).count == 1 else {
                throw ValidationError("Choose one of --keep-mine, --take-theirs or --edit.")
            }
        }

        func run() async throws {
            let values = try validated {
                let values = try changes.values()
                if edit, values.isEmpty { throw AppError(.invalidInput, "--edit needs at least one value to send.") }
                if !edit, !values.isEmpty { throw AppError(.usage, "Values are only given with --edit.") }
                return values
            }
            try await runScripted(device, signIn: signIn) { device, _ in
                let archive = try await device.store.archivedEntries()
                let chosen =
                    Int(entry).flatMap { archive.indices.contains($0 - 1) ? archive[$0 - 1] : nil }
                    ?? archive.first { $0.entry.requestID == entry.lowercased() }
                guard let chosen else {
                    throw AppError(
                        .notFound, "No entry \(entry.prefix(40)) in the error archive; `baton archive` lists them.")
                }
                if !takeTheirs, chosen.entry.author != (try await device.userName()) {
                    throw AppError(
                        .notPermitted,
                        "Only \(chosen.entry.author) can send their change again; you can take the server's version.")
                }
                if keepMine {
                    try await device.store.resend(chosen)
                    print("Queued your change again over the server's version; it goes with the next sync.")
                } else if takeTheirs {
                    try await device.requireMayDrop(chosen)
                    try await device.store.takeServerVersion(chosen)
                    print("The server's version is on this device; the change is dropped.")
                } else {
                    try await device.store.edit(chosen, values: values)
                    print("Edited and queued again over the server's version; it goes with the next sync.")
                }
            }
        }
    }
}
