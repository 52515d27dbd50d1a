import BatonClient
import BatonOffline
import Crypto
import Foundation

/// The offline-store step: opens the device's shared `OfflineStore` for the user. Onboarding
/// downloads the defining queries; restore opens it at once and syncs when the server is reachable (and
/// carries on offline when it is not); a removed user's step closes it, and the last user's removal wipes it.
/// Sync problems while opening are reported to the person in words ("alice's 1 change could not be
/// uploaded: …"), never as bare codes, and do not stop the user from working.
public struct OfflineStoreStep: OnboardingStep {
    public var name: String { "offline store" }
    /// The device's store (one per device, shared by its users).
    public let store: OfflineStore

    public init(store: OfflineStore) { self.store = store }

    public func onboard(_ context: inout OnboardingContext) async throws {
        // The device's first user: a store left behind is under a store key nobody receives any more (the server
        // gives a device that all its users left a new one), so it goes aside, kept, and a new one starts.
        if await context.users.activeUsers.allSatisfy({ $0.onboardingID == context.onboardingID }) {
            do { try await store.setFilesAside() } catch { throw FlowsError(.storage, error.message) }
        }
        let session = try await open(&context)
        do {
            _ = try await store.download(using: session)
        } catch {
            throw FlowsError(.offline, "The first download of the offline store failed: \(error.message)")
        }
        // Tokens may have been refreshed (and rotated) during the download.
        context.info[.tokens] = await session.tokens
    }

    public func resetPasscode(_ context: inout OnboardingContext) async throws {
        _ = try await open(&context)
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let session = try await open(&context)
        // The settings step of this flow may just have heard from the server.
        let reachable =
            if context.info[.settingsFromServer] == true { true } else { await context.client.isReachable() }
        guard reachable else { return }
        let allowed = context.info[.settings]?.sharedDevices.uploadPendingChangesOfPreviousUser ?? false
        let user = context.info[.serverUser]?.name ?? ""
        let users = context.users
        let outcome: Result<SyncReport, FlowsError> = await RequestTrace.continuing { traceID in
            do throws(FlowsError) {
                var report = try await sync(session, user: user, allowOnBehalf: allowed, users: users)
                report.traceID = traceID
                return .success(report)
            } catch {
                return .failure(error)
            }
        }
        switch outcome {
        case .success(let report):
            context.info[.syncReport] = report
            for (author, entries) in Dictionary(grouping: report.archived, by: \.entry.author) {
                let reasons = Set(entries.map(\.message)).joined(separator: "; ")
                await context.presenter.show(
                    "\(author)'s \(entries.count) change\(entries.count == 1 ? "" : "s") could not be uploaded: \(reasons)"
                )
            }
        case .failure(let error):
            await context.presenter.show("Sync did not finish; working offline. \(error.message)")
        }
        context.info[.tokens] = await session.tokens
    }

    /// Locking or closing the session closes the store: its database and key are gone from memory. Before it
    /// closes, each author's count of changes the server does not have goes into the user registry, so that
    /// ``guardRemoval(of:)`` can answer while the device is locked.
    public func background(_ context: inout OnboardingContext) async throws {
        await notePendingChanges(context.users, atClose: true)
        await store.close()
    }

    /// Refuses to remove `user` while they have changes on this device the server does not have (queued or in the
    /// error archive): ``FlowsConfiguration/removalGuard``. With the store open it counts them there; while the
    /// device is locked (the store closed) it reads the count the store left in the user registry when it closed,
    /// and refuses when there is none (the app ended without closing the store: the count is unknown).
    ///
    /// ```swift
    /// configuration.removalGuard = { user in try await offlineStep.guardRemoval(of: user) }
    /// ```
    ///
    /// - Throws: `OfflineError` `PendingChanges` — "alice has 1 change on this device that the
    ///   server does not have; upload first, or confirm discarding them."
    public func guardRemoval(of user: UserManager.User) async throws(OfflineError) {
        let name = user.serverUserID ?? ""
        if await store.isOpen {
            try await store.requireNoPendingChanges(of: name)
            return
        }
        guard user.pendingChangesCountedAtClose == true, let count = user.pendingChanges else {
            throw OfflineError(
                .pendingChanges,
                "\(user.displayName)'s changes on this device are not counted while it is locked (the app did not close the offline store last time); unlock, then remove."
            )
        }
        guard count == 0 else { throw OfflineStore.pendingChanges(of: name, count: count) }
    }

