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
}
