import CoreMetrics
import Foundation
import Prometheus
import Synchronization

/// One server's metrics, recorded through swift-metrics into a Prometheus registry of its own (several servers in
/// one process keep separate counts), and scraped at `/metrics` of ``BatonServer/metricsApplication(onListening:)``.
///
/// The series (docs/OPERATIONS.md, "Logs, metrics and traces", says what each means):
/// - `baton_http_requests_total{route,method,status}`, `baton_http_request_duration_seconds{route,method}`
/// - `baton_sign_ins_total{method,result}` — a password checked, at the token endpoint or the sign-in page
/// - `baton_token_grants_total{grant,result}` — refresh tokens and authorization codes exchanged
/// - `baton_uploaded_changes_total{kind}` — `own` or `on_behalf`
/// - `baton_refused_changes_total{code}` — what devices move to their error archive (4xx but 408, 424, 429)
/// - `baton_delta_pages_total`, `baton_batch_requests` (requests per `$batch`)
/// - `baton_database_duration_seconds{operation}` — `read`, `change` or `batch`
///
/// Every label takes its values from a small fixed set (routes, methods, status codes, error codes, grant
/// types), never from what a client wrote, so no request can make the registry grow.
public final class ServerMetrics: Sendable {
    /// The registry the metrics live in.
    public let registry = PrometheusCollectorRegistry()
    let factory: PrometheusMetricsFactory
    let enabled = Atomic<Bool>(true)
    let tracing = Atomic<Bool>(true)

    /// The request series' handlers, made once per (route, method, status) and kept: a request looks its two up in
    /// one small dictionary instead of asking the registry, under its lock, to find them by their labels.
    let requestHandlers = Mutex<[RequestSeries: (count: CoreMetrics.Counter, duration: CoreMetrics.Timer)]>([:])
    /// The database timers, one per operation, made once and kept.
    let databaseTimers = Mutex<[String: CoreMetrics.Timer]>([:])

    struct RequestSeries: Hashable {
        var route: String
        var method: String
        var status: Int
    }

    let uploadedChanges: (own: CoreMetrics.Counter, onBehalf: CoreMetrics.Counter)
    let deltaPages: CoreMetrics.Counter
    let batchSizes: Recorder

    static let durationBuckets: [Duration] = [
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2.5),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
    ]

    /// Creates the metrics, all at zero.
    public init() {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = Self.durationBuckets
        factory.valueHistogramBuckets = ["baton_batch_requests": [1, 2, 5, 10, 20, 50, 100]]
        self.factory = factory
        uploadedChanges = (
            Counter(label: "baton_uploaded_changes_total", dimensions: [("kind", "own")], factory: factory),
            Counter(label: "baton_uploaded_changes_total", dimensions: [("kind", "on_behalf")], factory: factory)
        )
        deltaPages = Counter(label: "baton_delta_pages_total", factory: factory)
        batchSizes = Recorder(label: "baton_batch_requests", factory: factory)
    }

    /// Whether anything is counted and timed. On by default; `baton-server serve` turns it off unless it
    /// serves the metrics (`--metrics-port`), and the benchmark to measure what it costs.
    public var isEnabled: Bool {
        get { enabled.load(ordering: .relaxed) }
        set { enabled.store(newValue, ordering: .relaxed) }
    }

    /// Whether a request's `traceparent` is read and its ids logged. On by default; the benchmark turns it off
    /// to measure what it costs.
    public var readsTraceContext: Bool {
        get { tracing.load(ordering: .relaxed) }
        set { tracing.store(newValue, ordering: .relaxed) }
    }

    /// Counts one change applied from an upload: the uploader's own, or another user's on their behalf.
    func uploaded(onBehalf: Bool) {
        guard isEnabled else { return }
        (onBehalf ? uploadedChanges.onBehalf : uploadedChanges.own).increment()
    }

    /// Counts one delta page answered.
    func deltaPage() {
        guard isEnabled else { return }
        deltaPages.increment()
    }

    /// Records the number of requests in one `$batch`.
    func batch(size: Int) {
        guard isEnabled else { return }
        batchSizes.record(size)
    }

    /// Counts one answered HTTP request and its duration.
    func request(route: String, method: String, status: Int, duration: Duration) {
        guard isEnabled else { return }
        let series = RequestSeries(route: route, method: method, status: status)
        let handlers = Self.kept(series, in: requestHandlers) {
            (
                count: Counter(
                    label: "baton_http_requests_total",
                    dimensions: [("route", route), ("method", method), ("status", String(status))], factory: factory),
                duration: Timer(
                    label: "baton_http_request_duration_seconds", dimensions: [("route", route), ("method", method)],
                    factory: factory)
            )
        }
        handlers.count.increment()
        handlers.duration.recordNanoseconds(Self.nanoseconds(duration))
    }

    /// Counts one password checked: `method` is `password_grant` (the token endpoint) or `sign_in_page` (the
    /// browser's authorization-code flow); `result` is `success` or the OAuth error (`invalid_grant`,
    /// `too_many_attempts`, …).
    func signIn(method: String, result: String) {
        guard isEnabled else { return }
        Counter(
            label: "baton_sign_ins_total", dimensions: [("method", method), ("result", Self.label(result))],
            factory: factory
        ).increment()
    }

    /// Counts one token-endpoint exchange that checks no password: `refresh_token`, `authorization_code`, or
    /// `other` for anything else a client sent as `grant_type`.
    func tokenGrant(_ grant: String, result: String) {
        guard isEnabled else { return }
        let known: Set<String> = ["refresh_token", "authorization_code"]
        Counter(
            label: "baton_token_grants_total",
            dimensions: [("grant", known.contains(grant) ? grant : "other"), ("result", Self.label(result))],
            factory: factory
        ).increment()
    }

    /// Counts one change the data service refused (what a device moves to its error archive), by error code.
    func refusedChange(code: String) {
        guard isEnabled else { return }
        Counter(label: "baton_refused_changes_total", dimensions: [("code", Self.label(code))], factory: factory)
            .increment()
    }

    /// Records how long the data service's database work for one request took.
    func database(_ operation: String, _ duration: Duration) {
        guard isEnabled else { return }
        let timer = Self.kept(operation, in: databaseTimers) {
            Timer(label: "baton_database_duration_seconds", dimensions: [("operation", operation)], factory: factory)
        }
        timer.recordNanoseconds(Self.nanoseconds(duration))
    }

    /// The handler kept under `key`, made by `make` the first time; when two requests make one at once, both use
    /// the one kept first.
    static func kept<Key: Hashable & Sendable, Value: Sendable>(
        _ key: Key, in cache: borrowing Mutex<[Key: Value]>, make: () -> Value
    ) -> Value {
        if let kept = cache.withLock({ $0[key] }) { return kept }
        let made = make()
        return cache.withLock { handlers in
            if let kept = handlers[key] { return kept }
            handlers[key] = made
            return made
        }
    }

    static func nanoseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
    }

    /// A label value made of letters, digits and `_` only, at most 40 of them (codes are Baton's own words).
    static func label(_ text: String) -> String {
        let cleaned = text.unicodeScalars.prefix(40).map {
            ($0.properties.isAlphabetic && $0.isASCII) || ("0"..."9").contains($0) || $0 == "_" ? Character($0) : "_"
        }
        return cleaned.isEmpty ? "unknown" : String(cleaned)
    }

    /// The metrics in Prometheus' text exposition format.
    public func exposition() -> [UInt8] {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}
