import ArgumentParser
import BatonSQLGRDB
import BatonServer
import BatonTesting
import Foundation
import GRDB
import Hummingbird
import Logging
import NIOPosix
import PostgresNIO

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

extension Benchmark {
    /// The 100-change batch through nginx in front of 1 and then `instances` real `baton-server serve`
    /// processes on the same database (each a separate cluster of processes, started and stopped here).
    func measureBehindNginx(database: PostgresLocation, masterKeyFile: URL, directory: URL, baseline: Double)
        async throws
    {
        let masterKey = try Data(contentsOf: masterKeyFile)
        print(
            "\nThe 100-change JSON batch through nginx (deploy/nginx.conf), baton-server processes on PostgreSQL"
                + (disjoint
                    ? ", each batch in flight with checks of its own:\n" : ", every batch the same 100 checks:\n"))
        print(
            "instances".padding(toLength: 28, withPad: " ", startingAt: 0)
                + "req/s    share   vs one   CPU/req: servers  nginx  PostgreSQL")
        var one = 0.0
        for count in Set([1, instances]).sorted() {
            let cluster = try await ServerCluster.start(
                instances: count, database: database, masterKey: masterKey, changesPerUser: changesPerUser)
            defer { cluster.stop() }
            let auth = try await signIn(cluster.url.absoluteString)
            func sample(skip: Int) async throws -> [String] {
                var request = URLRequest(
                    url: try url(
                        cluster.url.absoluteString + "/odata/PreflightChecks?$top=100&$skip=\(skip)&$select=ID"))
                request.setValue(auth, forHTTPHeaderField: "Authorization")
                return
                    ((try JSONSerialization.jsonObject(with: try await URLSession.shared.data(for: request).0)
                    as? [String: Any])?["value"] as? [[String: Any]] ?? []).compactMap { $0["ID"] as? String }
            }
            let file = directory.appendingPathComponent("nginx-\(count).lua")
            let script: String
            if disjoint {
                var sets: [[String]] = []
                for set in 0..<64 { sets.append(try await sample(skip: set * 100)) }
                script = Self.disjointScript(sets, auth: auth)
            } else {
                script =
                    #"wrk.headers["Authorization"] = "\#(auth)"; "#
                    + Self.batchScript(Self.batch(try await sample(skip: 0)))
            }
            guard
                FileManager.default.createFile(
                    atPath: file.path, contents: Data(script.utf8), attributes: [.posixPermissions: 0o600])
            else { throw ValidationError("Cannot write \(file.path).") }
            let target = cluster.url.absoluteString + "/odata/$batch"
            _ = try await NIOThreadPool.singleton.runIfActive { try wrk(target, script: file, seconds: 2) }
            let servers = cluster.processIdentifiers
            let before = (ProcessCPU.of(servers), ProcessCPU.named("nginx"), ProcessCPU.postgres())
            let sampler = try LockWaitSampler.start(database: database, seconds: duration)
            let rate = try await NIOThreadPool.singleton.runIfActive { try wrk(target, script: file) }
            let after = (ProcessCPU.of(servers), ProcessCPU.named("nginx"), ProcessCPU.postgres())
            let waits = try await NIOThreadPool.singleton.runIfActive { try sampler.finish() }
            if count == 1 { one = rate }
            let requests = rate * Double(duration)
            print(
                "\(count) behind nginx".padding(toLength: 28, withPad: " ", startingAt: 0)
                    + String(
                        format: "%-8.1f %5.2f%%  %5.2f×   %8.0f µs  %5.0f µs  %6.0f µs", rate, rate / baseline * 100,
                        one > 0 ? rate / one : 1, (after.0 - before.0) / requests * 1e6,
                        (after.1 - before.1) / requests * 1e6, (after.2 - before.2) / requests * 1e6)
                    + String(
                        format: "   waiting for a lock %.1f%% of in-transaction time (target ≤ 5%%: %@)",
                        waits.share * 100, waits.share <= 0.05 ? "met" : "NOT MET"))
        }
        print(
            "\nTarget: two instances ≥ 1.6× one when the machine has the cores; here two cores serve nginx, the instances, PostgreSQL and wrk."
                + (disjoint
                    ? ""
                    : " These batches update the same 100 checks: their writers collide on every row and run again."))
    }
}
