import BatonClient
import BatonOffline
import Crypto
import Foundation

extension OnboardingInfoKey where Value == UploadReport {
    /// What the sync on restore uploaded.
    public static var uploadReport: Self { Self("baton.offline.uploadReport") }
}

/// The offline-store step: opens the device's shared ``BatonOffline/OfflineStore`` for the user. Onboarding
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
        guard await context.client.isReachable() else { return }
        let allowed = context.info[.settings]?.sharedDevices.uploadPendingChangesOfPreviousUser ?? false
        do {
            let report = try await store.upload(using: session, allowOnBehalf: allowed)
            context.info[.uploadReport] = report
            for (author, entries) in Dictionary(grouping: report.archived, by: \.entry.author) {
                let reasons = Set(entries.map(\.message)).joined(separator: "; ")
                await context.presenter.show(
                    "\(author)'s \(entries.count) change\(entries.count == 1 ? "" : "s") could not be uploaded: \(reasons)"
                )
            }
            _ = try await store.download(using: session)
        } catch {
            await context.presenter.show("Sync did not finish; working offline. \(error.message)")
        }
        context.info[.tokens] = await session.tokens
    }

    /// Locking or closing the session closes the store: its database and key are gone from memory.
    public func background(_ context: inout OnboardingContext) async throws {
        await store.close()
    }

    public func reset(_ context: inout OnboardingContext) async {
        guard context.flowType == .reset || context.flowType == .onboard else { return }
        await store.close()
        let others = await context.users.activeUsers.filter { $0.onboardingID != context.onboardingID }
        if context.flowType == .reset, others.isEmpty { try? await store.wipe() }
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
        return try context.authorizedSession()
    }
}
