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