    public func reset(_ context: inout OnboardingContext) async {
        guard context.flowType == .reset || context.flowType == .onboard else { return }
        await store.close()
        let others = await context.users.activeUsers.filter { $0.onboardingID != context.onboardingID }
        if context.flowType == .reset, others.isEmpty { try? await store.wipe() }
    }

    /// Hands over pending changes before their authors leave the device (``FlowsConfiguration/handOverPendingChanges``):
    /// uploads what the server takes (when allowed), then backs up every remaining change of those authors —
    /// queued or in the error archive — encrypted under the store key, sends the backup to the server and only
    /// then lets it go from the device. A backup the server did not receive stays in the device's backups folder
    /// and stops a wipe (nothing is ever dropped unseen).
    public func handOver(_ handover: PendingChangesHandover) async throws(FlowsError) -> HandoverReport {
        var report = HandoverReport()
        guard let storeKey = handover.session.storeKey else {
            throw FlowsError(.sessionInvalidated, "The session ended before its pending changes were handed over.")
        }
        if handover.upload,
            let uploaded = try? await store.upload(using: handover.session.authorized, allowOnBehalf: true)
        {
            report.uploaded = uploaded.uploaded.count
        }
        let counts: [String: Int]
        do {
            counts = try await store.unsentCounts()
        } catch {
            throw FlowsError(.storage, "Cannot read the pending changes: \(error.message)")
        }
        let authors = (handover.authors ?? Array(counts.keys)).filter { (counts[$0] ?? 0) > 0 }.sorted()
        do {
            try FileManager.default.createDirectory(at: handover.backups, withIntermediateDirectories: true)
        } catch {
            throw FlowsError(.storage, "Cannot create the backups folder.")
        }
        var unsent: [String] = []
        for author in authors {
            let file = handover.backups.appendingPathComponent(
                "\(Int(Date().timeIntervalSince1970))-\(UUID().uuidString.prefix(8)).sealed")
            let count: Int
            do {
                count = try await store.discardPendingChanges(
                    of: author, backupTo: file, key: SymmetricKey(data: storeKey))
            } catch {
                throw FlowsError(.storage, "Cannot back up \(author)'s changes: \(error.message)")
            }
            guard count > 0, let sealed = try? Data(contentsOf: file) else { continue }
            do {
                try await handover.client.sendDiscardedChanges(
                    handover.configuration, deviceID: handover.deviceID, author: author, count: count, sealed: sealed,
                    as: handover.credential)
                try? FileManager.default.moveItem(at: file, to: file.appendingPathExtension("sent"))
                report.backedUp += count
            } catch {
                unsent.append(author)
            }
        }
        if handover.wipeStore {
            // Backups from earlier discards that never reached the server go now, or the wipe waits.
            let names = (try? FileManager.default.contentsOfDirectory(atPath: handover.backups.path)) ?? []
            for name in names where name.hasSuffix(".sealed") {
                let file = handover.backups.appendingPathComponent(name)
                guard let sealed = try? Data(contentsOf: file),
                    let backup = try? OfflineStore.describeBackup(sealed, key: SymmetricKey(data: storeKey)),
                    (try? await handover.client.sendDiscardedChanges(
                        handover.configuration, deviceID: handover.deviceID, author: backup.author,
                        count: backup.count, sealed: sealed, as: handover.credential)) != nil
                else {
                    unsent.append(name)
                    continue
                }
                try? FileManager.default.moveItem(at: file, to: file.appendingPathExtension("sent"))
            }
            guard unsent.isEmpty else {
                throw FlowsError(
                    .offline,
                    "The device must be wiped, but the backups of its pending changes did not reach the server; it tries again at the next contact."
                )
            }
            do {
                try await store.wipe()
                try await store.removeFiles()
            } catch {
                throw FlowsError(.storage, "Cannot wipe the offline store: \(error.message)")
            }
        }
        return report
    }

    func open(_ context: inout OnboardingContext) async throws -> AuthorizedSession {
        guard let user = context.info[.serverUser], let raw = context.info[.signingKey],
            let storeKey = context.info[.storeKey],
            let key = try? P256.Signing.PrivateKey(rawRepresentation: raw)
        else {
            throw FlowsError(
                .stepFailed, "The offline store step needs sign-in, device registration and the store key first.")
        }
        do {
            try await store.open(as: OfflineUser(name: user.name, signingKey: key), key: SymmetricKey(data: storeKey))
        } catch {
            throw FlowsError(.storage, error.message)
        }
        // From now on the counts in the user list are out of date until the store closes again: a removal guard
        // that reads them while the store is closed, after a crash that skipped the close, refuses rather than
        // trusts them.
        try await context.users.forgetPendingChanges()
        return try context.authorizedSession()
    }
}
