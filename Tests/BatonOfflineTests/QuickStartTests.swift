import AircraftChecks
import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonTestSupport
import BatonTesting
import Foundation
import QuickStart
import Synchronization
import Testing

/// The "Getting started" article's code (Examples/QuickStart), run as an app would run it against a live server:
/// Alice onboards, records a check with the network gone, Bob joins the tablet and syncs, and Alice's check reaches
/// the server on her behalf, signed by her.
@Suite(.serverSlot) struct QuickStartTests {
    /// Lines typed at the console presenter, and what it wrote.
    final class Console: Sendable {
        let lines: Mutex<[String]>
        let written = Mutex<[String]>([])
        init(_ lines: [String]) { self.lines = Mutex(lines) }
        var presenter: ConsolePresenter {
            ConsolePresenter(
                readLine: { self.lines.withLock { $0.isEmpty ? nil : $0.removeFirst() } },
                write: { line in self.written.withLock { $0.append(line) } })
        }
    }

    @Test func theGettingStartedShiftRunsAgainstARealServer() async throws {
        let first = try await LiveServer.start()
        try await first.addUser("alice", displayName: "Alice Example", password: "blue-harbour-1234")
        try await first.addUser("bob", displayName: "Bob Example", password: "green-meadow-5678")
        _ = try await first.server.seed(aircraft: 2, checks: 0)
        var server = first
        defer { Task { [server] in await server.shutDown() } }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-quickstart-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let console = Console([
            "alice", "blue-harbour-1234", "alice-pass-1", "alice-pass-1",
            "bob", "green-meadow-5678", "bob-pass-123", "bob-pass-123",
        ])
        let tablet = try Tablet(server: server.url, directory: directory, presenter: console.presenter)

        let alice = try await tablet.signIn()
        #expect(alice.user.displayName == "Alice Example")
        let tail = try #require(try await tablet.store.read(Aircraft.self).first?.tailNumber)

        // The network goes; Alice records a check all the same.
        await server.stop()
        let check = try await tablet.recordCheck(tail: tail, fuelKg: Decimal(string: "5200.5") ?? 0)
        let onTablet = try #require(try await tablet.checks(of: tail).first { $0.id == check.id })
        #expect(onTablet.status == "final")  // the model's DefaultValue, applied on the tablet as on the server
        #expect(onTablet.checkedBy == "alice")
        #expect(onTablet.fuelKg == check.fuelKg)

        // The network is back; Bob joins the tablet at shift change and syncs.
        server = try await server.restarted()
        let bob = try await tablet.handOverToNewcomer()
        #expect(bob.user.serverUserID == "bob")
        let report = try await tablet.sync()
        #expect(report.user == "bob")
        #expect(report.uploadedOwn == 0)
        #expect(report.uploadedOnBehalf == ["alice": 1])
        #expect(report.isComplete)
        #expect(report.summary.hasPrefix("uploaded 1 change: 1 alice's on their behalf; downloaded "))
        #expect(report.traceID.count == 32)

        // On the server: Alice's check, as she recorded it, uploaded by Bob.
        let stored = try #require(try await bob.authorized.entity(PreflightCheck.self, id: check.entityID))
        #expect(stored.checkedBy == "alice")
        #expect(stored.uploadedBy == "bob")
        #expect(stored.fuelKg == check.fuelKg && stored.status == "final" && stored.tailNumber == tail)
        #expect(console.lines.withLock { $0.isEmpty })
    }
}
