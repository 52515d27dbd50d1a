import BatonClient
import BatonTestSupport
import BatonTesting
import Foundation
import Testing

@testable import BatonChaos

/// The harness's network part in CI's short mode: a hundred faults between a shared tablet and the server through
/// the fault proxy, and the invariant checker over everything the tablet's two users did.
@Suite(.serverSlot) struct NetworkChaosTests {
    @Test func aHundredNetworkFaultsLoseNothingAndApplyNothingTwice() async throws {
        // A new seed each run (printed on failure): `baton-chaos --network-faults 100 --seed N` repeats it.
        let seed = UInt64(Date().timeIntervalSince1970)
        let report = try await NetworkChaos(faults: 100, seed: seed).run()
        #expect(report.passed, "seed \(seed):\n\(report.text)")
        #expect(report.faultCount >= 100, "seed \(seed): \(report.faults)")
        for fault in NetworkFault.failing + [.slowLink] {
            #expect((report.faults[fault.rawValue] ?? 0) > 0, "seed \(seed): no \(fault.rawValue) in \(report.faults)")
        }
        #expect(report.changesChecked >= 100 && report.retries > 0, "seed \(seed): \(report.text)")
    }

    @Test func theProxyRefusesThenAcceptsAndEachFaultFailsItsRequest() async throws {
        let server = try await LiveServer.start()
        let proxy = try await FaultProxy.start(upstreamPort: server.url.port, stall: .seconds(2))
        func health() async -> Int? {
            let url = proxy.url.appendingPathComponent("health")
            return try? await AsyncHTTPClientTransport().send(ClientRequest(url: url, timeout: .seconds(1))).status
        }
        #expect(await health() == 200)
        await proxy.refuse()
        #expect(await health() == nil)
        try await proxy.accept()
        #expect(await health() == 200)
        for fault in NetworkFault.failing where fault != .duplicatedRequest {
            proxy.inject([fault])
            #expect(await health() == nil, "\(fault.rawValue) let the answer through")
        }
        // A duplicated request and a slow link still answer.
        proxy.inject([.duplicatedRequest, .slowLink])
        #expect(await health() == 200)
        #expect(await health() == 200)
        #expect(proxy.pending == 0)
        #expect(proxy.applied["connection-refused"] == 1)
        await proxy.stop()
        await server.shutDown()
    }

    @Test func theCheckerCountsALoss() async throws {
        let server = try await LiveServer.start()
        try await server.addUser("alice", displayName: "Alice", password: "blue-harbour-1234")
        let grant = try await AsyncHTTPClientTransport().send(
            ClientRequest(
                method: "POST", url: server.url.appendingPathComponent("oauth/token"),
                headers: [("Content-Type", "application/x-www-form-urlencoded")],
                body: Array("grant_type=password&client_id=baton-device&username=alice&password=blue-harbour-1234".utf8)
            ))
        let token = try #require(
            (try JSONSerialization.jsonObject(with: Data(grant.body)) as? [String: Any])?["access_token"] as? String)
        // The checker expects a check the server never got: a loss, named.
        var checker = InvariantChecker(run: "checker-\(UUID())")
        _ = checker.newCheck(tail: .string("D-AAAA"), by: "alice")
        checker.created("PreflightChecks(00000000-0000-4000-8000-000000000001)", by: "alice")
        let report = try await checker.check(server: server, token: token)
        #expect(report.losses == 1 && !report.passed)
        #expect(report.problems.first?.contains("is not on the server") == true)
        await server.shutDown()
    }
}

/// The harness's load part in CI's short mode: twenty tablets (two users each) syncing at once against one
/// server, every change of every tablet checked afterwards.
@Suite(.serverSlot) struct LoadChaosTests {
    @Test func twentyTabletsAtOnceLoseNothing() async throws {
        let report = try await LoadChaos(devices: [1, 20], rounds: 4).run()
        #expect(report.passed, "\(report.text)")
        #expect(report.points.map(\.devices) == [1, 20])
        #expect(report.points.last?.changes == 20 * 4 * 10)
        #expect(report.invariants.changesChecked == 21 * 4 * 10)
        #expect(report.points.allSatisfy { $0.syncP99 >= $0.syncP50 && $0.syncP50 > 0 })
    }
}

/// The harness's process-kill part in CI's short mode: the built `baton-server` killed with SIGKILL 50 times at
/// random moments and restarted on the same data while a shared tablet syncs.
@Suite(.serverSlot) struct ServerKillChaosTests {
    @Test func fiftyServerKillsLoseNothingAndApplyNothingTwice() async throws {
        let binary = builtExecutable("baton-server")
        let seed = UInt64(Date().timeIntervalSince1970)
        let report = try await ServerKillChaos(kills: 50, seed: seed, serverBinary: binary).run()
        #expect(report.passed, "seed \(seed):\n\(report.text)")
        #expect(report.faults["server-killed"] == 50)
        // Kills landed while the tablet was syncing: some syncs failed and were retried.
        #expect(report.retries > 0 && report.changesChecked > 50, "seed \(seed): \(report.text)")
    }
}
