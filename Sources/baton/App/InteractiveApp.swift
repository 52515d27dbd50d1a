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
}
