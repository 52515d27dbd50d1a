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

/// Where the device's files are and which server it belongs to (every command).
struct DeviceOptions: ParsableArguments {
    @Option(help: "The device's data directory (users' secure stores, the encrypted offline store).")
    var dataDir: String = "baton-device"

    @Option(help: "The server, e.g. http://127.0.0.1:8080 (remembered on first use).")
    var server: String?

    @Flag(help: "Work with no network: nothing is sent to the server.")
    var offline = false

    var directory: URL { URL(fileURLWithPath: dataDir) }
}

/// Who signs in for a scriptable command, and how the passcode arrives (never on the command line).
struct SignInOptions: ParsableArguments {
    @Option(help: "The user (their name on the server) who runs the command.")
    var user: String

    @Flag(help: "Read the passcode from the first line of standard input instead of a hidden prompt.")
    var passcodeStdin = false

    @Option(
        help: ArgumentHelp(
            "What the user agrees to, when a newer app asks for consent they never gave: data[,usage].",
            valueName: "data[,usage]"))
    var consent: String = ""

    func validate() throws { _ = try parseConsents(consent) }
}

/// `--consent data,usage` as consent kinds; an unknown word is a usage error.
func parseConsents(_ text: String) throws -> Set<ConsentKind> {
    var kinds: Set<ConsentKind> = []
    for word in text.split(separator: ",") {
        guard let kind = ConsentKind(rawValue: word.trimmingCharacters(in: .whitespaces).lowercased()) else {
            throw ValidationError("--consent takes data and usage, not '\(word.prefix(20))'.")
        }
        kinds.insert(kind)
    }
    return kinds
}

/// Runs a scriptable command: opens the device, signs `user` in (a restore: passcode only, synced when the
/// server is reachable), runs `body`, and closes the session again. Errors become a message on standard
/// error and the documented exit status.
func runScripted(
    _ options: DeviceOptions, signIn: SignInOptions?, onboarding newUser: String? = nil, password: String? = nil,
    passcode: String? = nil, approver: Approver? = nil, consents: Set<ConsentKind> = [],
    _ body: (Device, ConsoleUI) async throws -> Void
) async throws {
    let ui = ConsoleUI()
    do {
        var passcode = passcode
        if let signIn, signIn.passcodeStdin, passcode == nil { passcode = readSecretLine("passcode") }
        let presenter = ScriptPresenter(
            ui: ui, username: signIn?.user ?? newUser, password: password, passcode: passcode, approver: approver,
            consents: consents.union((try? parseConsents(signIn?.consent ?? "")) ?? []))
        let device = try await Device.open(
            directory: options.directory, server: options.server, offline: options.offline, presenter: presenter,
            askServer: { throw AppError(.usage, "This device has no server yet; give --server URL.") })
        if let newUser, await device.sessions.users.user(serverUserID: newUser) != nil {
            throw AppError(.usage, "\(newUser) is on this device already.")
        }
        if let name = signIn?.user {
            guard let user = await device.sessions.users.user(serverUserID: name), user.status == .success else {
                throw AppError(.notFound, "\(name) is not on this device; `baton users` lists who is.")
            }
            _ = try await device.sessions.switchUser(to: user.id)
        }
        do {
            try await body(device, ui)
        } catch {
            await device.notePendingChanges()
            await device.sessions.close()
            throw error
        }
        await device.notePendingChanges()
        await device.sessions.close()
    } catch {
        let failure = AppError.from(error)
        FileHandle.standardError.write(Data("baton: \(failure.message)\n".utf8))
        throw failure.exitCode
    }
}

/// Runs `body`, a check of the command's own values before anything is opened: its refusal goes to standard
/// error and ends the command with its exit status.
func validated<T>(_ body: () throws -> T) throws -> T {
    do { return try body() } catch let error as AppError {
        FileHandle.standardError.write(Data("baton: \(error.message)\n".utf8))
        throw error.exitCode
    }
}

/// One line of standard input (for `--passcode-stdin` / `--password-stdin`); nil when there is none.
func readSecretLine(_ what: String) -> String? {
    guard let line = readLine(strippingNewline: true), !line.isEmpty else { return nil }
    return line
}

