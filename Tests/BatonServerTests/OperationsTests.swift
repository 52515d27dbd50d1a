import BatonServer
import BatonTestSupport
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Synchronization
import Testing

/// What an operator sees: the metrics endpoint, the JSON log, and the trace id of each request.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct OperationsTests {
    /// The metrics as Prometheus' text format gives them: one value per series (`name{labels}`).
    static func scrape(_ server: TestServer) async throws -> [String: Double] {
        let text = try await server.server.metricsApplication().test(.router) { client in
            try await client.execute(uri: "/metrics", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/plain; version=0.0.4") == true)
                return String(buffer: response.body)
            }
        }
        var series: [String: Double] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                Issue.record("not a sample: \(line)")
                continue
            }
            series[String(line[..<space])] = value
        }
        return series
    }

    /// How much each series grew between two scrapes (series that did not change are left out).
    static func growth(_ before: [String: Double], _ after: [String: Double]) -> [String: Double] {
        after.reduce(into: [:]) { growth, sample in
            let delta = sample.value - (before[sample.key] ?? 0)
            if delta != 0 { growth[sample.key] = delta }
        }
    }

    @Test func metricsCountWhatHappenedExactlyOnce() async throws {
        try await OnBehalfTests.handover { server, client, bob, key, createdAt in
            let alice = try await client.signIn("alice").access
            let before = try await Self.scrape(server)

            // A wrong password, and a sign-in that works.
            let (refused, _) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "wrong-password-1"),
            ])
            #expect(refused == .badRequest)
            let bobAgain = try await client.signIn("bob")
            let (refreshed, _) = try await client.token([
                ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", bobAgain.refresh),
            ])
            #expect(refreshed == .ok)
            // Bob uploads Alice's change on her behalf; the network drops the answer and his device sends it again.
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-1", key: key, createdAt: createdAt,
                firstSent: OnBehalfTests.firstSent(server))
            for _ in 0..<2 {
                let reply = try await client.odata(
                    .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
                #expect(reply.status == .created, "\(reply.text)")
            }
            // Alice's own change, one the service refuses, a key read, and a delta page.
            #expect(
                try await client.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(2)))
                    .status == .created)
            let wrong = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(3), extra: #","FuelKgs":1"#))
            #expect(wrong.status == .badRequest)
            #expect(try await client.odata(.get, "PreflightChecks(\(Fixtures.id(2)))", token: alice).status == .ok)
            let tracked = try await client.odata(
                .get, "PreflightChecks", token: alice, headers: [("Prefer", "odata.track-changes")])
            let deltaLink = try #require(tracked.json["@odata.deltaLink"] as? String)
            let deltaPath = String(deltaLink.dropFirst("\(TestServer.issuer)/odata/".count))
            #expect(try await client.odata(.get, deltaPath, token: alice).status == .ok)
            // A filter that mentions the word is not a delta page.
            let mention = try await client.odata(
                .get, "Aircraft?$filter=contains(Station,'deltatoken')", token: alice)
            #expect(mention.status == .ok, "\(mention.text)")
            // An atomicity group whose second change is refused: one refusal, not one per member (the first
            // is answered 424, which a device retries).
            let group =
                #"{"requests":[{"id":"a","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(4)))},{"id":"b","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(5), extra: #","FuelKgs":1"#))}]}"#
            #expect(try await client.odata(.post, "$batch", token: alice, body: group).status == .ok)
            // A batch of three reads, and a path no route has, with a unique id in it.
            let batch =
                #"{"requests":[{"id":"1","method":"GET","url":"Aircraft"},{"id":"2","method":"GET","url":"Aircraft"},{"id":"3","method":"GET","url":"Aircraft"}]}"#
            #expect(try await client.odata(.post, "$batch", token: alice, body: batch).status == .ok)
            let stray = UUID().uuidString
            let strayStatus = try await client.execute(uri: "/no-such-\(stray)", method: .get) { $0.status }
            #expect(strayStatus == .notFound)

            let after = try await Self.scrape(server)
            let growth = Self.growth(before, after)
            #expect(growth[#"baton_sign_ins_total{method="password_grant",result="invalid_grant"}"#] == 1)
            #expect(growth[#"baton_sign_ins_total{method="password_grant",result="success"}"#] == 1)
            // A refresh checks no password: it is a token grant, not a sign-in.
            #expect(growth[#"baton_token_grants_total{grant="refresh_token",result="success"}"#] == 1)
            #expect(growth.keys.filter { $0.hasPrefix("baton_sign_ins_total") }.count == 2)
            // Applied once, counted once: the replay is answered from the stored result.
            #expect(growth[#"baton_uploaded_changes_total{kind="on_behalf"}"#] == 1)
            #expect(growth[#"baton_uploaded_changes_total{kind="own"}"#] == 1)
            #expect(growth.keys.filter { $0.hasPrefix("baton_refused_changes_total") }.count == 1)
            #expect(growth.filter { $0.key.hasPrefix("baton_refused_changes_total") }.values.reduce(0, +) == 2)
            #expect(growth["baton_delta_pages_total"] == 1)
            #expect(growth["baton_batch_requests_count"] == 2)
            #expect(growth["baton_batch_requests_sum"] == 5)
            #expect(growth[#"baton_batch_requests_bucket{le="1.0"}"#] == nil)
            #expect(growth[#"baton_batch_requests_bucket{le="2.0"}"#] == 1)
            #expect(growth[#"baton_batch_requests_bucket{le="5.0"}"#] == 2)
            #expect(growth[#"baton_http_requests_total{route="NotFound",method="GET",status="404"}"#] == 1)
            #expect(growth[#"baton_http_requests_total{route="/oauth/token",method="POST",status="400"}"#] == 1)
            #expect(growth[#"baton_http_requests_total{route="/oauth/token",method="POST",status="200"}"#] == 2)
            // Every OData request of the test: two uploads by bob, two changes, a read, a page, a delta, a
            // filtered read and two batches.
            let odata = growth.filter { $0.key.hasPrefix("baton_http_requests_total{route=\"/odata/") }
            #expect(odata.values.reduce(0, +) == 10, "\(odata)")
            #expect(growth[#"baton_database_duration_seconds_count{operation="change"}"#] == 4)
            #expect(growth[#"baton_database_duration_seconds_count{operation="batch"}"#] == 2)
            // Labels never carry what a client wrote.
            #expect(!after.keys.contains { $0.contains(stray) || $0.contains("r-1") || $0.contains("alice") })
        }
    }

    /// A logger whose JSON lines the test reads back.
    final class CapturedLog: Sendable {
        let lines = Mutex<[Data]>([])

        var logger: Logger {
            var logger = Logger(label: "baton-server") { label in
                JSONLogHandler(label: label) { line in self.lines.withLock { $0.append(line) } }
            }
            logger.logLevel = .info
            return logger
        }

        /// Every line, parsed; a line that is not one JSON object fails the test.
        var objects: [[String: Any]] {
            lines.withLock { $0 }.compactMap { line in
                #expect(line.last == UInt8(ascii: "\n"))
                let object = try? JSONSerialization.jsonObject(with: line) as? [String: Any]
                #expect(object != nil, "not JSON: \(String(decoding: line, as: UTF8.self))")
                return object
            }
        }
    }

    @Test func accessLogCarriesTheClientsTraceIDAndNoSecrets() async throws {
        let log = CapturedLog()
        let server = try await TestServer(logger: log.logger) { $0.accessLog = true }
        defer { server.remove() }
        try await server.addUser("alice")
        let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        let parent = "00f067aa0ba902b7"
        try await server.test { client in
            let alice = try await client.signIn("alice").access
            let (status, _, _) = try await client.get(
                "/odata/Aircraft?$filter=Station%20eq%20'FRA'", token: alice,
                headers: [HTTPField.Name("traceparent")!: "00-\(trace)-\(parent)-01"])
            #expect(status == .ok)
            // A malformed traceparent is ignored, never an error.
            let (malformed, _, _) = try await client.get(
                "/odata/Aircraft", token: alice, headers: [HTTPField.Name("traceparent")!: "00-zz-\(parent)-01"])
            #expect(malformed == .ok)
            // A very long path is cut in the log.
            let long = try await client.execute(uri: "/" + String(repeating: "a", count: 5_000), method: .get) {
                $0.status
            }
            #expect(long == .notFound)
        }
        let lines = log.objects
        let read = try #require(
            lines.first { ($0["message"] as? String)?.hasPrefix("GET /odata/Aircraft 200") == true })
        #expect(read["level"] as? String == "info")
        #expect(read["trace_id"] as? String == trace)
        #expect(read["parent_span_id"] as? String == parent)
        let span = try #require(read["span_id"] as? String)
        #expect(span.count == 16 && span != parent)
        #expect(read["duration_ms"] is Int)
        #expect(read["timestamp"] as? String ?? "" > "2026-")
        #expect(lines.filter { ($0["message"] as? String)?.hasPrefix("GET /odata/Aircraft 200") == true }.count == 2)
        #expect(lines.filter { $0["trace_id"] != nil }.count == 1)
        // The query (which may carry codes and filters on personal data), passwords and tokens stay out.
        let text = String(decoding: log.lines.withLock { $0 }.joined(), as: UTF8.self)
        #expect(!text.contains("FRA"))
        #expect(!text.contains("correct-horse-battery"))
        #expect(!text.contains("eyJ"))
        #expect(text.contains("POST /oauth/token 200"))
        let cut = try #require(lines.first { ($0["message"] as? String)?.hasPrefix("GET /aaaa") == true })
        #expect((cut["message"] as? String)?.count ?? 0 < 300)
    }

    /// A log handler that keeps no metadata provider (swift-log's default for a handler written before them):
    /// each line's message with the handler's metadata and the line's own.
    struct ProviderlessHandler: LogHandler {
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .info
        let lines: Lines

        final class Lines: Sendable {
            let written = Mutex<[(String, Logger.Metadata)]>([])
        }

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
            lines.written.withLock { $0.append((event.message.description, merged)) }
        }
    }

    /// Trace ids reach a log line through the handler's metadata provider; a handler without one, alone or among
    /// others (a multiplexing handler answers for any of its handlers), gets them as the request's metadata, so its
    /// access line carries them too, a request without a trace none, and no line warns of a provider it dropped.
    @Test(arguments: [false, true]) func aHandlerWithoutAMetadataProviderStillLogsTheTraceIDs(multiplexed: Bool)
        async throws
    {
        let lines = ProviderlessHandler.Lines()
        let captured = CapturedLog()
        var logger = Logger(label: "baton-server") { label in
            let providerless = ProviderlessHandler(lines: lines)
            guard multiplexed else { return providerless }
            let json = JSONLogHandler(label: label) { line in captured.lines.withLock { $0.append(line) } }
            return MultiplexLogHandler([json, providerless])
        }
        logger.logLevel = .info
        let server = try await TestServer(logger: logger) { $0.accessLog = true }
        defer { server.remove() }
        let trace = "0af7651916cd43dd8448eb211c80319c"
        try await server.test { client in
            let traced = try await client.execute(
                uri: "/health", method: .get,
                headers: [HTTPField.Name("traceparent")!: "00-\(trace)-b7ad6b7169203331-01"]
            ) { $0.status }
            #expect(traced == .ok)
            let plain = try await client.execute(uri: "/health", method: .get) { $0.status }
            #expect(plain == .ok)
        }
        let written = lines.written.withLock { $0 }
        #expect(!written.contains { $0.0.contains("metadataProvider") }, "\(written.map(\.0))")
        let access = written.filter { $0.0 == "GET /health 200" }
        #expect(access.count == 2)
        #expect(access.first?.1["trace_id"]?.description == trace)
        #expect(access.first?.1["parent_span_id"]?.description == "b7ad6b7169203331")
        #expect(access.first?.1["span_id"]?.description.count == 16)
        #expect(access.last?.1["trace_id"] == nil)
        if multiplexed {
            let json = captured.objects.filter { $0["message"] as? String == "GET /health 200" }
            #expect(json.count == 2)
            #expect(json.first?["trace_id"] as? String == trace)
            #expect(json.first?["span_id"] as? String == access.first?.1["span_id"]?.description)
            #expect(json.last?["trace_id"] == nil)
        }
    }

    @Test func withoutAccessLogRequestsAreLoggedAtDebugOnly() async throws {
        let log = CapturedLog()
        let server = try await TestServer(logger: log.logger)
        defer { server.remove() }
        try await server.test { client in
            let status = try await client.execute(uri: "/health", method: .get) { $0.status }
            #expect(status == .ok)
        }
        #expect(!log.objects.contains { ($0["message"] as? String)?.contains("/health") == true })
    }

    @Test func healthSaysWhetherTheDatabasesAnswer() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.test { client in
            let (up, body, _) = try await client.get("/health", token: nil)
            #expect(up == .ok)
            #expect(body["status"] as? String == "ok")
            // The databases go away (closed under the running server): a load balancer must stop sending here.
            server.server.close()
            let (down, error, _) = try await client.get("/health", token: nil)
            #expect(down == .serviceUnavailable)
            #expect((error["error"] as? [String: Any])?["code"] as? String == "DatabaseUnavailable")
        }
    }

    @Test func jsonLogLinesCannotBeForgedByMetadata() throws {
        let log = CapturedLog()
        var logger = log.logger
        logger[metadataKey: "user"] = "alice"
        logger.warning(
            "line one\n{\"level\":\"critical\"}", metadata: ["level": "critical", "nested": ["a": ["1", "2"]]])
        let lines = log.objects
        #expect(lines.count == 1)
        let line = try #require(lines.first)
        #expect(line["level"] as? String == "warning")
        #expect(line["metadata.level"] as? String == "critical")
        #expect(line["message"] as? String == "line one\n{\"level\":\"critical\"}")
        #expect(line["user"] as? String == "alice")
        #expect(((line["nested"] as? [String: Any])?["a"] as? [String]) == ["1", "2"])
        #expect(line["label"] as? String == "baton-server")
    }
}
