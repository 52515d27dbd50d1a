import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Reads where the server's endpoints are (`/.well-known/baton-configuration` and the OAuth metadata).
public struct DiscoveryStep: OnboardingStep {
    public var name: String { "discovery" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        do {
            let (configuration, metadata) = try await context.client.discover()
            context.info[.serverConfiguration] = configuration
            context.info[.authorizationMetadata] = metadata
        } catch {
            throw flowsError(error, doing: "reach the server at \(context.client.serverURL.absoluteString)")
        }
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        context.info[.serverConfiguration] = try await load(
            ServerConfiguration.self, SecureStoreKey.serverConfiguration, from: store, step: name)
        context.info[.authorizationMetadata] = try await load(
            AuthorizationServerMetadata.self, SecureStoreKey.authorizationMetadata, from: store, step: name)
    }
}
