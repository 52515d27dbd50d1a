import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Pending changes to hand over before the device forgets their authors: a user the server withdrew, or every
/// user of a device an admin revoked or ordered wiped.
public struct PendingChangesHandover: Sendable {
    /// Whose changes; `nil` for everyone's (a wipe).
    public var authors: [String]?
    /// The open session the handover runs in (its user's token may no longer work).
    public var session: OnboardingSession
    /// Whether to try uploading first (the server allows on-behalf uploads and the device is not revoked).
    public var upload: Bool
    /// How to send backups: the device key when the session has it (it works after a revocation), else the token.
    public var credential: DeviceCredential
    public var client: BatonClient
    public var configuration: ServerConfiguration
    /// Where backups are written before they are sent (``DeviceStorage/backupsURL``).
    public var backups: URL
    public var deviceID: String
    /// Empty the offline store afterwards (a wipe).
    public var wipeStore: Bool
}

/// What a handover did.
public struct HandoverReport: Sendable, Hashable {
    /// Changes the server applied.
    public var uploaded = 0
    /// Changes backed up to the server (encrypted under the store key) and then discarded on the device.
    public var backedUp = 0
    public init(uploaded: Int = 0, backedUp: Int = 0) {
        self.uploaded = uploaded
        self.backedUp = backedUp
    }
}

/// What a contact with the server found and did (``OnboardingSessionManager/contactServer()``).
public struct ContactReport: Sendable {
    /// Whether the server answered.
    public var reachable = false
    /// Whether the settings changed (they now apply: lock timeout, on-behalf uploads, multi-user mode).
    public var settingsChanged = false
    /// Users the server withdrew, now removed from this device.
    public var removedUsers: [UserManager.User] = []
    /// What happened to their pending changes.
    public var handover = HandoverReport()
    /// Whether an admin asked for the device's log (``DeviceLog/send(reason:session:)``).
    public var logsRequested = false
}

extension OnboardingSessionManager {
    /// Asks the server what changed for this device and applies it: the settings (conditionally; 304 when
    /// nothing changed) and the device's status. A new lock timeout or on-behalf rule applies at once; a retired
    /// app version throws `AppVersionInactive` (nothing on the device is touched); users the server disabled or
    /// deleted are removed after their pending changes were uploaded or backed up to the server; a revoked or
    /// wipe-ordered device hands over every pending change, removes every user and the offline store, reports
    /// the wipe, and throws `DeviceWiped`. Offline, nothing happens and the last known settings hold.
    ///
    /// Called by unlock and switch (through restore) and by the app before a sync; ``contactServerIfDue()`` calls
    /// it every `devices.settings-refresh-seconds` of the server's settings.
    ///
    /// - Throws: ``FlowsError``: `NotOpen`; `AppVersionInactive`; `UserWithdrawn` when the open session's own
    ///   user was withdrawn (the session is closed); `DeviceWiped`; what a handover throws (then nothing was
    ///   removed).
    @discardableResult
    public func contactServer() async throws(FlowsError) -> ContactReport {
        try await contactServer(settingsFromServer: false)
    }

