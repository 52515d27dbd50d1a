import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// The settings exchange: what the server wants of this device (passcode policy, shared-device rules).
/// On restore, the settings kept in the secure store, refreshed from the server when it is reachable.
public struct SettingsExchangeStep: OnboardingStep {
    public var name: String { "settings" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        guard let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] else {
            throw FlowsError(.stepFailed, "The settings exchange needs discovery and sign-in before it.")
        }
        let settings: ClientSettings
        do throws(BatonClientError) {
            guard
                case .changed(let fresh, let etag) = try await context.client.settings(
                    configuration, token: tokens.accessToken, etag: nil)
            else { throw BatonClientError(.invalidResponse, "The server answered 304 to an unconditional request.") }
            settings = fresh
            context.info[.settingsETag] = etag
        } catch {
            throw flowsError(error, doing: "read the server's settings")
        }
        if let version = context.configuration.appVersion, settings.appVersions.inactive.contains(version) {
            throw Self.inactiveVersion(version)
        }
        let others = await context.users.activeUsers.filter { $0.onboardingID != context.onboardingID }
        if !settings.sharedDevices.multiUser, context.flowType == .onboard, !others.isEmpty {
            throw FlowsError(
                .multiUserNotAllowed,
                "The server allows one user per device, and this device already has one; remove that user first.")
        }
        context.info[.settings] = settings
    }

    /// The settings kept in the user's secure store, or the device's last known ones when another user's session
    /// learned newer ones; refreshed from the server (conditionally: 304 when nothing changed) when it is
    /// reachable. An app version the server retired stops the restore (`AppVersionInactive`); a passcode that
    /// no longer meets the policy must be changed now — the user keeps their data.
    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        // The user's own copy (behind their passcode) is what a conditional request names; the device's last
        // known copy (newer when another user's session learned it) applies only offline.
        let kept = try await load(ClientSettings.self, SecureStoreKey.settings, from: store, step: name)
        let keptETag = try? await store.value(String.self, forKey: SecureStoreKey.settingsETag)
        var (settings, etag) = (kept, keptETag)
        if let known = await context.users.lastKnownSettings, known.etag != etag || known.settings != settings {
            (settings, etag) = (known.settings, known.etag)
        }
        if let configuration = context.info[.serverConfiguration], context.info[.tokens] != nil,
            await context.client.isReachable()
        {
            let session = try context.authorizedSession()
            do {
                let token = try await session.accessToken()
                switch try await context.client.settings(configuration, token: token, etag: keptETag) {
                case .unchanged: (settings, etag) = (kept, keptETag)
                case .changed(let fresh, let freshETag): (settings, etag) = (fresh, freshETag)
                }
                context.info[.settingsFromServer] = true
            } catch  where error.code == .appVersionInactive {
                context.info[.tokens] = await session.tokens
                throw Self.inactiveVersion(context.configuration.appVersion)
            } catch {
                // The session manager's contact with the server tells a withdrawn user or device apart; the
                // restore carries on with the last known settings.
            }
            context.info[.tokens] = await session.tokens
        }
        try await Self.keep(settings, etag: etag, in: store, users: context.users)
        context.info[.settings] = settings
        context.info[.settingsETag] = etag
        if let version = context.configuration.appVersion, settings.appVersions.inactive.contains(version) {
            throw Self.inactiveVersion(version)
        }
        if let passcode = context.info[.enteredPasscode] {
            // Cleared only once the passcode meets the policy: a retried step checks again.
            try await PasscodeStep.requireCompliance(passcode, settings: settings, store: store, context: context)
            context.info[.enteredPasscode] = nil
        }
    }

    /// Keeps `settings` in the user's secure store and as the device's last known settings.
    static func keep(_ settings: ClientSettings, etag: String?, in store: SecureStore, users: UserManager)
        async throws(FlowsError)
    {
        if (try? await store.value(ClientSettings.self, forKey: SecureStoreKey.settings)) != settings {
            try await save(settings, SecureStoreKey.settings, in: store)
        }
        if let etag, (try? await store.value(String.self, forKey: SecureStoreKey.settingsETag)) != etag {
            try await save(etag, SecureStoreKey.settingsETag, in: store)
        }
        try await users.setLastKnownSettings(settings, etag: etag)
    }

    static func inactiveVersion(_ version: String?) -> FlowsError {
        FlowsError(
            .appVersionInactive,
            "This version of the app\(version.map { " (\($0))" } ?? "") is no longer allowed by the server. Install the current version; the changes waiting on this device are kept and upload after the update."
        )
    }
}
