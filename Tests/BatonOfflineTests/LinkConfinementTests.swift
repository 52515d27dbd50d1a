import BatonClient
import BatonFlows
import BatonOData
import BatonSecureStore
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Synchronization
import Testing

@testable import BatonOffline

/// The tablet's download follows the server's links only inside its OData service, and the removal guard trusts
/// no count it does not have.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct LinkConfinementTests {
    /// Forwards to the real transport; the first page of `Aircraft` carries a next link to another host.
    final class Tampering: HTTPTransport {
        let real = AsyncHTTPClientTransport()
        let requested = Mutex<[String]>([])

        func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
            requested.withLock { $0.append(request.url.absoluteString) }
            var response = try await real.send(request)
            if request.method == "GET", request.url.path.hasSuffix("/odata/Aircraft") {
                let page = (try? JSONValue(parsing: response.body).objectMembers) ?? []
                response.body =
                    JSONValue.object(
                        page.filter { $0.0 != "@odata.deltaLink" } + [
                            ("@odata.nextLink", .string("https://evil.example/odata/Aircraft?$skiptoken=1"))
                        ]
                    ).serializedBytes
            }
            return response
        }
    }

    @Test func aDownloadLinkOutsideTheServiceGetsNoRequest() async throws {
        let server = try await LiveServer.start()
        try await server.addUser("alice", displayName: "Alice", password: "blue-harbour-1234")
        _ = try await server.server.seed(aircraft: 2, checks: 0)
        defer { Task { await server.shutDown() } }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-links-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let transport = Tampering()
        let (sessions, _) = try TypedEntityTests.tablet(
            server, in: directory, signingIn: ("alice", "blue-harbour-1234"), passcode: "alice-pass-1",
            transport: transport)
        let refused = await #expect(throws: FlowsError.self) { try await sessions.open() }
        #expect(refused?.message.contains("outside its OData service") == true)
        #expect(transport.requested.withLock { $0.allSatisfy { $0.hasPrefix(server.url.absoluteString) } })
    }

    @Test func aRemovalGuardWithoutACountRefuses() async throws {
        let directory = try LocalStoreTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: "tablet-1", definingQueries: [])
        let step = OfflineStoreStep(store: store)
        var alice = UserManager.User(
            onboardingID: UUID(), serverUserID: "alice", displayName: "Alice", status: .success)
        // Closed store, no count (the app ended without closing it): refused.
        let unknown = await #expect(throws: OfflineError.self) { try await step.guardRemoval(of: alice) }
        #expect(unknown?.code == .pendingChanges)
        // A count written while the store was open (a sync, the app) is not trusted: the app may have changed
        // more since, and ended without closing the store.
        alice.pendingChanges = 0
        alice.pendingChangesCountedAtClose = false
        await #expect(throws: OfflineError.self) { try await step.guardRemoval(of: alice) }
        alice.pendingChangesCountedAtClose = true
        alice.pendingChanges = 2
        let counted = await #expect(throws: OfflineError.self) { try await step.guardRemoval(of: alice) }
        #expect(counted?.message.hasPrefix("alice has 2 changes on this device") == true)
        alice.pendingChanges = 0
        try await step.guardRemoval(of: alice)
    }
}
