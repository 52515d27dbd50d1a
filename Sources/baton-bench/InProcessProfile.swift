import BatonServer
import Foundation
import Hummingbird
import HummingbirdTesting

/// `baton-bench --in-process N`: the data service's own cost per request, without sockets — the router is
/// driven in-process (HummingbirdTesting's router mode), so a profiler sees only Baton and Hummingbird's
/// routing. Reports microseconds per request (wall and CPU), context switches, and resident memory, for a key
/// read and a filtered page of 50. HummingbirdTesting's router mode keeps a test channel per request, so
/// memory grows by about 5 KB per request here (heaptrack shows it; the socket server's stays flat).
struct InProcessProfile {
    let server: BatonServer
    let requests: Int
    let only: String?

    func run() async throws {
        try await server.users.add(
            name: "profile", displayName: nil, role: .supervisor, password: "load-generator-secret-1")
        let application = server.application()
        try await application.test(.router) { client in
            let form = "grant_type=password&client_id=baton-device&username=profile&password=load-generator-secret-1"
            let token = try await client.execute(
                uri: "/oauth/token", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: form))
            let tokenBody = try JSONSerialization.jsonObject(with: Data(buffer: token.body)) as? [String: Any]
            guard let accessToken = tokenBody?["access_token"] as? String else {
                throw ProfileError("Cannot sign in.")
            }
            let headers: HTTPFields = [.authorization: "Bearer \(accessToken)"]
            let page = try await client.execute(
                uri: "/odata/PreflightChecks?$top=1&$select=ID", method: .get, headers: headers)
            let pageBody = try JSONSerialization.jsonObject(with: Data(buffer: page.body)) as? [String: Any]
            guard let key = ((pageBody?["value"] as? [[String: Any]])?.first?["ID"]) as? String else {
                throw ProfileError("No seeded data.")
            }
            let filtered = "/odata/PreflightChecks?$filter=FuelKg%20gt%2050000%20and%20Status%20eq%20'final'&$top=50"
            let runs = [
                ("/health (harness)", "/health"), ("service document", "/odata/"),
                ("key read", "/odata/PreflightChecks(\(key))"),
                ("filtered page of 50", filtered),
            ]
            for (name, uri) in runs where only.map({ name.contains($0) }) ?? true {
                let clock = ContinuousClock()
                let before = CPUTime.now()
                let elapsed = try await clock.measure {
                    for _ in 0..<requests {
                        let response = try await client.execute(uri: uri, method: .get, headers: headers)
                        guard response.status == .ok else { throw ProfileError("\(name): \(response.status)") }
                    }
                }
                let micros = Double(elapsed.components.attoseconds) / 1e12 + Double(elapsed.components.seconds) * 1e6
                let used = CPUTime.now() - before
                print(
                    name.padding(toLength: 24, withPad: " ", startingAt: 0)
                        + String(
                            format: "%8.1f µs, CPU %6.1f µs, %4.2f switches", micros / Double(requests),
                            used.server / Double(requests) * 1e6, used.switches / Double(requests))
                        + String(format: " rss %.0f MB", memoryMegabytes("VmRSS")))
            }
        }
    }
}

struct ProfileError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
