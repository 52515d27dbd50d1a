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
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct QuickStartTests {
    /// Lines typed at the console presenter, and what it wrote.
    final class Console: Sendable {
        let lines: Mutex<[String]>
        let written = Mutex<[String]>([])
        init(_ lines: [String]) { self.lines = Mutex(lines) }
        func next() -> String? { lines.withLock { $0.isEmpty ? nil : $0.removeFirst() } }
        var presenter: ConsolePresenter {
            ConsolePresenter(
                readLine: { self.next() }, readSecret: { _ in self.next() },
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

        // Bob records a check and the tablet locks: his removal is refused while the server lacks his check,
        // in words that say so — the guard reads the count the store left when it closed.
        _ = try await tablet.recordCheck(tail: tail, fuelKg: 4100)
        await tablet.sessions.lock()
        #expect(await tablet.store.isOpen == false)
        let refused = await #expect(throws: OfflineError.self) { try await tablet.sessions.removeUser() }
        #expect(refused?.code == .pendingChanges)
        #expect(
            refused?.message
                == "bob has 1 change on this device that the server does not have; upload first, or confirm discarding them."
        )
        #expect(await tablet.sessions.users.allUsers.count == 2)
    }

    /// The "Getting started" article and the README quote the example's files whole: a change to one without the
    /// other fails here.
    @Test func theArticleAndTheReadmeAreTheExamplesCode() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        func read(_ path: String) throws -> String {
            try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
        }
        /// The ```swift blocks of a Markdown text.
        func swiftBlocks(_ text: String) -> [String] {
            text.components(separatedBy: "```swift\n").dropFirst().compactMap {
                $0.components(separatedBy: "\n```").first
            }
        }
        let names = try FileManager.default.contentsOfDirectory(
            atPath: root.appendingPathComponent("Examples/QuickStart").path
        ).filter { $0.hasSuffix(".swift") }.sorted()
        #expect(names == ["ConsolePresenter.swift", "Shift.swift", "Tablet.swift"])
        let article = swiftBlocks(try read("Sources/BatonFlows/Documentation.docc/GettingStarted.md"))
        let readme = swiftBlocks(try read("README.md"))
        for name in names {
            let code = try read("Examples/QuickStart/\(name)").trimmingCharacters(in: .newlines)
            #expect(code.hasPrefix("// Examples/QuickStart/\(name)\n"))
            #expect(article.contains(code), "GettingStarted.md does not quote Examples/QuickStart/\(name) as it is")
        }
        // Every quoted example file in the article and the README is a file as it is.
        for block in article + readme where block.hasPrefix("// Examples/") {
            let path = String(block.prefix { $0 != "\n" }.dropFirst(3))
            #expect(block == (try? read(path))?.trimmingCharacters(in: .newlines), "\(path) is quoted as it was")
        }
        #expect(readme.contains { $0.hasPrefix("// Examples/QuickStart/Tablet.swift") })
    }
}
