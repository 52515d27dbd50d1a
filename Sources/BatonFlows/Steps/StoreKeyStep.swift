import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Fetches the device's store key (which encrypts the shared offline store) into the user's secure store.
public struct StoreKeyStep: OnboardingStep {
    public var name: String { "store key" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        guard let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] else {
            throw FlowsError(.stepFailed, "The store-key fetch needs discovery and sign-in before it.")
        }
        let key: Data
        do {
            key = try await context.client.storeKey(
                configuration, deviceID: context.deviceID, token: tokens.accessToken)
        } catch {
            throw flowsError(error, doing: "fetch the device's store key")
        }
        try await save(key, SecureStoreKey.storeKey, in: store)
        context.info[.storeKey] = key
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        context.info[.storeKey] = try await load(Data.self, SecureStoreKey.storeKey, from: store, step: name)
    }
}
