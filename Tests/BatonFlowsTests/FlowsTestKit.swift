import BatonClient
import BatonFlows
import BatonSecureStore
import BatonTesting
import Foundation
import Testing

/// A device (data directory + session manager + scripted presenter) against a live server.
struct Device {
    let directory: URL
    let presenter: ScriptedPresenter
    let manager: OnboardingSessionManager

    static func make(
        server: LiveServer, mode: FlowsConfiguration.Mode = .multiUser, directory: URL? = nil,
        clock: TestClock? = nil, flowProvider: any OnboardingFlowProvider = StandardFlowProvider(),
        configure: (inout FlowsConfiguration) -> Void = { _ in }, _ answers: [ScriptedPresenter.Answer] = []
    ) throws -> Device {
        let directory =
            directory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("baton-device-\(UUID().uuidString)")
        var configuration = FlowsConfiguration(mode: mode)
        // Cheap scrypt for tests; the benchmark measures the real cost.
        configuration.keyDerivation = { KeyDerivation(cost: 1 << 10) }
        if let clock { configuration.now = clock.closure }
        configure(&configuration)
        let presenter = ScriptedPresenter(answers)
        let manager = try OnboardingSessionManager(
            serverURL: server.url, directory: directory, configuration: configuration, presenter: presenter,
            flowProvider: flowProvider)
        return Device(directory: directory, presenter: presenter, manager: manager)
    }

    /// The same device after an app restart (same files, new objects).
    func restarted(
        server: LiveServer, mode: FlowsConfiguration.Mode = .multiUser, _ answers: [ScriptedPresenter.Answer]
    )
        throws -> Device
    {
        try Device.make(server: server, mode: mode, directory: directory, answers)
    }
}

enum Passwords {
    static let alice = "blue-harbour-1234"
    static let bob = "green-meadow-5678"
    static let admin = "red-lantern-9999"
}

/// Runs `body` with a live server that has alice, bob and an admin, and deletes everything after.
func withServer(settings: [String: String] = [:], _ body: (LiveServer) async throws -> Void) async throws {
    let server = try await LiveServer.start(settings: settings)
    try await server.addUser("alice", displayName: "Alice", password: Passwords.alice)
    try await server.addUser("bob", displayName: "Bob", password: Passwords.bob)
    try await server.addUser("ada", displayName: "Ada Admin", role: .admin, password: Passwords.admin)
    do {
        try await body(server)
    } catch {
        await server.shutDown()
        throw error
    }
    await server.shutDown()
}

/// The answers of a first onboarding.
func onboarding(_ user: String, _ password: String, passcode: String) -> [ScriptedPresenter.Answer] {
    [.credentials(user, password), .newPasscode(passcode, confirmation: passcode)]
}
