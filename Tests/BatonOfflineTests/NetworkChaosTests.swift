import BatonClient
import BatonOData
import BatonOffline
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

@testable import BatonChaos

/// The harness's network part in CI's short mode: a hundred faults between a shared tablet and the server through
/// the fault proxy, and the invariant checker over everything the tablet's two users did.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct NetworkChaosTests {
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
        // Photos went through the same faults, their chunks cut halfway among them.
        #expect(report.photosChecked >= 10, "seed \(seed): \(report.text)")
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
/// server process, every change of every tablet checked afterwards.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct LoadChaosTests {
    @Test func twentyTabletsAtOnceLoseNothing() async throws {
        let report = try await LoadChaos(devices: [1, 20], rounds: 4, serverBinary: builtExecutable("baton-server"))
            .run()
        #expect(report.passed, "\(report.text)")
        // The server ran in a process of its own: its CPU time and memory were measured apart.
        #expect(report.points.allSatisfy { ($0.serverCPUSeconds ?? 0) > 0 && ($0.serverResidentMB ?? 0) > 0 })
        #expect((report.serverPeakMemoryMB ?? 0) > 0)
        #expect(report.points.map(\.devices) == [1, 20])
        #expect(report.points.last?.changes == 20 * 4 * 10)
        // The one-device baseline runs ten times the rounds, three times on fresh tablets; the median run counts.
        #expect(report.points.first?.changes == 10 * 4 * 10)
        let runs = try #require(report.points.first?.baselineRuns)
        #expect(runs.count == 3 && runs == runs.sorted())
        #expect(report.points.first?.changesPerServerCPUSecond == runs[1])
        #expect(report.points.first?.serverShareOfBaseline == 1)
        #expect(report.invariants.changesChecked == (3 * 10 + 20) * 4 * 10)
        #expect(report.points.allSatisfy { $0.syncP99 >= $0.syncP50 && $0.syncP50 > 0 })
        // Every tablet keeps every check of the fleet: its own point's and the one before (and the invariants
        // include that each tablet holds exactly what the server selects for it).
        #expect(report.points.last?.checksKeptPerTablet == (3 * 10 + 20) * 4 * 10)
    }

    /// Offered a share of the baseline's throughput, the tablets of a point are paced by the baseline measured in the
    /// same run: together they sync `share × baseline` changes per second.
    @Test func anOfferedLoadPacesTheTabletsByTheBaseline() async throws {
        let report = try await LoadChaos(
            devices: [1, 2], rounds: 3, serverBinary: builtExecutable("baton-server"), baselineRuns: 1,
            offeredLoad: 4
        ).run()
        #expect(report.passed, "\(report.text)")
        let baseline = try #require(report.points.first)
        let point = try #require(report.points.last)
        #expect(baseline.paceSeconds == nil && baseline.baselineRuns == nil)
        // Three rounds of 10 checks, synced twice (after the second round and the last): 15 changes per sync, so two
        // tablets sync one each per 30 / (4 × baseline) seconds.
        let pace = try #require(point.paceSeconds)
        #expect(abs(pace - 30 / (4 * baseline.changesPerSecond)) < 0.001)
        #expect(report.text.contains("2 devices: each tablet synced once every"))
        #expect(report.text.contains("offering 400% of the baseline's changes per second"))
        #expect(report.invariants.changesChecked == (10 + 2) * 3 * 10)
        #expect(report.invariants.syncs == 15 + 2 * 2)
    }

    /// Stations of ten tablets, each keeping only its station's checks (a filtered defining query): every tablet
    /// ends holding exactly its station's checks, and nothing is lost.
    @Test func stationsOfTenTabletsKeepTheirOwnChecks() async throws {
        let report = try await LoadChaos(
            devices: [20], rounds: 4, serverBinary: builtExecutable("baton-server"), stationSize: 10
        ).run()
        #expect(report.passed, "\(report.text)")
        #expect(report.invariants.changesChecked == 20 * 4 * 10)
        // A station's ten tablets recorded 400 checks; no tablet keeps another station's.
        #expect(report.points.first?.checksKeptPerTablet == 10 * 4 * 10)
    }
}

