import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Tracing
import W3CTraceContext

/// The methods the metrics name; any other is counted as `other`.
private let countedMethods: Set<HTTPRequest.Method> = [.get, .head, .post, .put, .patch, .delete, .options]

/// What the server records of every request, in one pass: the W3C trace context the client sent (`traceparent`,
/// put in the request's logger metadata and in its `ServiceContext`), the metrics (count and duration by route,
/// method and status), and the access log line (method, path — never the query, which may carry codes —,
/// status and duration): at `info` when ``BatonServerConfiguration/accessLog`` is on, else at `debug`.
struct RequestTelemetryMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: ServerMetrics
    let accessLog: Bool

    /// The longest path an access line shows: the rest is cut, so an unauthenticated 404 cannot write a log
    /// line as long as the request head.
    static var loggedPathLimit: Int { 256 }

    @concurrent func handle(
        _ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        let start = ContinuousClock.now
        // The trace's ids go into this copy's logger: the access line below is written with them.
        var context = context
        let response: Response
        do {
            if metrics.readsTraceContext, let header = request.headers[.traceparent],
                let trace = try? TraceContext(traceParentHeaderValue: header)
            {
                // This request is a span of the client's trace: the client's span is its parent. The ids are
                // the client's word: they link log lines, they prove nothing.
                let span = TraceContext(
                    traceID: trace.traceID, spanID: .random(), flags: trace.flags, state: trace.state)
                // One write of the handler's metadata, not three: swift-log's StreamLogHandler (the server's text
                // format) formats all of it again at each write, a tenth of a key read for three.
                var metadata = context.logger.handler.metadata
                metadata["trace_id"] = "\(trace.traceID)"
                metadata["span_id"] = "\(span.spanID)"
                metadata["parent_span_id"] = "\(trace.spanID)"
                context.logger.handler.metadata = metadata
                var serviceContext = ServiceContext.current ?? .topLevel
                serviceContext.traceContext = span
                response = try await ServiceContext.withValue(serviceContext) { try await next(request, context) }
            } else {
                response = try await next(request, context)
            }
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
