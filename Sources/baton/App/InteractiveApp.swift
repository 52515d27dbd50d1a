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

/// The ground-crew app at the terminal: the user list and passcode, home with the aircraft, recording a
/// check, pending changes, the error archive, sync, lock, switch, add, reset passcode, sign out and removal.
/// Every screen fits 80x24; every prompt re-asks with the reason on bad input; an empty answer goes back.
struct InteractiveApp {
    let ui: ConsoleUI
    let device: Device
    var sessions: OnboardingSessionManager { device.sessions }

    enum Next { case home, signIn, quit }

    func run() async throws {
        let pidFile = device.directory.appendingPathComponent("app.pid")
        try Data("\(getpid())".utf8).write(to: pidFile, options: .atomic)
        defer { try? FileManager.default.removeItem(at: pidFile) }
        let stopWatchers = startWatchers()
        defer { stopWatchers() }
        device.logger.info("app started", metadata: ["version": "1.0", "offline": "\(device.offline)"])
        ui.heading("Baton — pre-flight checks on a shared device")
        ui.dim("Server \(device.serverURL.absoluteString)\(device.offline ? " (offline: nothing is sent)" : "")")
        var next = Next.signIn
        var startCounted = false
        while next != .quit {
            switch next {
            case .signIn:
                next = await signIn()
                // The app start counts once someone signed in: only then is their usage consent known.
                if next == .home, !startCounted {
                    startCounted = true
                    await device.recordUsage(.appStart)
                }
            case .home: next = await home()
            case .quit: break
            }
        }
        await device.notePendingChanges()
        await sessions.close()
        ui.say("Bye. The device is locked.")
    }

    // MARK: Sign-in

    func signIn() async -> Next {
        while true {
            do {
                // A new screen: nothing of the previous user stays visible on the shared device.
                ui.newScreen()
                if await sessions.users.activeUsers.isEmpty {
                    ui.heading("Welcome! Nobody uses this device yet: the first user onboards.")
                }
                let switching = await sessions.state != .closed
                let session = try await withDownloadProgress {
                    switching ? try await sessions.switchUser() : try await sessions.open()
                }
                device.logger.info(
                    switching ? "user switched" : "signed in", metadata: ["role": "\(session.user.role ?? "")"])
                await device.recordUsage(switching ? .switchUser : .signIn)
                await device.notePendingChanges()
                ui.newScreen()
                ui.notice("✓ Signed in as \(session.user.displayName).")
                if let report = session.syncReport, !report.upload.uploaded.isEmpty {
                    ui.notice("✓ Synced on sign-in: " + report.summary)
                }
                return .home
            } catch let error as FlowsError where error.code == .cancelled && error.message == ConsolePresenter.quit {
                return .quit
            } catch let error as FlowsError where error.code == .appVersionInactive {
                return await inactiveVersion(error)
            } catch let error as FlowsError where error.code == .userMismatch {
                // A signed-out user's sign-in as another account: offer that account.
                if let next = try? await offerSignedInAccount(error), next == .home { return .home }
            } catch let error as FlowsError where error.code == .userWithdrawn || error.code == .deviceWiped {
                // The server withdrew the user or the device: what they held is on the server; the list goes on.
                ui.notice("! " + error.message, .warning)
                guard let again = await ui.ask("Enter continues · q quits:"), again.lowercased() != "q" else {
                    return .quit
                }
            } catch let error as FlowsError where error.code == .cancelled {
                if ui.inputEnded { return .quit }
                ui.notice("! " + error.message, .warning)
            } catch {
                if ui.inputEnded { return .quit }
                device.logger.warning("sign-in failed", metadata: ["code": "\(AppError.code(of: error))"])
                // Not a prompt's answer (no network for onboarding, a wiped store): wait for the person.
                ui.notice("✗ " + AppError.from(error).message, .error)
                guard let again = await ui.ask("Enter tries again · q quits:"), again.lowercased() != "q" else {
                    return .quit
                }
            }
        }
    }

