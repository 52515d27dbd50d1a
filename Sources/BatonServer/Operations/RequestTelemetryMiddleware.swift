import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Tracing
import W3CTraceContext

/// What the server records of every request, in one pass: the W3C trace context the client sent (`traceparent`,
/// put in the request's logger metadata and in its `ServiceContext`), the metrics (count and duration by route,
/// method and status), and the access log line (method, path — never the query, which may carry codes —,
/// status and duration): at `info` when ``BatonServerConfiguration/accessLog`` is on, else at `debug`.
struct RequestTelemetryMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics
    let accessLog: Bool

    static var methods: Set<HTTPRequest.Method> { [.get, .head, .post, .put, .patch, .delete, .options] }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        let start = ContinuousClock.now
        var context = context
        var serviceContext = ServiceContext.current ?? .topLevel
        if metrics.isEnabled, let header = request.headers[.traceparent],
            let trace = try? TraceContext(traceParentHeaderValue: header)
        {
            // This request is a span of the client's trace: the client's span is its parent.
            let span = TraceContext(traceID: trace.traceID, spanID: .random(), flags: trace.flags, state: trace.state)
            context.logger[metadataKey: "trace_id"] = "\(trace.traceID)"
            context.logger[metadataKey: "span_id"] = "\(span.spanID)"
            context.logger[metadataKey: "parent_span_id"] = "\(trace.spanID)"
            serviceContext.traceContext = span
        }
        let response: Response
        do {
            response = try await ServiceContext.withValue(serviceContext) { try await next(request, context) }
        } catch {
            record(request, context: context, status: 500, since: start)
            throw error
        }
        record(request, context: context, status: Int(response.status.code), since: start)
        return response
    }

    func record(_ request: Request, context: Context, status: Int, since start: ContinuousClock.Instant) {
        let elapsed = ContinuousClock.now - start
        let method = Self.methods.contains(request.method) ? request.method.rawValue : "other"
        metrics.request(
            route: context.endpointPath ?? "NotFound", method: method, status: status, duration: elapsed)
        let milliseconds = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        context.logger.log(
            level: accessLog ? .info : .debug, "\(request.method) \(request.uri.path) \(status)",
            metadata: ["duration_ms": "\(milliseconds)"])
    }
}

extension HTTPField.Name {
    /// W3C Trace Context's `traceparent` header.
    static let traceparent: HTTPField.Name = {
        guard let name = HTTPField.Name("traceparent") else { preconditionFailure("valid header name") }
        return name
    }()
}

/// The W3C trace context of the current request, in its `ServiceContext`.
enum TraceContextKey: ServiceContextKey {
    typealias Value = TraceContext
    static var nameOverride: String? { "w3c-trace-context" }
}

extension ServiceContext {
    /// The W3C trace context of the request being served, when its client sent one.
    var traceContext: TraceContext? {
        get { self[TraceContextKey.self] }
        set { self[TraceContextKey.self] = newValue }
    }
}
