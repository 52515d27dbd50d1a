import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSecureStore
import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Logging
import Synchronization
import Testing

/// One sync is one trace: the server's log carries its id on every request of it, and on nothing else.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct RequestTraceTests {
    @Test func everyRequestOfASyncCarriesItsTraceIDIntoTheServersLog() async throws {
        let lines = Mutex<[Data]>([])
        var logger = Logger(label: "baton-server") { label in
            JSONLogHandler(label: label) { line in lines.withLock { $0.append(line) } }
        }
        logger.logLevel = .info
        let server = try await LiveServer.start(logger: logger)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-trace-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try await server.addUser("alice", role: .supervisor, password: "blue-harbour-1234")
        _ = try await server.server.seed(aircraft: 2, checks: 3)
        let (manager, session) = try await server.onboardSingleUserDevice(
            "alice", password: "blue-harbour-1234", directory: directory)
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: manager.deviceID, definingQueries: [DefiningQuery(name: "aircraft", url: "Aircraft")])
        try await store.open(
            as: OfflineUser(name: "alice", signingKey: try session.signingKey()),
            key: SymmetricKey(data: try #require(session.storeKey)))
        _ = try await store.download(using: session.authorized)
        let tail = try #require(try await store.read("Aircraft").first?.values["TailNumber"]?.text)
        for fuel in [5100, 5200, 5300] {
            _ = try await store.create(
                in: "PreflightChecks",
                values: [
                    "ID": .guid(UUID()), "TailNumber": .string(tail), "FuelKg": .decimal(Decimal(fuel)),
                    "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60),
                    "OilQuarts": .decimal(15), "Status": .string("final"),
                ])
        }
        let before = lines.withLock { $0.count }

        let (traceID, uploaded) = await RequestTrace.run { id in
            let report = try? await store.upload(using: session.authorized, allowOnBehalf: true, chunkSize: 1)
            _ = try? await store.download(using: session.authorized)
            return (id, report?.uploaded.count)
        }
        await store.close()
        await server.shutDown()

        #expect(uploaded == 3)
        #expect(traceID.count == 32 && traceID.allSatisfy(\.isHexDigit) && traceID == traceID.lowercased())
        let logged = lines.withLock { $0 }.compactMap {
            try? JSONSerialization.jsonObject(with: $0) as? [String: Any]
        }
        // Nothing logged before the sync (the sign-in, the creates) is part of its trace.
        #expect(!logged.prefix(before).contains { $0["trace_id"] != nil })
        let sync = logged.dropFirst(before).filter {
            ($0["message"] as? String)?.hasPrefix("POST /odata/") == true
                || ($0["message"] as? String)?.hasPrefix("GET /odata/") == true
        }
        // Three uploads (one change each) and the download's page.
        #expect(sync.filter { ($0["message"] as? String)?.hasPrefix("POST /odata/$batch") == true }.count == 3)
        #expect(sync.count >= 4)
        #expect(
            sync.allSatisfy { $0["trace_id"] as? String == traceID },
            "\(sync.filter { $0["trace_id"] as? String != traceID })")
        // Each request is a span of its own under the trace.
        let spans = sync.compactMap { $0["parent_span_id"] as? String }
        #expect(spans.count == sync.count && Set(spans).count == spans.count)
    }
}