    /// Runs `body` (a flow that may download) with a progress display of the store's download events.
    func withDownloadProgress<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        let events = await device.store.progress()
        let ui = ui
        let listener = Task {
            var progress: ConsoleUI.Progress?
            for await event in events {
                // A sign-in's delta download usually brings nothing: no bar for that.
                guard case .download(let query, let entities, let pages) = event, entities > 0 else { continue }
                let index = Device.definingQueries.firstIndex { $0.name == query } ?? 0
                let display = progress ?? ui.progress("Downloading to this device")
                progress = display
                let fraction =
                    (Double(index) + Double(pages) / Double(pages + 1)) / Double(Device.definingQueries.count)
                display.update(fraction, "Downloading: \(query), \(entities) entities")
            }
            progress?.finish(true)
        }
        defer { listener.cancel() }
        return try await body()
    }

    // MARK: Home

    func statusLine() async -> String {
        guard let session = await sessions.session else { return "locked" }
        let me = session.user.serverUserID ?? ""
        let online = await device.isOnline()
        let counts = (try? await device.store.pendingCounts()) ?? [:]
        let archived = (try? await device.store.archivedEntries().count) ?? 0
        let total = counts.values.reduce(0, +)
        var line = "\(session.user.displayName) (\(session.user.role ?? "user")) · \(online ? "online" : "OFFLINE")"
        line += " · \(total) pending (\(counts[me] ?? 0) yours)"
        if archived > 0 { line += " · \(archived) in error archive" }
        return line
    }

    func home() async -> Next {
        ui.newScreen()
        let status = await statusLine()
        ui.say(status, .init(color: .black, background: .white))
        ui.say(
            """
               1  Aircraft                     8  Add a user
               2  Record a pre-flight check    9  Reset my passcode
               3  Pending changes             10  Sign out
               4  Error archive               11  Remove a user
               5  Sync now                    12  Change my passcode
               6  Lock                        13  Privacy: usage data
               7  Switch user                 14  Send logs to support
                                               q  Quit
            """)
        guard let choice = await ui.ask("Choose:") else { return .quit }
        guard await sessions.state == .open else { return .signIn }
        await sessions.recordActivity()
        do {
            switch choice.lowercased() {
            case "1": try await aircraftList()
            case "2": try await recordCheck(tail: nil)
            case "3": try await pendingList()
            case "4": try await archive()
            case "5": try await sync()
            case "6":
                await sessions.lock()
                ui.notice("✓ Locked. The next person picks their name.")
                return .signIn
            case "7": return .signIn
            case "8":
                _ = try await withDownloadProgress { try await sessions.addUser() }
                await device.notePendingChanges()
                ui.notice("✓ Added. \(await sessions.session?.user.displayName ?? "The new user") is signed in.")
            case "9": return try await resetMyPasscode()
            case "10":
                guard
                    await confirm(
                        "Sign out? Your changes stay on the device; you sign in with your password next time.")
                else { break }
                try await sessions.signOut()
                ui.notice("✓ Signed out.")
                return .signIn
            case "11": return try await removeUser()
            case "12":
                try await sessions.changePasscode()
                ui.notice("✓ Your passcode is changed; your data is as it was.")
            case "13": try await privacy()
            case "14":
                guard
                    await confirm(
                        "Send this device's log to support? It holds events and codes, no passwords or values.")
                else { break }
                let lines = try await device.sendLog(reason: "support")
                ui.notice("✓ Sent \(lines) log line\(lines == 1 ? "" : "s") to support.")
            case "q", "quit": return .quit
            case "": break
            default: ui.failure("'\(choice)' is not on the menu; type a number from 1 to 14, or q.")
            }
        } catch let error as FlowsError where error.code == .appVersionInactive {
            return await inactiveVersion(error)
        } catch let error as FlowsError where error.code == .userWithdrawn || error.code == .deviceWiped {
            ui.notice("! " + error.message, .warning)
            return .signIn
        } catch let error as FlowsError where error.code == .cancelled {
            // Removing oneself opens the user list (or onboarding) at once; quitting there quits the app.
            if error.message == ConsolePresenter.quit || ui.inputEnded { return .quit }
            ui.notice("! " + error.message, .warning)
        } catch {
            await device.noteFailure(error, doing: "menu \(Self.clip(choice, 8))")
            ui.notice("✗ " + AppError.from(error).message, .error)
        }
        return await sessions.state == .open ? .home : .signIn
    }

    /// What the signed-in user agreed to; usage data is turned on or off here.
    func privacy() async throws {
        ui.newScreen()
        ui.heading("Privacy — what you agreed to")
        let consent = await sessions.consent
        let when = consent.map { PrimitiveValue.shortTime(ODataDateTimeOffset($0.decidedAt)) } ?? "—"
        ui.say("Data consent: \(consent?.agreed(to: .data) == true ? "agreed" : "not given") (last answered \(when))")
        ui.dim("  Needed to use Baton; to withdraw it, remove yourself from this device (menu 11).")
        let usage = consent?.agreed(to: .usage) == true
        ui.say("Usage data:   \(usage ? "on — counts of use, no names, no values" : "off — no usage is counted")")
        ui.dim("  Separate: the support log (events and codes, never values) goes only when")
        ui.dim("  you send it (menu 14), an administrator asks, or a server setting says so.")
        guard let answer = await ui.ask("u turns usage data \(usage ? "off" : "on") · Enter back:")?.lowercased(),
            !answer.isEmpty
        else { return }
        guard answer == "u" else {
            ui.failure("'\(Self.clip(answer, 20))' is not u.")
            return
        }
        try await sessions.changeConsent(.usage, to: !usage)
        ui.notice("✓ Usage data is \(usage ? "off: nothing more is recorded" : "on") for you.")
    }

    /// The blocking screen of an app version the server retired: what to do, what stays safe, and quit.
    func inactiveVersion(_ error: FlowsError) async -> Next {
        await device.notePendingChanges()
        let waiting = await sessions.users.allUsers.compactMap(\.pendingChanges).reduce(0, +)
        await sessions.close()
        ui.newScreen()
        ui.heading("This version of Baton can no longer be used")
        ui.notice("✗ " + error.message, .error)
        ui.say("Ask your administrator for the current version and install it; then sign in as usual.")
        ui.say(
            waiting > 0
                ? "\(waiting) change\(waiting == 1 ? "" : "s") waiting on this device stay\(waiting == 1 ? "s" : "") safe here and upload after the update."
                : "Nothing is waiting on this device.")
        while let answer = await ui.ask("q quits:"), answer.lowercased() != "q" {}
        return .quit
    }

    /// Resets the passcode (sign in again as oneself); a sign-in as another account offers that account.
    func resetMyPasscode() async throws -> Next {
        let outcome: FlowsError?
        do {
            _ = try await sessions.resetPasscode()
            outcome = nil
        } catch {
            outcome = error
        }
        if let outcome {
            guard outcome.code == .userMismatch else { throw outcome }
            return try await offerSignedInAccount(outcome)
        }
        ui.notice("✓ Your passcode is changed.")
        return .home
    }

    /// A passcode reset signed in as another account: offer that account — its user here, or onboarding it.
    func offerSignedInAccount(_ error: FlowsError) async throws -> Next {
        ui.notice("! " + error.message, .warning)
        guard let account = error.serverUserID else { return .signIn }
        if let id = error.onboardingID {
            guard await confirm("\(account) is a user of this device. Open \(account)'s session instead?") else {
                return .signIn
            }
            _ = try await withDownloadProgress { try await sessions.switchUser(to: id) }
        } else {
            guard await confirm("\(account) is not on this device yet. Add \(account) as a new user?") else {
                return .signIn
            }
            _ = try await withDownloadProgress { try await sessions.addUser() }
        }
        await device.notePendingChanges()
        ui.notice("✓ \(await sessions.session?.user.displayName ?? account) is signed in.")
        return .home
    }

    func confirm(_ question: String) async -> Bool {
        guard let answer = await ui.ask(question + " [y/N]") else { return false }
        return ["y", "yes"].contains(answer.lowercased())
    }

    // MARK: Aircraft

    func aircraftList() async throws {
        var station: String?
        var status: String?
        var page = 0
        while true {
            let rows = try await device.aircraft(station: station, status: status)
            let pageSize = 14
            let pages = max(1, (rows.count + pageSize - 1) / pageSize)
            page = min(page, pages - 1)
            ui.newScreen()
            var title = "Aircraft"
            if let station { title += " at \(station.uppercased())" }
            if let status { title += " (\(status))" }
            ui.heading("\(title) — \(rows.count), page \(page + 1) of \(pages)")
            ui.say(Self.aircraftHeader)
            for row in rows.dropFirst(page * pageSize).prefix(pageSize) {
                ui.say(Self.line(row), row.latest?.pending == true ? .warning : .plain)
            }
            ui.dim("TAIL opens it · s STATION, t STATUS filters (alone: all) · n/p page · Enter back")
            guard let answer = await ui.ask("Aircraft:"), !answer.isEmpty else { return }
            let words = answer.split(separator: " ", maxSplits: 1).map(String.init)
            switch words[0].lowercased() {
            case "s": station = words.count > 1 ? words[1] : nil
            case "t": status = words.count > 1 ? words[1] : nil
            case "n": page += 1
            case "p": page = max(0, page - 1)
            default:
                do { try await aircraftDetail(tail: answer) } catch let error as AppError
                    where error.status == .notFound
                {
                    ui.failure(error.message)
                    _ = await ui.ask("Press Enter.")
                }
            }
        }
    }

    static let aircraftHeader = row("TAIL", "TYPE", "STN", "STATUS", "FUEL kg", "BY", "WHEN")

    /// One aircraft with its latest check, in the columns of ``aircraftHeader``.
    static func line(_ row: Device.AircraftRow) -> String {
        let aircraft = row.aircraft.values
        let check = row.latest?.values
        let when = check?["ChangedAt"].map { $0 == .null ? "on device" : $0.display } ?? "—"
        return Self.row(
            row.tail, aircraft["Type"]?.display ?? "", aircraft["Station"]?.display ?? "",
            aircraft["Status"]?.display ?? "", check?["FuelKg"]?.display ?? "—", check?["CheckedBy"]?.display ?? "",
            row.latest?.pending == true ? "• on device" : when)
    }

    static func row(_ columns: String...) -> String {
        let widths = [8, 16, 4, 12, 9, 10, 18]
        return zip(columns, widths).map { text, width in
            let clipped = text.count > width - 1 ? String(text.prefix(width - 2)) + "…" : text
            return clipped.padding(toLength: width, withPad: " ", startingAt: 0)
        }.joined().trimmingCharacters(in: .whitespaces)
    }

    func aircraftDetail(tail: String) async throws {
        while true {
            let aircraft = try await device.aircraft(tail: tail)
            let tail = aircraft.tailNumber
            ui.newScreen()
            ui.heading("\(tail) · \(aircraft.type) · \(aircraft.station) · \(aircraft.status)")
            ui.say("Flights:")
            for flight in try await device.flights(tail: tail).prefix(4) {
                let departure = PrimitiveValue.shortTime(ODataDateTimeOffset(flight.scheduledDeparture))
                ui.say("  \(flight.flightNumber)  departs \(departure)  gate \(flight.gate ?? "—")")
            }
            ui.say("Checks (newest first):")
            let checks = try await device.checks(tail: tail, top: 9).prefix(9)
            for (index, check) in checks.enumerated() {
                ui.say("\(index + 1)" + Self.describe(check), check.pending ? .warning : .plain)
            }
            let supervisor = ["supervisor", "admin"].contains(try await device.session().user.role ?? "")
            ui.dim(
                "r records a check · a number opens that check"
                    + (supervisor ? " · s ready|maintenance sets the status" : "") + " · Enter back")
            guard let answer = await ui.ask("\(tail):"), !answer.isEmpty else { return }
            let words = answer.split(separator: " ").map(String.init)
            do {
                switch words[0].lowercased() {
                case "r": try await recordCheck(tail: tail)
                case "s" where words.count == 2:
                    try await device.setStatus(tail: tail, to: words[1])
                    ui.notice("✓ \(tail) is \(words[1].lowercased()) on this device; it is sent with the next sync.")
                case let word where Int(word).map { checks.indices.contains($0 - 1) } == true:
                    try await checkDetail(checks[(Int(word) ?? 1) - 1].id)
                default:
                    ui.failure("'\(Self.clip(answer, 30))' is not one of the choices.")
                    _ = await ui.ask("Press Enter.")
                }
            } catch let error as AppError
                where error.status == .notPermitted || error.status == .invalidInput || error.status == .notFound
            {
                ui.failure(error.message)
                _ = await ui.ask("Press Enter.")
            }
        }
    }

    /// "5200 kg · 200.5/60 psi · 15 qt · final · alice · 2026-11-21 14:05Z" (or "• on device").
    static func describe(_ check: LocalEntity) -> String {
        let v = check.values
        var text = "  \(v["FuelKg"]?.display ?? "?") kg · \(v["TyrePressureMainPsi"]?.display ?? "?")/"
        text += "\(v["TyrePressureNosePsi"]?.display ?? "?") psi · \(v["OilQuarts"]?.display ?? "?") qt"
        text += " · \(v["Status"]?.display ?? "") · \(v["CheckedBy"]?.display ?? "")"
        text += check.pending ? " · • on device" : " · \(v["ChangedAt"]?.display ?? "")"
        return text
    }

    // MARK: Recording a check

    func recordCheck(tail: String?) async throws {
        ui.newScreen()
        ui.heading("Record a pre-flight check")
        ui.dim("Enter on its own goes back; nothing is saved until you confirm.")
        var form = CheckForm()
        if let tail {
            form.tailNumber = tail
        } else {
            let device = device
            var chosen: String?
            while chosen == nil {
                guard let answer = await ui.ask("Aircraft tail number:"), !answer.isEmpty else { return }
                do { chosen = try await device.aircraft(tail: answer).tailNumber } catch {
                    ui.failure(AppError.from(error).message)
                }
            }
            form.tailNumber = chosen ?? ""
        }
        let flights = try await device.flights(tail: form.tailNumber).map(\.flightNumber)
        if !flights.isEmpty {
            ui.dim("Flights of \(form.tailNumber): \(flights.joined(separator: ", "))")
            guard
                let flight = await ui.ask(
                    "Flight (Enter for none):", optional: true,
                    { text in
                        flights.contains(text.uppercased())
                            ? .success(text.uppercased())
                            : .failure(
                                InputProblem("Flight: '\(text)' is not one of \(flights.joined(separator: ", ")).")
                            )
                    })
            else { return }
            form.flightNumber = flight
        }
        for measurement in Measurement.all {
            guard let value = await ui.ask(measurement.prompt, measurement.parse), let value else { return }
            form.measurements[measurement.property] = value
        }
        guard let remarks = await ui.ask("Remarks (Enter for none):", optional: true, CheckForm.parseRemarks) else {
            return
        }
        form.remarks = remarks
        guard let status = await ui.ask("Status (final/draft, Enter for final):", optional: true, CheckForm.parseStatus)
        else { return }
        form.status = status ?? "final"
        let summary = Measurement.all.map { "\($0.short) \(form.measurements[$0.property] ?? 0) \($0.unit)" }
        ui.say("\(form.tailNumber)\(form.flightNumber.map { " / \($0)" } ?? ""): " + summary.joined(separator: " · "))
        guard await confirm("Save this check?") else {
            ui.notice("! Not saved.", .warning)
            return
        }
        _ = try await device.record(form)
        ui.notice("✓ \(form.tailNumber) check saved on this device; it is sent with the next sync.")
    }

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

    // MARK: Changing a check

    /// One check with what the signed-in user may do to it: edit, finalize a draft, delete their own draft.
    func checkDetail(_ id: String) async throws {
        while true {
            let check = try await device.check(id)
            let v = check.values
            ui.newScreen()
            ui.heading(
                "Check of \(v["TailNumber"]?.display ?? "?")\(v["FlightNumber"].map { $0 == .null ? "" : " / " + $0.display } ?? "") · \(v["Status"]?.display ?? "")"
            )
            for measurement in Measurement.all {
                ui.say(
                    "  \(measurement.label.padding(toLength: 20, withPad: " ", startingAt: 0))\(v[measurement.property]?.display ?? "—") \(measurement.unit)"
                )
            }
            ui.say("  Remarks             \(Self.clip(v["Remarks"]?.display ?? "—", 56))")
            ui.say("  Checked by          \(v["CheckedBy"]?.display ?? "—")")
            ui.say("  Uploaded by         \(v["UploadedBy"]?.display ?? "—")")
            ui.say(
                "  Changed             \(check.pending ? "• on this device, not sent yet" : v["ChangedAt"]?.display ?? "—")"
            )
            let photos = (try? await device.photos(check: id)) ?? []
            for photo in photos {
                let p = photo.values
                ui.say(
                    "  Photo               \(Self.clip(p["Caption"]?.display ?? "(no caption)", 32)) · \(p["TakenBy"]?.display ?? "?")\(photo.pending ? " · not sent yet" : "")"
                )
            }
            let draft = v["Status"]?.display == "draft"
            ui.dim("e edits · p attaches a photo\(draft ? " · f finalizes · d deletes the draft" : "") · Enter back")
            guard let answer = await ui.ask("Check:")?.lowercased(), !answer.isEmpty else { return }
            do {
                switch answer {
                case "e":
                    try await device.requireMayChange(check)
                    guard let values = await askChanges(of: check) else { return }
                    guard !values.isEmpty else {
                        ui.notice("! Nothing changed.", .warning)
                        continue
                    }
                    try await device.edit(id, values: values)
                    ui.notice("✓ Changed on this device; it is sent with the next sync.")
                case "p":
                    // Evidence is added to a check by whoever may change it (the server refuses the rest).
                    try await device.requireMayChange(check)
                    guard let path = await ui.ask("Photo file (JPEG, PNG or HEIC; Enter goes back):"), !path.isEmpty
                    else { continue }
                    let caption = await ui.ask("What it shows (Enter for nothing):")
                    _ = try await device.takePhoto(
                        check: id, file: URL(fileURLWithPath: path),
                        caption: caption.flatMap { $0.isEmpty ? nil : $0 })
                    ui.notice("✓ Photo saved on this device, its location removed; it is sent with the next sync.")
                case "f" where draft:
                    try await device.finalize(id)
                    ui.notice("✓ Finalized on this device; it is sent with the next sync.")
                case "d" where draft:
                    guard await confirm("Delete this draft?") else {
                        ui.notice("! Kept.", .warning)
                        continue
                    }
                    try await device.deleteDraft(id)
                    ui.notice("✓ Draft deleted on this device; the deletion is sent with the next sync.")
                    return
                default:
                    ui.failure("'\(answer)' is not one of the choices.")
                }
            } catch let error as AppError
                where error.status == .notPermitted || error.status == .invalidInput || error.status == .notFound
            {
                ui.failure(error.message)
                _ = await ui.ask("Press Enter.")
            }
        }
    }

    // MARK: Sync

    func sync() async throws {
        let progress = Mutex<ConsoleUI.Progress?>(nil)
        let ui = ui
        do {
            let summary = try await device.sync { event in
                progress.withLock { display in
                    switch event {
                    case .upload(let done, let total):
                        display = display ?? ui.progress("Uploading")
                        display?.update(total == 0 ? 1 : Double(done) / Double(total), "Uploading: \(done) of \(total)")
                    case .download(let query, let entities, _):
                        display = display ?? ui.progress("Downloading")
                        display?.update(0.5, "Downloading: \(query), \(entities) entities")
                    }
                }
            }
            progress.withLock { $0?.finish(true) }
            summary.isComplete ? ui.notice("✓ " + summary.summary) : ui.notice("! " + summary.summary, .warning)
            for archived in summary.archived {
                ui.failure("\(archived.entry.author)'s change to \(archived.entry.entityID): \(archived.message)")
            }
        } catch {
            progress.withLock { $0?.finish(false) }
            throw error
        }
    }

    // MARK: Removal

    func removeUser() async throws -> Next {
        guard let session = await sessions.session else { return .signIn }
        var candidates = [await sessions.users.user(session.user.id) ?? session.user]
        if session.user.role == "admin" {
            candidates += await sessions.users.activeUsers.filter { $0.id != session.user.id }
        }
        ui.heading("Remove a user from this device (their secure store and keys are deleted)")
        for (index, user) in candidates.enumerated() {
            ui.say("  \(index + 1)  \(ConsolePresenter.describe(user))\(index == 0 ? " — you" : "")")
        }
        guard let answer = await ui.ask("Number · Enter back:"), !answer.isEmpty else { return .home }
        guard let number = Int(answer), candidates.indices.contains(number - 1) else {
            ui.failure("'\(answer)' is not on the list.")
            return .home
        }
        let user = candidates[number - 1]
        guard await confirm("Remove \(user.displayName) from this device?") else { return .home }
        do {
            try await sessions.removeUser(user.id)
        } catch let error as OfflineError where error.code == .pendingChanges {
            ui.failure(error.message)
            guard user.id == session.user.id else {
                ui.say("\(user.displayName) must sign in and sync first.")
                return .home
            }
            ui.say("s  sync now, then remove    d  discard them (an encrypted backup is kept)    Enter  keep")
            switch await ui.ask("Choose:")?.lowercased() {
            case "s":
                try await sync()
                try await sessions.removeUser(user.id)
            case "d":
                guard await ui.ask("Type DISCARD to confirm:") == "DISCARD" else {
                    ui.notice("! Nothing was discarded or removed.", .warning)
                    return .home
                }
                let discarded = try await device.discardChanges(of: user.serverUserID ?? "")
                ui.notice(
                    "! Discarded \(discarded.count) change(s); encrypted backup "
                        + (discarded.sent ? "sent to the server." : "kept here, sent with the next sync."), .warning)
                try await sessions.removeUser(user.id)
            default:
                ui.notice("! Nothing was removed.", .warning)
                return .home
            }
        }
        await device.notePendingChanges()
        ui.notice("✓ \(user.displayName) is removed from this device.")
        return await sessions.state == .open ? .home : .signIn
    }

    // MARK: Automatic lock and `baton lock`

    /// The inactivity lock (the server policy's timeout) and SIGUSR1 from `baton lock`.
    func startWatchers() -> () -> Void {
        let sessions = sessions
        let ui = ui
        let timer = Task {
            var seen = ui.lastInput.withLock { $0 }
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                let latest = ui.lastInput.withLock { $0 }
                if latest != seen {
                    seen = latest
                    await sessions.recordActivity()
                }
                if await sessions.lockIfInactive() {
                    ui.newScreen()
                    ui.notice("! Locked after inactivity. Press Enter to sign in.", .warning)
                }
                // Every settings-refresh interval: the server's settings and what it ordered for this device.
                do {
                    try await sessions.contactServerIfDue()
                } catch {
                    ui.newScreen()
                    ui.notice("! " + AppError.from(error).message + " Press Enter.", .warning)
                }
            }
        }
        signal(SIGUSR1, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: .global())
        source.setEventHandler {
            Task {
                guard await sessions.state == .open else { return }
                await sessions.lock()
                ui.newScreen()
                ui.notice("! Locked by `baton lock`. Press Enter to sign in.", .warning)
            }
        }
        source.resume()
        return {
            timer.cancel()
            source.cancel()
        }
    }
}
