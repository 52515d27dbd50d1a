import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Names of what Baton keeps in a user's secure store.
public enum SecureStoreKey {
    public static let serverConfiguration = "baton.serverConfiguration"
    public static let authorizationMetadata = "baton.authorizationMetadata"
    public static let tokens = "baton.tokens"
    public static let serverUser = "baton.serverUser"
    public static let settings = "baton.settings"
    /// The ETag of those settings, for the next conditional refresh.
    public static let settingsETag = "baton.settingsETag"
    public static let signingKey = "baton.signingKey"
    public static let storeKey = "baton.storeKey"
    /// The device key (P-256, raw): proves to the server that a user of this device approves another joining it.
    public static let deviceKey = "baton.deviceKey"
    /// Set when the user signed out: their tokens are revoked, so the next restore with network signs in again.
    public static let signedOut = "baton.signedOut"
}

extension OnboardingInfoKey where Value == String {
    /// The passcode that opened the secure store in this restore, kept only until the settings step checked it
    /// against the server's current policy (then removed; never saved).
    static var enteredPasscode: Self { Self("baton.passcode.entered") }
    /// The ETag of the settings in ``OnboardingInfoKey/settings``.
    static var settingsETag: Self { Self("baton.settings.etag") }
}

extension OnboardingInfoKey where Value == Bool {
    /// Set by the passcode step when this flow created the secure store (so its reset may delete it).
    static var createdSecureStore: Self { Self("baton.passcode.createdStore") }
    /// Set by the device-registration step when this flow registered the device.
    static var registeredDevice: Self { Self("baton.registration.registered") }
}

/// Turns a client error into the flow error a person can act on.
func flowsError(_ error: BatonClientError, doing action: String) -> FlowsError {
    if error.code == .unreachable {
        return FlowsError(.offline, "Cannot \(action): \(error.message)")
    }
    if error.code == .appVersionInactive { return SettingsExchangeStep.inactiveVersion(nil) }
    if error.code == .sessionInvalidated { return FlowsError(.sessionInvalidated, error.message) }
    // The client's message may say what failed already ("Cannot register this device: …"): not twice.
    let message = error.message.hasPrefix("Cannot \(action)") ? error.message : "Cannot \(action): \(error.message)"
    return FlowsError(.stepFailed, message)
}

func load<T: Decodable & Sendable>(_ type: T.Type, _ key: String, from store: SecureStore, step: String)
    async throws(FlowsError)
    -> T
{
    do {
        guard let value = try await store.value(T.self, forKey: key) else {
            throw FlowsError(.stepFailed, "Step '\(step)': the user's secure store has no '\(key)'; reset the user.")
        }
        return value
    } catch let error as FlowsError {
        throw error
    } catch {
        throw FlowsError(.storage, "Step '\(step)': cannot read the user's secure store (\(error)).")
    }
}

func save<T: Encodable & Sendable>(_ value: T, _ key: String, in store: SecureStore) async throws(FlowsError) {
    do {
        try await store.set(value, forKey: key)
    } catch {
        throw FlowsError(.storage, "Cannot write the user's secure store (\(error.message)).")
    }
}
