import Foundation
import Hummingbird
import Logging

/// Logs one line per request: method, path (never the query, which may carry codes), status and duration,
/// with Hummingbird's request id in the metadata.
struct RequestLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        let start = ContinuousClock.now
        let response = try await next(request, context)
        let elapsed = ContinuousClock.now - start
        context.logger.info(
            "\(request.method) \(request.uri.path) \(response.status.code)",
            metadata: [
                "duration_ms":
                    "\(elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)"
            ])
        return response
    }
}
