import BatonOData
import BatonServer
import BatonTestSupport
import BatonTesting
import Foundation
import Synchronization
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Two real `baton-server serve` processes on one PostgreSQL database, a client alternating between them
/// (`TwoInstanceStorageTests` proves the same with two instances in one process, with test clocks).
@Suite(.serverSlot, .timeLimit(.minutes(10)), .serialized) struct TwoProcessTests {
    struct Reply: @unchecked Sendable {
        // Safe: built once from a response and only read afterwards.
        var status: Int
        var json: [String: Any]
        var headers: [String: String]
        var text: String
        var values: [[String: Any]] { json["value"] as? [[String: Any]] ?? [] }
    }

    /// One HTTP request to `base`.
    static func send(
        _ base: URL, _ method: String, _ path: String, token: String? = nil, headers: [String: String] = [:],
        form: [(String, String)]? = nil, json: String? = nil
    ) async throws -> Reply {
        var request = URLRequest(url: try #require(URL(string: base.absoluteString + path)))
        request.httpMethod = method
        if let token { request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization") }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let form {
            request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
            var allowed = CharacterSet.alphanumerics
            allowed.insert(charactersIn: "-._~")
            request.httpBody = Data(
                form.map { "\($0)=\($1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
                    .joined(separator: "&").utf8)
        }
        if let json {
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
            request.httpBody = Data(json.utf8)
        }
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = try #require(response as? HTTPURLResponse)
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields {
            if let name = name as? String, let value = value as? String { fields[name.lowercased()] = value }
        }
        return Reply(
            status: http.statusCode,
            json: (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:], headers: fields,
            text: String(decoding: data, as: UTF8.self))
    }

    static func password(_ user: String, _ password: String) -> [(String, String)] {
        [("grant_type", "password"), ("client_id", "baton-device"), ("username", user), ("password", password)]
    }

    /// A link the server made (on the balancer's address) at one instance.
    static func at(_ base: URL, _ link: String, cluster: ServerCluster) -> String {
        String(link.dropFirst(cluster.url.absoluteString.count))
    }

    @Test func tokensRetriesETagsThrottleAndDeltasHoldAcrossServeProcesses() async throws {
        let database = try await SharedPostgres.freshDatabase()
        let cluster = try await ServerCluster.start(database: database) { server in
            for name in ["alice", "bob"] {
                _ = try await server.users.add(
                    name: name, displayName: nil, role: .groundStaff, password: "correct-horse-battery")
            }
        }
        defer { cluster.stop() }
        let a = cluster.instanceURL(0)
        let b = cluster.instanceURL(1)

        // Refresh-token rotation: a used refresh token presented at the other process revokes the family.
        let signIn = try await Self.send(
            a, "POST", "/oauth/token", form: Self.password("alice", "correct-horse-battery"))
        #expect(signIn.status == 200)
        let refresh = try #require(signIn.json["refresh_token"] as? String)
        let form = [("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", refresh)]
        let rotated = try await Self.send(b, "POST", "/oauth/token", form: form)
        #expect(rotated.status == 200)
        let rotatedAccess = try #require(rotated.json["access_token"] as? String)
        #expect(try await Self.send(a, "GET", "/me", token: rotatedAccess).status == 200)
        #expect(try await Self.send(a, "POST", "/oauth/token", form: form).status == 400)
        #expect(try await Self.send(b, "GET", "/me", token: rotatedAccess).status == 401)

        let alice = try #require(
            try await Self.send(b, "POST", "/oauth/token", form: Self.password("alice", "correct-horse-battery"))
                .json["access_token"] as? String)

        // A repeatable request at both processes at once: applied once, both answers the first's.
        let firstSent = Repeatability.formatIMFFixdate(Date())
        let retry = ["Repeatability-Request-ID": "retry-1", "Repeatability-First-Sent": firstSent]
        let body = Fixtures.check(Fixtures.id(1))
        async let atA = Self.send(a, "POST", "/odata/PreflightChecks", token: alice, headers: retry, json: body)
        async let atB = Self.send(b, "POST", "/odata/PreflightChecks", token: alice, headers: retry, json: body)
        let answers = try await [atA, atB]
        #expect(answers.map(\.status) == [201, 201])
        #expect(answers[0].headers["etag"] != nil && answers[0].headers["etag"] == answers[1].headers["etag"])
        let count = try await Self.send(a, "GET", "/odata/PreflightChecks/$count", token: alice)
        #expect(count.text == "1")

        // ETags: the version read at B is current at A, and stale at B once A changed it.
        let entity = "/odata/PreflightChecks(\(Fixtures.id(1)))"
        let read = try await Self.send(b, "GET", entity, token: alice)
        let etag = try #require(read.headers["etag"])
        let patched = try await Self.send(
            a, "PATCH", entity, token: alice, headers: ["If-Match": etag], json: #"{"Remarks":"checked twice"}"#)
        #expect(patched.status == 200 || patched.status == 204)
        let stale = try await Self.send(
            b, "PATCH", entity, token: alice, headers: ["If-Match": etag], json: #"{"Remarks":"lost update"}"#)
        #expect(stale.status == 412)

        // Writers on both processes while a reader follows delta links at one and then the other: every change
        // appears exactly once.
        let start = try await Self.send(
            a, "GET", "/odata/PreflightChecks", token: alice, headers: ["Prefer": "odata.track-changes"])
        let link = try #require(start.json["@odata.deltaLink"] as? String)
        let ids = (0..<4).flatMap { writer in (0..<10).map { Fixtures.id(1_000 * (writer + 1) + $0) } }
        let done = Done()
        async let writing: Void = {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<4 {
                    group.addTask {
                        for id in ids[(writer * 10)..<((writer + 1) * 10)] {
                            let reply = try await Self.send(
                                writer % 2 == 0 ? a : b, "POST", "/odata/PreflightChecks", token: alice,
                                json: Fixtures.check(id))
                            #expect(reply.status == 201)
                        }
                    }
                }
                try await group.waitForAll()
            }
            done.flag.withLock { $0 = true }
        }()
        let (seen, _) = try await TwoInstanceStorageTests.readDeltas(
            from: link, finished: { done.flag.withLock { $0 } }
        ) { round, link in
            let base = round % 2 == 0 ? a : b
            let page = try await Self.send(base, "GET", Self.at(base, link, cluster: cluster), token: alice)
            #expect(page.status == 200)
            return (page.values, page.json["@odata.nextLink"] as? String, page.json["@odata.deltaLink"] as? String)
        }
        try await writing
        #expect(Set(seen.keys) == Set(ids))
        #expect(seen.values.allSatisfy { $0 == 1 }, "\(seen.filter { $0.value != 1 })")

        // The sign-in throttle counts failures at both processes: five at A, and the sixth at B is slowed.
        for _ in 0..<5 {
            #expect(
                try await Self.send(a, "POST", "/oauth/token", form: Self.password("bob", "guess-guess-1")).status
                    == 400)
        }
        #expect(
            try await Self.send(b, "POST", "/oauth/token", form: Self.password("bob", "guess-guess-1")).status == 429)
        #expect(cluster.isRunning(0) && cluster.isRunning(1))
    }
}

/// Whether the writers are done.
final class Done: Sendable {
    let flag = Mutex(false)
}
