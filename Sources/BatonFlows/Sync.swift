import BatonClient
import BatonOffline
import Foundation

/// What one sync did: ``OnboardingSessionManager/sync(progress:)``, and the sync an unlock or a user switch runs
/// on its own when the server is reachable (``OnboardingSession/syncReport``).
///
/// A sync uploads the device's queue — the signed-in user's changes and, when the server allows it, other
/// users' changes on their behalf, each carrying its author's signature — then downloads what changed on the
/// server.
public struct SyncReport: Sendable {
    /// The user who synced (their server user name): whose token carried the upload.
    public var user: String
    /// What the upload did, change by change.
    public var upload = UploadReport()
    /// What the download did.
    public var download = DownloadReport()
    /// The trace id every request of the sync carried (`traceparent`); the server logs it with each request.
    public var traceID = ""
    /// Users the server had withdrawn, removed from the device by this sync's contact (their changes handed over
    /// first).
    public var removedUsers: [UserManager.User] = []
    /// Changes of withdrawn users backed up, encrypted, to the server by this sync's contact.
    public var backedUp = 0
    /// An administrator asked for the device's log (``ContactReport/logsRequested``): the app sends it with
    /// ``DeviceLog/send(reason:session:)``.
    public var logsRequested = false

    /// A report of a sync by `user` that did nothing yet.
    public init(user: String) { self.user = user }

    /// How many of the syncing user's own changes reached the server.
    public var uploadedOwn: Int { upload.uploaded.count { $0.author == user } }
    /// Other users' changes that reached the server on their behalf, by author.
    public var uploadedOnBehalf: [String: Int] { upload.uploadedByAuthor.filter { $0.key != user } }
    /// Changes the server refused, now in the error archive (`OfflineStore/archivedEntries()`).
    public var archived: [ArchiveEntry] { upload.archived }
    /// Changes still queued: other users' changes the server's settings do not let this user upload (they wait for
    /// their author), and changes behind an archived change to the same entity.
    public var waiting: [QueueEntry] { upload.waiting }
    /// Entities the download wrote or removed.
    public var downloaded: Int { download.updated + download.removed }
    /// True only when every queued change reached the server.
    public var isComplete: Bool { upload.isComplete }

    /// One line for a person: "uploaded 3 changes: 2 yours, 1 alice's on their behalf; downloaded 12 updates".
    public var summary: String {
        var parts: [String] = []
        let total = upload.uploaded.count
        if total == 0 {
            parts.append("nothing to upload")
        } else {
            var who: [String] = []
            if uploadedOwn > 0 { who.append("\(uploadedOwn) yours") }
            for (author, count) in uploadedOnBehalf.sorted(by: { $0.key < $1.key }) {
                who.append("\(count) \(author)'s on their behalf")
            }
            parts.append("uploaded \(total) change\(total == 1 ? "" : "s"): " + who.joined(separator: ", "))
        }
        if !archived.isEmpty { parts.append("\(archived.count) moved to the error archive") }
        if !waiting.isEmpty { parts.append("\(waiting.count) waiting for their author") }
        parts.append("downloaded \(downloaded) update\(downloaded == 1 ? "" : "s")")
        if !removedUsers.isEmpty {
            parts.append(
                "removed \(removedUsers.map(\.displayName).joined(separator: ", ")) (withdrawn on the server)"
                    + (backedUp > 0 ? ", \(backedUp) of their changes backed up to the server" : ""))
        }
        return parts.joined(separator: "; ")
    }
}

extension OnboardingInfoKey where Value == SyncReport {
    /// The report of the sync an unlock or a switch ran (``OnboardingSession/syncReport``).
    public static var syncReport: Self { Self("baton.offline.syncReport") }
}

extension OnboardingSession {
    /// What the sync that opened this session did — an unlock or a switch syncs on its own when the server is
    /// reachable — or `nil` when it did not sync (offline, or a first onboarding, which downloads only).
    public var syncReport: SyncReport? { info[.syncReport] }
}