/// The harness's process-kill part in CI's short mode: the built `baton-server` killed with SIGKILL 50 times at
/// random moments and restarted on the same data while a shared tablet syncs.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ServerKillChaosTests {
    @Test func fiftyServerKillsLoseNothingAndApplyNothingTwice() async throws {
        let binary = builtExecutable("baton-server")
        let seed = UInt64(Date().timeIntervalSince1970)
        let report = try await ServerKillChaos(kills: 50, seed: seed, serverBinary: binary).run()
        #expect(report.passed, "seed \(seed):\n\(report.text)")
        #expect(report.faults["server-killed"] == 50)
        // Kills landed while the tablet was syncing: some syncs failed and were retried.
        #expect(report.retries > 0 && report.changesChecked > 50, "seed \(seed): \(report.text)")
        #expect(report.photosChecked > 5, "seed \(seed): \(report.text)")
    }
}

/// The harness's disk part: writer processes with faults injected under the encrypted VFS, each store checked
/// afterwards.
@Suite struct DiskChaosTests {
    @Test func everyKindOfDiskFaultLosesNothingThatWasRecorded() async throws {
        // A new seed each run (printed on failure): `baton-chaos --disk-trials 60 --seed N` repeats it.
        let seed = UInt64(Date().timeIntervalSince1970)
        let report = try await DiskChaos(trials: 60, seed: seed, binary: builtExecutable("baton-chaos")).run()
        #expect(report.passed, "seed \(seed):\n\(report.text)")
        for fault in DiskFault.allCases {
            #expect((report.faults[fault.rawValue] ?? 0) > 0, "seed \(seed): no \(fault.rawValue) in \(report.faults)")
        }
        #expect(report.changesChecked > 500, "seed \(seed): \(report.text)")
    }

    /// A process that dies halfway through writing a page leaves a torn page in the write-ahead log (or in the
    /// database, mid-checkpoint). Every write of a writer's first transactions, in turn.
    @Test func aProcessDyingInTheMiddleOfAnyPageWriteLeavesAStoreThatOpensWhole() async throws {
        let chaos = DiskChaos(trials: 0, seed: 1, binary: builtExecutable("baton-chaos"))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-torn-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        var died = 0
        for after in 0..<120 {
            let result = try await chaos.trial(
                DiskWriterInput(
                    fault: .deathInWrite, after: after, failures: 1, seed: UInt64(after),
                    checkpoint: DiskWriterInput.checkpoints[after % 2]), in: directory, number: after)
            #expect(result.problems.isEmpty && result.intact, "torn write \(after + 1): \(result.problems)")
            if result.injected { died += 1 }
        }
        #expect(died == 120)
    }

    @Test func aFullDiskIsSaidSoAndTheStoreTakesTheNextChange() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-full-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("offline.sqlite")
        let store = try OfflineStore(
            url: url, model: try ServiceModel.aircraftChecks, deviceID: "disk-full", definingQueries: [])
        let key = SymmetricKey(size: .bits256)
        try await store.open(as: OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey()), key: key)
        let kept = try await store.create(in: "PreflightChecks", values: DiskWriter.check(fuel: 1))
        // Only this store's files: the other tests' stores in this process write on.
        DiskFaults.arm(.diskFull, path: url.path, after: 0, failures: 3)
        for fuel in 2...4 {
            let error = await #expect(throws: OfflineError.self) {
                try await store.create(in: "PreflightChecks", values: DiskWriter.check(fuel: Decimal(fuel)))
            }
            #expect(
                error?.message.contains("storage is full: nothing was written") == true, "\(String(describing: error))")
        }
        let counts = DiskFaults.disarm()
        #expect(counts.injected == 3)
        let next = try await store.create(in: "PreflightChecks", values: DiskWriter.check(fuel: 5))
        #expect(try await store.pendingEntries().map(\.entityID) == [kept, next])
        #expect(try await store.read("PreflightChecks").count == 2)
        #expect(try await store.integrityCheck())
        await store.close()
    }
}

