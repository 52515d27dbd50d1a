import BatonClient
import BatonOData
import BatonOffline
import BatonTesting
import Crypto
import Foundation
import Testing

/// The download writes a page's new versions many rows to a statement: every row of a page lands with its values,
/// a delete in the middle of a page removes only its entity, and a row with a change waiting in the queue keeps
/// the local version.
@Suite struct DownloadTests {
    static let password = "download-test-secret-1"

    @Test func aPageOfManyRowsLandsWholeWithItsDeletesInOrderAndLocalChangesKept() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        try await server.addUser("lead", displayName: "Lead", role: .supervisor, password: Self.password)
        _ = try await server.server.seed(aircraft: 3, checks: 150)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-download-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (manager, session) = try await server.onboardSingleUserDevice(
            "lead", password: Self.password, directory: directory)
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: manager.deviceID, definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")])
        try await store.open(
            as: OfflineUser(name: "lead", signingKey: try session.signingKey()),
            key: SymmetricKey(data: try #require(session.storeKey)))

        func serverChecks() async throws -> [String: [String: Any]] {
            let response = try await session.authorized.send(
                ClientRequest(
                    url: try #require(URL(string: server.url.absoluteString + "/odata/PreflightChecks")),
                    headers: [("Prefer", "odata.maxpagesize=1000")]))
            #expect(response.status == 200)
            let page = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
            let rows = page?["value"] as? [[String: Any]] ?? []
            return Dictionary(uniqueKeysWithValues: rows.compactMap { row in (row["ID"] as? String).map { ($0, row) } })
        }
        func localChecks() async throws -> [String: [String: PrimitiveValue]] {
            Dictionary(
                uniqueKeysWithValues: try await store.read("PreflightChecks").compactMap { entity in
                    entity.values["ID"].map { ("\($0.urlLiteral)", entity.values) }
                })
        }
        func send(_ method: String, _ id: String, _ body: String = "") async throws {
            let response = try await session.authorized.send(
                ClientRequest(
                    method: method,
                    url: try #require(URL(string: server.url.absoluteString + "/odata/PreflightChecks(\(id))")),
                    headers: [("Content-Type", "application/json"), ("If-Match", "*")], body: Array(body.utf8)))
            #expect(
                response.status == 204 || response.status == 200,
                "\(method) \(id): HTTP \(response.status) \(String(decoding: response.body, as: UTF8.self))")
        }

        // The initial download: 150 checks, more than one statement's rows, each with the server's values.
        let first = try await store.download(using: session.authorized)
        #expect(first.updated == 150)
        let seeded = try await serverChecks()
        var local = try await localChecks()
        #expect(local.count == 150)
        #expect(Set(local.keys) == Set(seeded.keys))
        for (id, row) in seeded {
            #expect(local[id]?["Remarks"]?.text == row["Remarks"] as? String, "\(id)")
            #expect(local[id]?["TailNumber"]?.text == row["TailNumber"] as? String, "\(id)")
        }

        // On the server: 100 checks change and three among them go, one in the first statement's rows, one at a
        // statement's edge, one near the end; one more changes that the tablet is changing too.
        let ids = seeded.keys.sorted()
        let changed = Array(ids.prefix(100))
        let deleted = Set([changed[10], changed[63], changed[97]])
        let heldLocally = ids[120]
        try await store.update("PreflightChecks(\(heldLocally))", values: ["Remarks": .string("local remark")])
        for id in changed {
            try await send("PATCH", id, #"{"Remarks":"server remark \#(id)"}"#)
            if deleted.contains(id) { try await send("DELETE", id) }
        }
        try await send("PATCH", heldLocally, #"{"Remarks":"server remark"}"#)

        let delta = try await store.download(using: session.authorized)
        #expect(delta.removed == 3)
        #expect(delta.keptLocal == 1)
        local = try await localChecks()
        #expect(local.count == 147)
        for id in changed {
            if deleted.contains(id) {
                #expect(local[id] == nil, "\(id) was deleted on the server")
            } else {
                #expect(local[id]?["Remarks"]?.text == "server remark \(id)", "\(id)")
            }
        }
        #expect(local[heldLocally]?["Remarks"]?.text == "local remark")
        for id in ids.suffix(50) where id != heldLocally {
            #expect(local[id]?["Remarks"]?.text == seeded[id]?["Remarks"] as? String, "\(id) did not change")
        }
        await store.close()
    }
}
