import W3CTraceContext

/// The W3C trace that the requests of one operation (a sync, a sign-in) belong to.
///
/// Inside ``run(_:)`` every request ``BatonClient`` sends carries a `traceparent` header with the operation's trace
/// id and a span id of its own, so that an operator can find a device's sync in the server's logs: the server logs
/// `trace_id` with every line about the request.
public enum RequestTrace {
    /// The trace of the operation being run, if any.
    @TaskLocal public static var current: TraceContext?

    /// Runs `body` as one new trace, whose id (32 lowercase hex digits) it also receives.
    public static func run<T: Sendable>(_ body: (String) async -> T) async -> T {
        let trace = TraceContext(traceID: .random(), spanID: .random(), flags: .sampled, state: TraceState())
        return await $current.withValue(trace) { await body("\(trace.traceID)") }
    }

    /// Runs `body` in the current trace, or in a new one when there is none.
    public static func continuing<T: Sendable>(_ body: (String) async -> T) async -> T {
        if let trace = current { return await body("\(trace.traceID)") }
        return await run(body)
    }

    /// The `traceparent` value for one more request of the current trace: nil outside ``run(_:)``.
    static func nextParentHeader() -> String? {
        guard let trace = current else { return nil }
        return TraceContext(traceID: trace.traceID, spanID: .random(), flags: trace.flags, state: TraceState())
            .traceParentHeaderValue
    }
}
