// Examples/QuickStart/Tablet.swift
import BatonFlows
import BatonOData
import BatonOffline
import Foundation

/// A shared tablet: the session manager of its users and the offline store they share.
public struct Tablet: Sendable {
    public let sessions: OnboardingSessionManager
    public let store: OfflineStore

    /// Wires multi-user mode for the server at `server`, keeping the tablet's files in `directory`.
    public init(server: URL, directory: URL, presenter: any OnboardingPresenter) throws {
        // One offline store per device, shared by all its users, with what it keeps of the server's data.
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: try DeviceStorage(directory: directory).deviceID(),
            definingQueries: [
                DefiningQuery(name: "aircraft", url: "Aircraft"),
                DefiningQuery(name: "checks", url: "PreflightChecks"),
            ])
        // The step opens the store for whoever signs in, and syncs at unlock and switch when online.
        let step = OfflineStoreStep(store: store)
        var configuration = FlowsConfiguration(mode: .multiUser)
        configuration.appVersion = "1.0"
        // Nobody is removed from the tablet while the server lacks some of their changes...
        configuration.removalGuard = { user in try await step.guardRemoval(of: user) }
        // ...and users the server withdraws hand their changes over before they go.
        configuration.handOverPendingChanges = { handover throws(FlowsError) in try await step.handOver(handover) }
        sessions = try OnboardingSessionManager(
            serverURL: server, directory: directory, configuration: configuration, presenter: presenter,
            flowProvider: StandardFlowProvider(appSteps: [step]))
        self.store = store
    }
}
