import BatonServer
import Foundation
import Hummingbird
import HummingbirdTesting

/// `baton-bench --cockpit N`: the admin cockpit's own cost per page, in-process (HummingbirdTesting's router
/// mode, no sockets), after an admin signs in through the real flow (sign-in redirect, the authorization
/// endpoint's form, the callback). The audit log is filled to a tenth of N, measured, then to N and measured
/// again, so the report shows whether paging stays flat as the log grows. Target: overview and audit page
/// ≤ 50 ms p50 with 100,000 entries.
struct CockpitProfile {
    let server: BatonServer
    let entries: Int
    let requests = 200

    func run() async throws {
        try await server.users.add(name: "ada", displayName: "Ada", role: .admin, password: "cockpit-bench-secret-1")
        for n in 0..<50 {
            try await server.users.add(
                name: "user\(n)", displayName: "User \(n)", role: .groundStaff, password: "cockpit-bench-secret-1")
        }
        let application = server.application()
        try await application.test(.router) { client in
            let cookie = try await signIn(client)
            var filled = 0
            for target in [entries / 10, entries] {
                let start = ContinuousClock.now
                try await fill(from: filled, to: target)
                filled = target
                print("\nAudit log filled to \(target) entries (\(ContinuousClock.now - start)).")
                let middle = String(target / 2)
                let pages = [
                    ("overview", "/admin/"), ("users", "/admin/users"), ("audit, newest page", "/admin/audit"),
                    ("audit, a page in the middle", "/admin/audit?before=\(middle)"),
                    ("audit, filtered by action", "/admin/audit?action=entity-updated"),
                    ("audit, filtered by user", "/admin/audit?user=user7"),
                ]
                print("page                              p50 µs    p99 µs   CPU µs/page")
                for (name, uri) in pages {
                    var times: [Double] = []
                    let before = CPUTime.now()
                    for _ in 0..<requests {
                        let started = ContinuousClock.now
                        let response = try await client.execute(
                            uri: uri, method: .get, headers: [.cookie: "baton_cockpit=\(cookie)"])
                        guard response.status == .ok else { throw ProfileError("\(name): \(response.status)") }
                        let elapsed = ContinuousClock.now - started
                        times.append(
                            Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12)
                    }
                    let cpu = (CPUTime.now() - before).server / Double(requests) * 1e6
                    times.sort()
                    print(
                        name.padding(toLength: 32, withPad: " ", startingAt: 0)
                            + String(
                                format: "%8.0f  %8.0f  %10.0f", times[times.count / 2], times[times.count * 99 / 100],
                                cpu))
                }
            }
            print(
                "\nTarget: overview and audit page ≤ 50,000 µs p50 with \(entries) entries; paging flat as the log grows."
            )
        }
    }

    /// Audit entries like a busy day's: changes uploaded by users (some on someone else's behalf), sign-ins,
    /// store-key fetches.
    func fill(from start: Int, to end: Int) async throws {
        var batch: [AuditEntry] = []
        let now = Date()
        for n in start..<end {
            let user = "user\(n % 50)"
            let (action, subject, detail): (String, String, String) =
                switch n % 4 {
                case 0:
                    (
                        "entity-created", "PreflightChecks(\(n))",
                        "uploaded by \(n % 7 == 0 ? "user\((n + 1) % 50)" : user)"
                    )
                case 1: ("entity-updated", "PreflightChecks(\(n))", "uploaded by \(user)")
                case 2: ("sign-in", user, "client baton-device")
                default: ("store-key-fetched", "tablet-\(n % 120)", "")
                }
            batch.append(
                AuditEntry(
                    at: now.addingTimeInterval(Double(n - end)), actor: user, action: action, subject: subject,
                    address: "10.0.\(n % 200).\(n % 250)", detail: detail))
            if batch.count == 10_000 {
                try await server.audit.record(contentsOf: batch)
                batch.removeAll(keepingCapacity: true)
            }
        }
        try await server.audit.record(contentsOf: batch)
    }

    /// Signs the admin in as a browser does and returns the session cookie's value.
    func signIn(_ client: some TestClientProtocol) async throws -> String {
        let start = try await client.execute(uri: "/admin/sign-in", method: .get)
        guard let location = start.headers[.location], let signInCookie = Self.cookie(start, "baton_cockpit_sign_in"),
            let query = URLComponents(string: location)?.queryItems
        else { throw ProfileError("The cockpit did not start a sign-in.") }
        var form = URLComponents()
        form.queryItems =
            query + [
                URLQueryItem(name: "username", value: "ada"),
                URLQueryItem(name: "password", value: "cockpit-bench-secret-1"),
            ]
        let authorized = try await client.execute(
            uri: "/oauth/authorize", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
            body: ByteBuffer(string: form.percentEncodedQuery ?? ""))
        guard let callback = authorized.headers[.location], let callbackURL = URLComponents(string: callback) else {
            throw ProfileError("The authorization endpoint did not redirect: \(authorized.status).")
        }
        let finished = try await client.execute(
            uri: callbackURL.path + "?" + (callbackURL.percentEncodedQuery ?? ""), method: .get,
            headers: [.cookie: "baton_cockpit_sign_in=\(signInCookie)"])
        guard let session = Self.cookie(finished, "baton_cockpit") else {
            throw ProfileError("The callback opened no session: \(finished.status).")
        }
        return session
    }

    static func cookie(_ response: TestResponse, _ name: String) -> String? {
        for value in response.headers[values: .setCookie] where value.hasPrefix(name + "=") {
            let cookie = value.dropFirst(name.count + 1).prefix { $0 != ";" }
            if !cookie.isEmpty { return String(cookie) }
        }
        return nil
    }
}