/// The harness's client-kill part in CI's short mode: the tablet's sync process killed with SIGKILL 50 times in
/// the middle of local writes, uploads and downloads, on one shared store.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ClientKillChaosTests {
    @Test func fiftyKillsOfTheTabletsProcessLoseNothingAndApplyNothingTwice() async throws {
        let seed = UInt64(Date().timeIntervalSince1970)
        let report = try await ClientKillChaos(kills: 50, seed: seed, binary: builtExecutable("baton-chaos")).run()
        #expect(report.passed, "seed \(seed):\n\(report.text)")
        #expect(report.faultCount == 50)
        // The kills landed in each phase.
        for phase in ["local-write", "upload", "download"] {
            #expect((report.faults["client-killed-in-\(phase)"] ?? 0) > 0, "seed \(seed): \(report.faults)")
        }
        #expect(report.changesChecked > 50, "seed \(seed): \(report.text)")
        #expect(report.photosChecked > 5, "seed \(seed): \(report.text)")
    }
}

/// The harness's fuzz part runs `scripts/fuzz` (libFuzzer needs a build of its own) and reports the figures of its
/// summary line; CI replays the kept corpus instead (`FuzzCorpusTests`).
@Suite struct FuzzChaosTests {
    @Test func theScriptsSummaryGivesTheFigures() throws {
        let output = """
            INFO: Seed: 11764239501
            baton-fuzz: 10000000 inputs in 4352 s over 1 processes, cov: 5847 edges; corpus kept: 2328 files, 677012 bytes
            """
        let report = try #require(FuzzChaos.summary(output))
        #expect(
            report
                == FuzzChaos.Report(
                    inputs: 10_000_000, seconds: 4_352, processes: 1, edges: 5_847, corpusFiles: 2_328,
                    corpusBytes: 677_012))
        #expect(report.passed && report.text.contains("crashes: 0"))
        // Without coverage figures (libFuzzer printed none) the rest still counts.
        let bare = "baton-fuzz: 2000 inputs in 3 s over 2 processes,  edges; corpus kept: 10 files, 99 bytes"
        #expect(FuzzChaos.summary(bare)?.edges == nil && FuzzChaos.summary(bare)?.inputs == 2_000)
        // A run that ended without its summary (the build failed) has no figures, and no inputs is no pass.
        #expect(FuzzChaos.summary("error: compile command failed\nbaton-fuzz: the merge kept nothing") == nil)
        #expect(!FuzzChaos.Report().passed)
    }

    @Test func theScriptIsFoundFromTheBuiltExecutable() throws {
        let script = try #require(FuzzChaos.script(beside: builtExecutable("baton-server")))
        #expect(script.lastPathComponent == "fuzz" && script.deletingLastPathComponent().lastPathComponent == "scripts")
        let package = script.deletingLastPathComponent().deletingLastPathComponent()
        #expect(FileManager.default.fileExists(atPath: package.appendingPathComponent("Package.swift").path))
    }

    /// Only the script of the package the executable was built in runs: not one in the current directory or in a
    /// folder without a package, where anyone could have put it.
    @Test func noOtherScriptIsRun() throws {
        let files = FileManager.default
        let root = files.temporaryDirectory.appendingPathComponent("fuzz-script-\(UUID())")
        defer { try? files.removeItem(at: root) }
        let binary = root.appendingPathComponent(".build/release/baton-chaos")
        try files.createDirectory(at: binary.deletingLastPathComponent(), withIntermediateDirectories: true)
        try files.createDirectory(at: root.appendingPathComponent("scripts"), withIntermediateDirectories: true)
        let script = root.appendingPathComponent("scripts/fuzz")
        try Data("#!/bin/sh\n".utf8).write(to: script)
        try files.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script.path)
        // A scripts/fuzz above a .build, but no package there.
        #expect(FuzzChaos.script(beside: binary) == nil)
        try Data("// swift-tools-version:6.0\n".utf8).write(to: root.appendingPathComponent("Package.swift"))
        #expect(FuzzChaos.script(beside: binary)?.path == script.path)
        // An executable outside any .build finds nothing, even beside that package (the current directory is
        // never looked at; changing it here would move it under the tests running beside this one).
        let loose = root.appendingPathComponent("bin/baton-chaos")
        #expect(FuzzChaos.script(beside: loose) == nil)
    }
}
