import BatonChaos
import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSecureStore
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

/// The sync killed at random points (a child process, SIGKILL) at least 50 times: every change reaches the
/// server exactly once, nothing is lost, and the encrypted store recovers each time.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct SyncCrashTests {
    /// `baton-chaos tablet-sync`, draining the store's queue.
    static var helper: URL { builtExecutable("baton-chaos") }

    @Test func killingTheSyncLosesAndDuplicatesNothing() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        try await server.addUser("alice", displayName: "Alice", password: "blue-harbour-1234")
        _ = try await server.server.seed(aircraft: 2, checks: 0)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-kill-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (manager, session) = try await server.onboardSingleUserDevice(
            "alice", password: "blue-harbour-1234", directory: directory)
        let storeKey = try #require(session.storeKey)
        let user = OfflineUser(name: "alice", signingKey: try session.signingKey())
        let storeURL = directory.appendingPathComponent("offline.sqlite")
        let store = try OfflineStore(
            url: storeURL, model: try ServiceModel.aircraftChecks, deviceID: manager.deviceID,
            definingQueries: [DefiningQuery(name: "aircraft", url: "Aircraft")])
        try await store.open(as: user, key: SymmetricKey(data: storeKey))
        _ = try await store.download(using: session.authorized)
        guard case .string(let tail)? = try await store.read("Aircraft").first?.values["TailNumber"] else {
            Issue.record("No aircraft.")
            return
        }
        var expected: [String: (fuel: Int, changes: Int)] = [:]
        func addWork(_ count: Int) async throws {
            for _ in 0..<count {
                let fuel = Int.random(in: 4000...9000)
                let id = try await store.create(
                    in: "PreflightChecks",
                    values: [
                        "ID": .guid(UUID()), "TailNumber": .string(tail), "FuelKg": .decimal(Decimal(fuel)),
                        "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60),
                        "OilQuarts": .decimal(15), "Status": .string("final"),
                    ])
                try await store.update(id, values: ["FuelKg": .decimal(Decimal(fuel + 1))])
                expected[id] = (fuel + 1, 2)
            }
        }
        try await addWork(30)
        await store.close()

        let tokens = await session.authorized.tokens
        let input = TabletSyncInput(
            drain: storeURL.path, server: server.url, deviceID: manager.deviceID, user: "alice", storeKey: storeKey,
            signingKey: user.signingKey.rawRepresentation, accessToken: tokens.accessToken,
            refreshToken: tokens.refreshToken, expiresAt: tokens.expiresAt)
        /// Runs the sync process; with `milliseconds`, kills it that long after it starts uploading (after its
        /// "uploading" line), or — with `early` — that long after it starts, wherever it is.
        func runHelper(killAfter milliseconds: Int?, early: Bool = false) async throws -> (
            killed: Bool, output: String
        ) {
            let (status, output) = try await ClientKillChaos.runSync(
                Self.helper, input: input,
                kill: milliseconds.map { (early ? nil : "uploading", .milliseconds($0)) })
            let killed = status == 128 + SIGKILL
            if !killed { #expect(status == 0, "\(output)") }
            return (killed, output)
        }

        var kills = 0
        var uploadsSeen = 0
        // Most kills land during the upload (timed from the process's "uploading", so a loaded machine moves them too);
        // one in five anywhere from start-up on.
        while kills < 50 {
            let early = Int.random(in: 0..<5) == 0
            let run = try await runHelper(killAfter: Int.random(in: early ? 0...300 : 0...250), early: early)
            if run.killed { kills += 1 }
            uploadsSeen += run.output.split(separator: "\n").filter { $0.hasPrefix("uploaded") }.count
            if !run.killed || run.output.contains("done") {
                // The queue ran dry: more work for the next kills.
                try await store.open(as: user, key: SymmetricKey(data: storeKey))
                try await addWork(10)
                await store.close()
            }
        }
        #expect(uploadsSeen > 0, "some runs must get as far as uploading before they are killed")
        let final = try await runHelper(killAfter: nil)
        #expect(final.output.contains("done"))

        try await store.open(as: user, key: SymmetricKey(data: storeKey))
        #expect(try await store.pendingEntries().isEmpty)
        #expect(try await store.archivedEntries().isEmpty)
        // Every change is on the server exactly once: one create and one update per check, final values.
        let audit = try await server.server.audit.entries(limit: 100_000)
        for (id, value) in expected {
            let response = try await session.authorized.send(
                ClientRequest(url: try #require(URL(string: server.url.absoluteString + "/odata/" + id))))
            #expect(response.status == 200, "\(id) missing on the server")
            let json = try JSONValue(parsing: response.body)
            #expect(json["FuelKg"]?.serialized == String(value.fuel), "\(id)")
            let applied = audit.filter { $0.subject.map { $0 == id || $0.hasSuffix("/" + id) } ?? false }.count
            #expect(applied == value.changes, "\(id) was applied \(applied) times")
        }
    }
}