/// Prints `value` as sorted, indented JSON.
func printJSON(_ value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}

// MARK: users

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

// MARK: sync

struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync", abstract: "Upload the device's pending changes, then download what changed.")
    @OptionGroup var device: DeviceOptions
    @OptionGroup var signIn: SignInOptions
    @Flag(help: "Print JSON.") var json = false

    struct Result: Encodable {
        let uploaded: [String: Int]
        let archived: Int
        let waiting: Int
        let downloaded: Int
        let removed: Int
        let summary: String
        let traceID: String
    }

    func run() async throws {
        try await runScripted(device, signIn: signIn) { device, ui in
            // The trace spans the whole sync, token refresh included; a failed sync names it too, so its
            // requests can be found in the server's log.
            let (outcome, traceID) = await RequestTrace.run { traceID in
                do {
                    return (
                        Swift.Result<SyncReport, any Error>.success(try await device.sync { _ in }), traceID
                    )
                } catch {
                    return (.failure(error), traceID)
                }
            }
            var summary: SyncReport
            do {
                summary = try outcome.get()
            } catch {
                FileHandle.standardError.write(Data("trace id \(traceID)\n".utf8))
                throw error
            }
            // The sign-in already synced when the server was reachable: count what it uploaded too.
            if let atSignIn = try await device.session().syncReport {
                summary.upload.uploaded = atSignIn.upload.uploaded + summary.upload.uploaded
                summary.upload.archived = atSignIn.upload.archived + summary.upload.archived
            }
            if json {
                try printJSON(
                    Result(
                        uploaded: summary.upload.uploadedByAuthor, archived: summary.archived.count,
                        waiting: summary.waiting.count, downloaded: summary.download.updated,
                        removed: summary.download.removed, summary: summary.summary, traceID: traceID))
            } else {
                print(summary.summary)
                print("trace id \(traceID) (the server logs it with each request of this sync)")
                for archived in summary.archived {
                    print("archived: \(archived.entry.author)'s \(archived.entry.entityID): \(archived.message)")
                }
            }
            guard summary.upload.isComplete else {
                throw AppError(.incomplete, "The sync left changes behind: " + summary.summary)
            }
        }
    }
}

// MARK: aircraft and checks

/// A check as the JSON output shows it.
struct CheckJSON: Encodable {
    let id: String
    let tailNumber: String
    let flightNumber: String?
    let fuelKg: String
    let tyrePressureMainPsi: String
    let tyrePressureNosePsi: String
    let oilQuarts: String
    let remarks: String?
    let status: String
    let checkedBy: String?
    let uploadedBy: String?
    let changedAt: String?
    let onDevice: Bool

    init(_ entity: LocalEntity) {
        func text(_ name: String) -> String? { entity.values[name]?.jsonText }
        id = entity.id
        tailNumber = text("TailNumber") ?? ""
        flightNumber = text("FlightNumber")
        fuelKg = text("FuelKg") ?? ""
        tyrePressureMainPsi = text("TyrePressureMainPsi") ?? ""
        tyrePressureNosePsi = text("TyrePressureNosePsi") ?? ""
        oilQuarts = text("OilQuarts") ?? ""
        remarks = text("Remarks")
        status = text("Status") ?? ""
        checkedBy = text("CheckedBy")
        uploadedBy = text("UploadedBy")
        changedAt = text("ChangedAt")
        onDevice = entity.pending
    }
}

struct AircraftCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "aircraft", abstract: "The aircraft on this device with their latest check.",
        subcommands: [List.self, SetStatus.self], defaultSubcommand: List.self)

    struct SetStatus: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-status", abstract: "Set an aircraft's status, as a supervisor (ready or maintenance).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The aircraft's tail number.") var tail: String
        @Argument(help: "ready or maintenance.") var status: String

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.setStatus(tail: tail, to: status)
                print(
                    "\(tail.uppercased()) is \(status.lowercased()) on this device; it is uploaded with the next sync.")
            }
        }
    }
}