    /// ``contactServer()``; with `settingsFromServer`, the session's settings are ones the server just sent (or
    /// confirmed) in this flow, so neither the server's reachability nor the settings are asked again.
    func contactServer(settingsFromServer: Bool) async throws(FlowsError) -> ContactReport {
        guard var session, state == .open else { throw FlowsError(.notOpen, "Nobody is signed in.") }
        var report = ContactReport()
        lastContactAttempt = self.configuration.now()
        let reachable = if settingsFromServer { true } else { await client.isReachable() }
        guard reachable, let configuration = session.info[.serverConfiguration] else {
            return report
        }
        report.reachable = true
        lastContact = self.configuration.now()
        var selfWithdrawn = false
        var revoked = false
        if !settingsFromServer {
            switch try await refreshSettings(&session, configuration: configuration, report: &report) {
            case .unreachable: return report
            case .userWithdrawn: selfWithdrawn = true
            case .deviceRevoked: revoked = true
            case .done: break
            }
        }
        if let version = self.configuration.appVersion, session.settings.appVersions.inactive.contains(version) {
            throw SettingsExchangeStep.inactiveVersion(version)
        }
        let credential = await deviceCredential(session)
        // Once per user and app run, the user's own sign-in asks too (the device's proof does not say who is at
        // the tablet): the server links the sign-in to the device, so a departure of theirs waits while they
        // are here. Best effort: what fails now is asked at the next contact.
        if !announcedSignIns.contains(session.user.onboardingID), case .deviceKey? = credential,
            let token = try? await session.authorized.accessToken(),
            (try? await client.deviceStatus(configuration, deviceID: deviceID, as: .token(token))) != nil
        {
            announcedSignIns.insert(session.user.onboardingID)
        }
        var status = DeviceStatus(revoked: revoked)
        if let credential,
            let fetched = try? await client.deviceStatus(configuration, deviceID: deviceID, as: credential)
        {
            status = fetched
            status.revoked = status.revoked || revoked
            report.logsRequested = fetched.logsRequested
        }
        if status.revoked || status.wipeOrdered, let credential {
            try await wipe(session, credential: credential, configuration: configuration, revoked: status.revoked)
        }
        // Users who left offline (a store wiped by the retry limit, a removal without the server): their slips end
        // their registrations. Best effort: what does not go now goes at the next contact.
        let slips = DepartureSlips(storage: storage)
        if let credential, let departed = try? slips.departed(), !departed.isEmpty,
            let answer = try? await client.sendDepartures(
                configuration, deviceID: deviceID, departures: departed, as: credential)
        {
            // A departure the server puts off (its user was seen within the hour) is kept and sent again.
            try? slips.forget(departed.filter { !answer.waiting.contains($0.user) })
        }
        var withdrawn = Set(status.withdrawnUsers)
        if selfWithdrawn, let name = session.user.serverUserID { withdrawn.insert(name) }
        let leaving = await users.allUsers.filter { withdrawn.contains($0.serverUserID ?? "") }
        guard !leaving.isEmpty, let credential else { return report }
        report.handover = try await handOver(
            HandoverAuthors.some(leaving.compactMap(\.serverUserID)), session: session, credential: credential,
            configuration: configuration, upload: session.settings.sharedDevices.uploadPendingChangesOfPreviousUser,
            wipeStore: false)
        var removedSelf: UserManager.User?
        for user in leaving {
            if user.onboardingID == session.user.onboardingID {
                removedSelf = user
                continue
            }
            try? SecureStore.delete(at: storage.secureStoreURL(for: user.onboardingID))
            try await users.remove(user.onboardingID)
            await idManager.remove(user.onboardingID, users: users)
            report.removedUsers.append(user)
        }
        if let removedSelf {
            _ = try? await controller.run(.reset, for: removedSelf.onboardingID, info: session.info)
            try? SecureStore.delete(at: storage.secureStoreURL(for: removedSelf.onboardingID))
            try await users.remove(removedSelf.onboardingID)
            await idManager.remove(removedSelf.onboardingID, users: users)
            await close()
            let kept = report.handover.uploaded + report.handover.backedUp
            throw FlowsError(
                .userWithdrawn,
                "An administrator disabled or removed \(removedSelf.displayName) on the server, so their data was removed from this device"
                    + (kept > 0 ? " after \(kept) pending change\(kept == 1 ? "" : "s") reached the server." : "."),
                onboardingID: removedSelf.onboardingID, serverUserID: removedSelf.serverUserID)
        }
        return report
    }

    /// How a settings request of ``contactServer()`` ended.
    enum SettingsRefresh {
        case done, unreachable, userWithdrawn, deviceRevoked
    }

    /// Asks for the settings (conditionally, with the ETag of the user's own copy) and keeps what changed in the
    /// session and the user's secure store.
    func refreshSettings(
        _ session: inout OnboardingSession, configuration: ServerConfiguration, report: inout ContactReport
    ) async throws(FlowsError) -> SettingsRefresh {
        do {
            let token = try await session.authorized.accessToken()
            // The ETag of the user's own copy (behind their passcode), never the device-wide one.
            let etag = try? await session.secureStore.value(String.self, forKey: SecureStoreKey.settingsETag)
            var answer = try await client.settings(configuration, token: token, etag: etag)
            if answer == .unchanged,
                let kept = try? await session.secureStore.value(ClientSettings.self, forKey: SecureStoreKey.settings)
            {
                answer = .changed(kept, etag: etag)
            }
            if case .changed(let fresh, let freshETag) = answer {
                report.settingsChanged = fresh != session.settings
                session.settings = fresh
                self.session = session
                try await SettingsExchangeStep.keep(fresh, etag: freshETag, in: session.secureStore, users: users)
            }
            return .done
        } catch let error as BatonClientError {
            switch (error.code, error.serverCode) {
            case (.appVersionInactive, _): throw SettingsExchangeStep.inactiveVersion(self.configuration.appVersion)
            case (.unreachable, _): return .unreachable
            case (_, "UserWithdrawn"): return .userWithdrawn
            case (_, "DeviceRevoked"): return .deviceRevoked
            // A refresh refused for another reason: the device's status says why, if it knows.
            default: return .done
            }
        } catch let error as FlowsError {
            throw error
        } catch {
            throw FlowsError(.storage, "Cannot keep the settings: \(error)")
        }
    }

    /// ``contactServer()`` when the last contact is older than the server's `devices.settings-refresh-seconds`
    /// (900 from a server that does not say); `nil` when none was due (or nobody is signed in).
    @discardableResult
    public func contactServerIfDue() async throws(FlowsError) -> ContactReport? {
        guard state == .open, let session else { return nil }
        let interval = TimeInterval(session.settings.devices.settingsRefreshSeconds)
        let now = configuration.now()
        if let lastContact, now.timeIntervalSince(lastContact) < interval { return nil }
        // Offline, the server is asked again after a minute, not on every call.
        if let lastContactAttempt, now.timeIntervalSince(lastContactAttempt) < min(60, interval) { return nil }
        return try await contactServer()
    }