extension OnboardingSessionManager {
    /// Syncs the device for the signed-in user: asks the server what changed for the device and its users
    /// (settings, withdrawn users, a revocation or a wipe — ``contactServer()``), uploads the queue with the
    /// server's on-behalf setting (`shared-devices.upload-pending-changes-of-previous-user`), then downloads.
    /// Every request carries one trace id (the caller's trace, when it started one with `RequestTrace`).
    ///
    /// The app's flows must include an ``OfflineStoreStep``: its store is the one synced.
    ///
    /// - Parameter progress: hears each step of the upload and download.
    /// - Returns: what the sync did.
    /// - Throws: ``FlowsError``: `NotOpen` when nobody is signed in; `Offline` when the server cannot be reached
    ///   (nothing is lost: what was not confirmed stays queued); what ``contactServer()`` throws
    ///   (`AppVersionInactive`, `UserWithdrawn`, `DeviceWiped`); `StepFailed` when the flows have no offline-store
    ///   step.
    public func sync(progress: (@Sendable (SyncProgress) -> Void)? = nil) async throws(FlowsError) -> SyncReport {
        guard let step = offlineStep else {
            throw FlowsError(
                .stepFailed, "The app's flows have no OfflineStoreStep, so there is no offline store to sync.")
        }
        let outcome: Result<SyncReport, FlowsError> = await RequestTrace.continuing { @Sendable traceID in
            do throws(FlowsError) {
                return .success(try await self.sync(step, traceID: traceID, progress: progress))
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    func sync(_ step: OfflineStoreStep, traceID: String, progress: (@Sendable (SyncProgress) -> Void)?)
        async throws(FlowsError) -> SyncReport
    {
        guard session != nil, state == .open else { throw FlowsError(.notOpen, "Nobody is signed in.") }
        guard await client.isReachable() else {
            throw FlowsError(
                .offline, "The server cannot be reached; the changes stay on this device until the next sync.")
        }
        let contact = try await contactServer()
        guard let session, state == .open else { throw FlowsError(.notOpen, "Nobody is signed in.") }
        var report = try await step.sync(
            session.authorized, user: session.user.serverUserID ?? "",
            allowOnBehalf: session.settings.sharedDevices.uploadPendingChangesOfPreviousUser, users: users,
            progress: progress)
        report.traceID = traceID
        report.removedUsers = contact.removedUsers
        report.backedUp = contact.handover.backedUp
        report.logsRequested = contact.logsRequested
        lastActivity = configuration.now()
        return report
    }

    /// The offline-store step of the app's flows, if it has one.
    nonisolated var offlineStep: OfflineStoreStep? {
        controller.flowProvider.flow(for: .restore).steps.lazy.compactMap { $0 as? OfflineStoreStep }.first
    }
}

extension OfflineStoreStep {
    /// Uploads (others' changes on their behalf when `allowOnBehalf`), then downloads, as `user`; keeps the
    /// registry's counts of pending changes (what the removal guard reads while the store is closed) in step.
    func sync(
        _ session: AuthorizedSession, user: String, allowOnBehalf: Bool, users: UserManager,
        progress: (@Sendable (SyncProgress) -> Void)? = nil
    ) async throws(FlowsError) -> SyncReport {
        var listener: Task<Void, Never>?
        if let progress {
            let events = await store.progress()
            listener = Task {
                for await event in events { progress(event) }
            }
        }
        defer { listener?.cancel() }
        var report = SyncReport(user: user)
        report.traceID = RequestTrace.current?.traceID.description ?? ""
        do {
            report.upload = try await store.upload(using: session, allowOnBehalf: allowOnBehalf)
            report.download = try await store.download(using: session)
        } catch {
            await notePendingChanges(users)
            let code: FlowsError.Code =
                switch error.code {
                case .offline: .offline
                case .notOpen: .notOpen
                case .storage: .storage
                default: .stepFailed
                }
            throw FlowsError(code, error.message)
        }
        await notePendingChanges(users)
        return report
    }

    /// Writes each author's count of changes the server does not have (queued or archived) into the user registry,
    /// readable while the store is closed (``guardRemoval(of:)``).
    func notePendingChanges(_ users: UserManager, atClose: Bool = false) async {
        guard let counts = try? await store.unsentCounts() else { return }
        try? await users.setPendingChanges(counts, countedAtClose: atClose)
    }
}