extension AircraftCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list", abstract: "The aircraft on this device with their latest check.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Option(help: "Only this station (e.g. FRA).") var station: String?
        @Option(help: "Only this status (e.g. ready, maintenance).") var status: String?
        @Flag(help: "Print JSON.") var json = false

        struct Entry: Encodable {
            let tailNumber: String
            let type: String
            let station: String
            let status: String
            let latestCheck: CheckJSON?
        }

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, ui in
                let rows = try await device.aircraft(station: station, status: status)
                if json {
                    try printJSON(
                        rows.map {
                            Entry(
                                tailNumber: $0.tail, type: $0.aircraft.values["Type"]?.display ?? "",
                                station: $0.aircraft.values["Station"]?.display ?? "",
                                status: $0.aircraft.values["Status"]?.display ?? "",
                                latestCheck: $0.latest.map(CheckJSON.init))
                        })
                    return
                }
                print(InteractiveApp.aircraftHeader)
                for row in rows { print(InteractiveApp.line(row)) }
            }
        }
    }
}

/// New values for a check (`checks edit`, `archive resolve --edit`), validated by the form's rules.
struct CheckChanges: ParsableArguments {
    @Option(help: "Fuel in kg (0–400000).") var fuelKg: String?
    @Option(help: "Main tyre pressure in psi (30–350).") var mainPsi: String?
    @Option(help: "Nose tyre pressure in psi (30–350).") var nosePsi: String?
    @Option(help: "Oil in quarts (0–50).") var oilQuarts: String?
    @Option(help: "Remarks (up to 500 characters; empty clears them).") var remarks: String?

    func values() throws -> [String: PrimitiveValue] {
        var values: [String: PrimitiveValue] = [:]
        for (measurement, text) in zip(Measurement.all, [fuelKg, mainPsi, nosePsi, oilQuarts]) {
            guard let text else { continue }
            switch measurement.parse(text) {
            case .success(let value): values[measurement.property] = .decimal(value)
            case .failure(let problem): throw AppError(.invalidInput, problem.message)
            }
        }
        if let remarks {
            switch CheckForm.parseRemarks(remarks) {
            case .success(let text): values["Remarks"] = text.isEmpty ? .null : .string(text)
            case .failure(let problem): throw AppError(.invalidInput, problem.message)
            }
        }
        return values
    }
}

struct ChecksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checks", abstract: "Pre-flight checks: record, list, edit, finalize or delete them.",
        subcommands: [Add.self, List.self, Edit.self, Finalize.self, Delete.self])

    struct Edit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Correct a check on this device: your own, or anyone's as a supervisor (uploaded with the next sync).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id (from `checks list --json`).") var id: String
        @OptionGroup var changes: CheckChanges

        func run() async throws {
            let values = try validated { try changes.values() }
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.edit(id, values: values)
                print("Changed \(id) on this device; it is uploaded with the next sync.")
            }
        }
    }

    struct Finalize: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Turn a draft check into a final one.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id.") var id: String

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.finalize(id)
                print("Finalized \(id) on this device; it is uploaded with the next sync.")
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete one of your draft checks.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id.") var id: String

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.deleteDraft(id)
                print("Deleted \(id) on this device; the deletion is uploaded with the next sync.")
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Record a pre-flight check on this device (uploaded with the next sync).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Option(help: "The aircraft's tail number.") var tail: String
        @Option(help: "The flight (optional; one of the aircraft's flights).") var flight: String?
        @Option(help: "Fuel in kg (0–400000).") var fuelKg: String
        @Option(help: "Main tyre pressure in psi (30–350).") var mainPsi: String
        @Option(help: "Nose tyre pressure in psi (30–350).") var nosePsi: String
        @Option(help: "Oil in quarts (0–50).") var oilQuarts: String
        @Option(help: "Remarks (up to 500 characters).") var remarks: String?
        @Option(help: "final or draft.") var status: String = "final"
        @Flag(help: "Print JSON.") var json = false

        func form() throws -> CheckForm {
            var form = CheckForm(tailNumber: tail, flightNumber: flight)
            for (measurement, text) in zip(Measurement.all, [fuelKg, mainPsi, nosePsi, oilQuarts]) {
                switch measurement.parse(text) {
                case .success(let value): form.measurements[measurement.property] = value
                case .failure(let problem): throw AppError(.invalidInput, problem.message)
                }
            }
            if let remarks {
                switch CheckForm.parseRemarks(remarks) {
                case .success(let text): form.remarks = text
                case .failure(let problem): throw AppError(.invalidInput, problem.message)
                }
            }
            switch CheckForm.parseStatus(status) {
            case .success(let text): form.status = text
            case .failure(let problem): throw AppError(.invalidInput, problem.message)
            }
            return form
        }

        func run() async throws {
            // Validate the values before asking for a passcode.
            let form = try validated { try self.form() }
            try await runScripted(device, signIn: signIn) { device, ui in
                let id = try await device.record(form)
                let saved = try await device.store.read(id)
                if json, let entity = saved.first {
                    try printJSON(CheckJSON(entity))
                } else {
                    print("Saved \(id) on this device; it is uploaded with the next sync.")
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List checks, newest first (unsynced first).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Option(help: "Only this aircraft.") var tail: String?
        @Option(help: "At most this many.") var top = 20
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, ui in
                if let tail { _ = try await device.aircraft(tail: tail) }
                let checks = try await device.checks(tail: tail, top: max(1, min(top, 1000)))
                if json {
                    try printJSON(checks.map(CheckJSON.init))
                } else {
                    for check in checks {
                        print(check.values["TailNumber"]?.display ?? "", InteractiveApp.describe(check))
                    }
                }
            }
        }
    }
}

