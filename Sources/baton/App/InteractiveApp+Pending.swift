import AircraftChecks
import BatonFlows
import BatonOData
import BatonOffline
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension InteractiveApp {
    // MARK: Pending changes and the error archive

    func pendingList() async throws {
        let me = try await device.userName()
        let entries = try await device.store.pendingEntries()
        ui.newScreen()
        ui.heading("Pending changes — \(entries.count), in upload order")
        for entry in entries.prefix(18) {
            let who = entry.author == me ? "you" : entry.author
            ui.say("  " + Self.describe(entry) + " by \(who)", entry.author == me ? .plain : .info)
        }
        if entries.count > 18 { ui.dim("  … and \(entries.count - 18) more") }
        _ = await ui.ask("Enter goes back:")
    }

    /// "new check D-AIBL 5200 kg · 2026-11-21 14:05" from a queued change.
    static func describe(_ entry: QueueEntry) -> String {
        let body = (try? JSONValue(parsing: entry.body)) ?? .null
        let what =
            switch entry.method {
            case "POST": "new check"
            case "DELETE": "deleted"
            default: "changed"
            }
        var text = what + " " + (body["TailNumber"]?.stringValue ?? Self.clip(entry.entityID, 30))
        if let fuel = body["FuelKg"] { text += " \(fuel.serialized) kg" }
        return text + " · " + entry.createdAt.prefix(16).replacingOccurrences(of: "T", with: " ")
    }

    static func clip(_ text: String, _ width: Int) -> String {
        text.count > width ? String(text.prefix(width - 1)) + "…" : text
    }

    func archive() async throws {
        while true {
            let entries = try await device.store.archivedEntries()
            ui.newScreen()
            ui.heading("Error archive — \(entries.count) change\(entries.count == 1 ? "" : "s") the server refused")
            for (index, archived) in entries.prefix(9).enumerated() {
                ui.say("  \(index + 1)  \(Self.describe(archived.entry)) by \(archived.entry.author)")
                ui.dim("     \(archived.status): \(Self.clip(archived.message, 68))")
            }
            guard !entries.isEmpty, let answer = await ui.ask("Number to resolve · Enter back:"), !answer.isEmpty
            else {
                if entries.isEmpty { _ = await ui.ask("Nothing to resolve. Enter goes back:") }
                return
            }
            guard let number = Int(answer), entries.prefix(9).indices.contains(number - 1) else {
                ui.failure("'\(answer)' is not on the list.")
                continue
            }
            try await resolve(entries[number - 1])
        }
    }

    func resolve(_ archived: ArchiveEntry) async throws {
        ui.newScreen()
        ui.heading("\(Self.describe(archived.entry)) by \(archived.entry.author)")
        ui.dim("\(archived.status) \(archived.code): \(Self.clip(archived.message, 68))")
        if let fields = try? await device.store.conflict(archived) {
            for (index, line) in ConflictView.lines(fields, status: archived.status).enumerated() {
                ui.say(line, index == 0 ? .info : .plain)
            }
            ui.dim("  * this change sets the field")
        }
        ui.say("k  keep mine: send it again over the server's version")
        ui.say("t  take theirs: the server's version replaces mine")
        ui.say("e  edit the values and send them over the server's version      Enter  back")
        guard let action = await ui.ask("Resolve:")?.lowercased(), !action.isEmpty else { return }
        do {
            switch action {
            case "k":
                try await device.store.resend(archived)
                ui.notice("✓ Queued again; it goes with the next sync.")
            case "t":
                try await device.requireMayDrop(archived)
                try await device.store.takeServerVersion(archived)
                ui.notice("✓ The server's version is on the device; the change is dropped.")
            case "e":
                guard let values = await askChanges(of: try await device.check(archived.entry.entityID)) else {
                    return
                }
                guard !values.isEmpty else {
                    ui.notice("! Nothing changed; the entry stays in the archive.", .warning)
                    return
                }
                try await device.store.edit(archived, values: values)
                ui.notice("✓ Edited and queued again.")
            default:
                ui.failure("'\(action)' is not k, t or e.")
            }
        } catch {
            ui.failure(AppError.from(error).message)
        }
        await device.notePendingChanges()
    }

    /// Asks for new values of a check's measurements and remarks, each showing the current one; Enter keeps
    /// it. Returns only what changed; nil when the person goes back (end of input).
    func askChanges(of check: LocalEntity) async -> [String: PrimitiveValue]? {
        ui.dim("Enter keeps the value shown; '-' clears the remarks.")
        var values: [String: PrimitiveValue] = [:]
        for measurement in Measurement.all {
            let current = check.values[measurement.property] ?? .null
            guard
                let answer = await ui.ask(
                    "\(measurement.prompt) [\(current.display)]", optional: true, measurement.parse)
            else { return nil }
            if let answer, PrimitiveValue.decimal(answer) != current { values[measurement.property] = .decimal(answer) }
        }
        let remarks = check.values["Remarks"] ?? .null
        guard
            let answer = await ui.ask(
                "Remarks [\(Self.clip(remarks.display, 30))]:", optional: true, CheckForm.parseRemarks)
        else { return nil }
        if answer == "-" {
            if remarks != .null { values["Remarks"] = .null }
        } else if let answer, PrimitiveValue.string(answer) != remarks {
            values["Remarks"] = .string(answer)
        }
        return values
    }
}
