import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Synchronization
import Tracing
import W3CTraceContext

/// The methods the metrics name; any other is counted as `other`.
private let countedMethods: Set<HTTPRequest.Method> = [.get, .head, .post, .put, .patch, .delete, .options]

/// What the server records of every request, in one pass: the W3C trace context the client sent (`traceparent`,
/// put in the request's `ServiceContext`, from which its log lines take the ids), the metrics (count and duration
/// by route, method and status), and the access log line (method, path — never the query, which may carry codes —,
/// status and duration): at `info` when ``BatonServerConfiguration/accessLog`` is on, else at `debug`.
struct RequestTelemetryMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics
    let accessLog: Bool
    /// Whether the server's log handler takes the trace ids from `Logger.MetadataProvider.requestTrace` when it
    /// writes a line. Otherwise they are written into the request logger's metadata, which swift-log's
    /// `StreamLogHandler` (the server's text format) formats at once, line or no line: a tenth of a key read.
    let tracesThroughProvider: Bool
    let spanIDs = SpanIDs()

    /// The longest path an access line shows: the rest is cut, so an unauthenticated 404 cannot write a log
    /// line as long as the request head.
    static var loggedPathLimit: Int { 256 }

    @concurrent func handle(
        _ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let start = ContinuousClock.now
        guard metrics.readsTraceContext, let header = request.headers.value(.traceparent),
            let trace = try? TraceContext(traceParentHeaderValue: header)
        else { return try await measure(request, context: context, since: start, next: next) }
        // This request is a span of the client's trace: the client's span is its parent. The ids are the client's
        // word: they link log lines, they prove nothing.
        let requestTrace = RequestTrace(
            span: TraceContext(traceID: trace.traceID, spanID: spanIDs.next(), flags: trace.flags, state: trace.state),
            parentSpanID: trace.spanID)
        var context = context
        if !tracesThroughProvider {
            // One write of the handler's metadata, not three: a StreamLogHandler formats all of it at each write.
            context.logger.handler.metadata.merge(requestTrace.metadata) { _, trace in trace }
        }
        var serviceContext = ServiceContext.current ?? .topLevel
        serviceContext.requestTrace = requestTrace
        // The access line is written inside, where the provider finds the trace.
        return try await ServiceContext.withValue(serviceContext) { [context] in
            try await measure(request, context: context, since: start, next: next)
        }
    }

    /// Runs the rest of the chain, then records the request's metrics and access line.
    func measure(
        _ request: Request, context: Context, since start: ContinuousClock.Instant,
        next: @concurrent (Request, Context) async throws -> Response
    ) async throws -> Response {
        let response: Response
        do {
            response = try await next(request, context)
        } catch {
            // ErrorMiddleware, inside this one, answers every error; should the order change, the status an
            // error carries is still the one recorded.
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            record(request, context: context, status: status, since: start)
            throw error
        }
        record(request, context: context, status: Int(response.status.code), since: start)
        return response
    }

    func record(_ request: Request, context: Context, status: Int, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        // The series' names are made only when metrics are on (off by default).
        if metrics.isEnabled {
            let method = countedMethods.contains(request.method) ? request.method.rawValue : "other"
            metrics.request(
                route: context.endpointPath ?? "NotFound", method: method, status: status, duration: elapsed)
        }
        let level: Logger.Level = accessLog ? .info : .debug
        guard context.logger.logLevel <= level else { return }
        let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        var path = request.uri.path
        if path.utf8.count > Self.loggedPathLimit {
            path = String(decoding: path.utf8.prefix(Self.loggedPathLimit), as: UTF8.self) + "…"
        }
        context.logger.log(
            level: level, "\(request.method) \(path) \(status)",
            metadata: ["duration_ms": .stringConvertible(milliseconds)])
    }
}

extension HTTPField.Name {
    /// W3C Trace Context's `traceparent` header.
    static let traceparent: HTTPField.Name = {
        guard let name = HTTPField.Name("traceparent") else { preconditionFailure("valid header name") }
        return name
    }()
}

/// The server's span ids: SplitMix64's output over a counter seeded once from the system's generator. Each id is a
/// bijection of a distinct counter value, so no two spans of a process share one (nor is one all zeros, which W3C
/// Trace Context refuses); 8 bytes drawn from the system for each request (a `getrandom` call) cost a microsecond. A
/// span id names a span in the logs: it is not a secret. Nor is it unpredictable (the mixing can be undone, so one id
/// gives the counter): never send the server's span ids back to a client (a `traceresponse`) without going back to
/// random ones.
final class SpanIDs: Sendable {
    let counter: Atomic<UInt64>

    init() {
        var system = SystemRandomNumberGenerator()
        counter = Atomic(system.next())
    }

    func next() -> SpanID {
        while true {
            var mixed = counter.wrappingAdd(0x9E37_79B9_7F4A_7C15, ordering: .relaxed).newValue
            mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
            mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
            mixed ^= mixed >> 31
            guard mixed != 0 else { continue }
            var value = Drawn(value: mixed)
            return SpanID.random(using: &value)
        }
    }

    /// A generator that gives one value drawn already: `SpanID.random(using:)` takes its 8 bytes from one `next()`.
    struct Drawn: RandomNumberGenerator {
        let value: UInt64
        func next() -> UInt64 { value }
    }
}

/// The trace a request belongs to: the server's span for it, and the client's span, its parent.
struct RequestTrace: Sendable {
    var span: TraceContext
    var parentSpanID: SpanID

    /// The ids as log metadata: `trace_id`, `span_id` and `parent_span_id`, in lower-case hex.
    var metadata: Logger.Metadata {
        [
            "trace_id": "\(span.traceID)", "span_id": "\(span.spanID)",
            "parent_span_id": "\(parentSpanID)",
        ]
    }
}

/// The request trace of the current request, in its `ServiceContext`.
enum RequestTraceKey: ServiceContextKey {
    typealias Value = RequestTrace
    static var nameOverride: String? { "baton-request-trace" }
}

extension ServiceContext {
    /// The trace of the request being served, when its client sent one.
    var requestTrace: RequestTrace? {
        get { self[RequestTraceKey.self] }
        set { self[RequestTraceKey.self] = newValue }
    }
}

extension Logger.MetadataProvider {
    /// The ids of the trace of the request being served, from its `ServiceContext`: nothing outside a request or
    /// when its client sent no trace. Read when a line is written, never per request.
    static let requestTrace = Logger.MetadataProvider {
        ServiceContext.current?.requestTrace?.metadata ?? [:]
    }
}