    enum HandoverAuthors {
        case some([String])
        case everyone
    }

    func handOver(
        _ authors: HandoverAuthors, session: OnboardingSession, credential: DeviceCredential,
        configuration: ServerConfiguration, upload: Bool, wipeStore: Bool
    ) async throws(FlowsError) -> HandoverReport {
        guard let hook = self.configuration.handOverPendingChanges else { return HandoverReport() }
        let names: [String]?
        switch authors {
        case .some(let list): names = list
        case .everyone: names = nil
        }
        return try await hook(
            PendingChangesHandover(
                authors: names, session: session, upload: upload, credential: credential, client: client,
                configuration: configuration, backups: storage.backupsURL, deviceID: deviceID, wipeStore: wipeStore))
    }

    /// The device key from the open session (it speaks for the device even after a revocation), else the user's
    /// token; `nil` when neither works.
    func deviceCredential(_ session: OnboardingSession) async -> DeviceCredential? {
        if let raw = session.info[.deviceKey], let key = try? P256.Signing.PrivateKey(rawRepresentation: raw) {
            return .deviceKey(key)
        }
        guard let token = try? await session.authorized.accessToken() else { return nil }
        return .token(token)
    }

    /// Hands over every pending change, removes every user and empties the offline store, reports the wipe and
    /// throws `DeviceWiped`. A handover that fails stops the wipe before anything is removed (it runs again at
    /// the next contact).
    func wipe(
        _ session: OnboardingSession, credential: DeviceCredential, configuration: ServerConfiguration, revoked: Bool
    )
        async throws(FlowsError)
    {
        let handover = try await handOver(
            .everyone, session: session, credential: credential, configuration: configuration,
            upload: !revoked && session.settings.sharedDevices.uploadPendingChangesOfPreviousUser, wipeStore: true)
        await session.invalidate()
        self.session = nil
        lockedUser = nil
        state = .closed
        var complete = true
        for user in await users.allUsers {
            do { try SecureStore.delete(at: storage.secureStoreURL(for: user.onboardingID)) } catch { complete = false }
            try await users.remove(user.onboardingID)
            await idManager.remove(user.onboardingID, users: users)
        }
        try? FileManager.default.removeItem(at: storage.backupsURL)
        // Reported only when everything is gone (a store that could not be deleted keeps the order pending).
        if complete { try? await client.reportWiped(configuration, deviceID: deviceID, as: credential) }
        let kept = handover.uploaded + handover.backedUp
        throw FlowsError(
            .deviceWiped,
            (revoked
                ? "An administrator took this device out of service. "
                : "An administrator ordered this device wiped. ")
                + "Every user and the offline data were removed"
                + (kept > 0 ? "; \(kept) pending change\(kept == 1 ? "" : "s") reached the server first." : "."))
    }

    // MARK: Passcode change

    /// Changes the open user's passcode: the current passcode first (an unlocked tablet left on a desk is not
    /// enough), then a new one under the server's policy. The user's data stays as it is.
    ///
    /// - Throws: ``FlowsError``: `NotOpen`; `Cancelled` at a prompt; `Wiped` when the current passcode was wrong
    ///   too often (the session is closed).
    public func changePasscode() async throws(FlowsError) {
        guard let session, state == .open else { throw FlowsError(.notOpen, "Nobody is signed in.") }
        let url = storage.secureStoreURL(for: session.user.onboardingID)
        var problem: String?
        while true {
            let current: String
            do {
                current = try await presenter.passcode(user: session.user.displayName, problem: problem)
            } catch let error as FlowsError {
                throw error
            } catch {
                throw FlowsError(.cancelled, "The passcode was not changed.")
            }
            do {
                _ = try SecureStore.open(at: url, passcode: current)
                break
            } catch  where error.code == .wrongPasscode {
                problem = error.message
            } catch  where error.code == .wiped {
                await close()
                throw FlowsError(.wiped, error.message, onboardingID: session.user.onboardingID)
            } catch {
                throw FlowsError(.storage, "Cannot check the passcode: \(error.message)")
            }
        }
        let policy = PasscodeStep.policy(session.settings, mode: configuration.mode)
        let kdf = configuration.keyDerivation()
        do {
            _ = try await PasscodeStep.askNewPasscode(presenter, policy: policy, problem: nil) {
                passcode throws(SecureStoreError) in
                try await session.secureStore.changePasscode(to: passcode, policy: policy, kdf: kdf)
            }
        } catch let error as FlowsError {
            throw error
        } catch {
            throw FlowsError(.cancelled, "The passcode was not changed.")
        }
        lastActivity = configuration.now()
    }
}