// MARK: pending

struct PendingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pending", abstract: "Changes on this device the server does not have yet, and the error archive.")
    @OptionGroup var device: DeviceOptions
    @OptionGroup var signIn: SignInOptions
    @Flag(help: "Print JSON.") var json = false

    struct Entry: Encodable {
        let requestID: String
        let author: String
        let method: String
        let entity: String
        let createdAt: String
        let archived: Bool
        let reason: String?
    }

    func run() async throws {
        try await runScripted(device, signIn: signIn) { device, ui in
            let queued = try await device.store.pendingEntries().map {
                Entry(
                    requestID: $0.requestID, author: $0.author, method: $0.method, entity: $0.entityID,
                    createdAt: $0.createdAt, archived: false, reason: nil)
            }
            let archived = try await device.store.archivedEntries().map {
                Entry(
                    requestID: $0.entry.requestID, author: $0.entry.author, method: $0.entry.method,
                    entity: $0.entry.entityID, createdAt: $0.entry.createdAt, archived: true, reason: $0.message)
            }
            if json {
                try printJSON(queued + archived)
                return
            }
            let counts = Dictionary(grouping: queued, by: \.author).mapValues(\.count)
            print(
                counts.isEmpty
                    ? "No pending changes."
                    : counts.sorted { $0.key < $1.key }.map {
                        "\($0.value) change\($0.value == 1 ? "" : "s") by \($0.key)"
                    }
                    .joined(separator: ", "))
            for entry in queued { print("  \(entry.method) \(entry.entity) by \(entry.author) at \(entry.createdAt)") }
            for entry in archived {
                print("  archived: \(entry.method) \(entry.entity) by \(entry.author): \(entry.reason ?? "")")
            }
        }
    }
}

// MARK: logs

struct LogsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logs", abstract: "This device's log: send it to support.", subcommands: [Send.self])

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send this device's log to the server for support (events and codes, never secrets or values).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                let lines = try await device.sendLog(reason: "support")
                print("Sent \(lines) log line\(lines == 1 ? "" : "s") to support.")
            }
        }
    }
}

// MARK: lock

struct LockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock", abstract: "Lock the app running on this device now (e.g. at shift end).")
    @OptionGroup var device: DeviceOptions

    func run() async throws {
        let pidFile = device.directory.appendingPathComponent("app.pid")
        guard let text = try? String(contentsOf: pidFile, encoding: .utf8), let pid = pid_t(text), kill(pid, 0) == 0
        else {
            print("No baton app is open on \(device.dataDir): the device is locked.")
            return
        }
        guard kill(pid, SIGUSR1) == 0 else {
            FileHandle.standardError.write(Data("baton: cannot signal the app (process \(pid)).\n".utf8))
            throw ExitCode(AppError.Status.failed.rawValue)
        }
        print("Locked the baton app (process \(pid)).")
    }
}
