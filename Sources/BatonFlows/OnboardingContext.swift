import BatonClient
import BatonOData
import BatonSecureStore
import Foundation

/// A typed key of ``OnboardingInfo``. Apps declare their own keys for their own steps:
///
/// ```swift
/// extension OnboardingInfoKey where Value == String {
///     static var station: Self { Self("myapp.station") }
/// }
/// ```
public struct OnboardingInfoKey<Value: Sendable>: Sendable, Hashable {
    public let name: String
    public init(_ name: String) { self.name = name }
}

/// The extensible information steps hand to each other during a flow, with typed keys.
public struct OnboardingInfo: Sendable {
    var values: [String: any Sendable] = [:]

    public init() {}

    public subscript<Value>(key: OnboardingInfoKey<Value>) -> Value? {
        get { values[key.name] as? Value }
        set { values[key.name] = newValue }
    }
}

extension OnboardingInfoKey where Value == ServerConfiguration {
    /// Where the server's endpoints are (discovery).
    public static var serverConfiguration: Self { Self("baton.serverConfiguration") }
}

extension OnboardingInfoKey where Value == AuthorizationServerMetadata {
    /// The server's OAuth metadata (discovery).
    public static var authorizationMetadata: Self { Self("baton.authorizationMetadata") }
}

extension OnboardingInfoKey where Value == OAuthTokens {
    /// The user's tokens (sign-in).
    public static var tokens: Self { Self("baton.tokens") }
}

extension OnboardingInfoKey where Value == ServerUser {
    /// The signed-in user as the server knows them (sign-in).
    public static var serverUser: Self { Self("baton.serverUser") }
}

extension OnboardingInfoKey where Value == ClientSettings {
    /// The settings the server sent (settings exchange).
    public static var settings: Self { Self("baton.settings") }
}

extension OnboardingInfoKey where Value == Bool {
    /// Whether this flow's settings step heard from the server (its settings, or that they are unchanged): the
    /// server is reachable, and what follows need not ask for the settings again.
    public static var settingsFromServer: Self { Self("baton.settingsFromServer") }
}

extension OnboardingInfoKey where Value == Data {
    /// The device's store key (store-key fetch).
    public static var storeKey: Self { Self("baton.storeKey") }
    /// The user's P-256 signing key, raw representation (device registration).
    public static var signingKey: Self { Self("baton.signingKey") }
    /// The device key, raw representation: held by the device's users to approve another joining.
    public static var deviceKey: Self { Self("baton.deviceKey") }
}

extension OnboardingInfoKey where Value == AuthorizedSession {
    /// The user's authorised connection (sign-in).
    public static var authorizedSession: Self { Self("baton.authorizedSession") }
}

/// What a flow's steps work on: whose onboarding this is, the server client, the user's secure store (once
/// a passcode step opened or created it) and the information the steps hand on.
public struct OnboardingContext: Sendable {
    /// The user on this device that this flow is about.
    public var onboardingID: UUID
    /// The kind of flow running.
    public var flowType: OnboardingFlowType
    /// This device's id.
    public let deviceID: String
    /// The HTTP client for the server.
    public let client: BatonClient
    /// Asks and tells the person at the device.
    public let presenter: any OnboardingPresenter
    /// The device's user registry.
    public let users: UserManager
    /// Where this device keeps its files.
    public let storage: DeviceStorage
    /// The configuration of the session manager.
    public let configuration: FlowsConfiguration
    /// The user's secure store, once open.
    public var secureStore: SecureStore?
    /// What the steps hand to each other.
    public var info = OnboardingInfo()

    /// The user's authorised connection from what sign-in left in ``info``; refreshed tokens are saved to
    /// the user's secure store.
    public func authorizedSession() throws(FlowsError) -> AuthorizedSession {
        guard let configuration = info[.serverConfiguration], let metadata = info[.authorizationMetadata],
            let tokens = info[.tokens]
        else { throw FlowsError(.stepFailed, "There is no signed-in session yet; put the sign-in step first.") }
        let oauth = OAuthClient(
            metadata: metadata, clientID: configuration.clientID, transport: client.transport,
            now: self.configuration.now)
        let store = secureStore
        return AuthorizedSession(
            client: client, configuration: configuration, oauth: oauth, tokens: tokens,
            onTokensChanged: { fresh in try? await store?.set(fresh, forKey: SecureStoreKey.tokens) })
    }

    /// The secure store, or an error naming the step that needed it.
    public func requireSecureStore(for step: String) throws(FlowsError) -> SecureStore {
        guard let secureStore else {
            throw FlowsError(
                .stepFailed, "Step '\(step)' needs the user's secure store; put a passcode step before it.")
        }
        return secureStore
    }
}
