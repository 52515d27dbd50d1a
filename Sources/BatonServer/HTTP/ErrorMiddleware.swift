import BatonOData
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Turns every error into a response, in one place: ``ServerError`` and Hummingbird's HTTP errors become
/// OData JSON error bodies, ``OAuthError`` becomes an RFC 6749 body, anything else a 500 that names the
/// request id and nothing more. No stack trace, SQL or secret reaches a client.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    @concurrent func handle(
        _ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch let error as ServerError {
            return Self.response(error)
        } catch let error as OAuthError {
            var headers: HTTPFields = [.contentType: "application/json", .cacheControl: "no-store"]
            if let retryAfter = error.retryAfter { headers[.retryAfter] = String(retryAfter) }
            if error.status == .unauthorized { headers[.wwwAuthenticate] = "Basic realm=\"baton\"" }
            let body = JSONValue.object([
                ("error", .string(error.error)), ("error_description", .string(error.description)),
            ])
            return Response(
                status: error.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body.serializedBytes))
            )
        } catch let error as any HTTPResponseError {
            let message: String =
                switch error.status {
                case .notFound:
                    "There is no resource at '\(request.uri.path)'. See /.well-known/baton-configuration for the routes."
                case .methodNotAllowed: "\(request.method) is not allowed on '\(request.uri.path)'."
                case .contentTooLarge:
                    "The request body is larger than the server accepts (\(context.maxUploadSize / 1024) KiB)."
                default: error.status.reasonPhrase
                }
            return Self.response(
                ServerError(error.status, error.status.reasonPhrase.replacingOccurrences(of: " ", with: ""), message))
        } catch let error as StorageError where error.kind == .unavailable {
            // Any route whose database is away: 503, so that the client retries and nginx tries another instance.
            return Self.response(.databaseUnavailable())
        } catch {
            context.logger.error("Unhandled error", metadata: ["error.type": "\(type(of: error))"])
            return Self.response(
                ServerError(
                    .internalServerError, "InternalError",
                    "The server failed to handle the request (request id \(context.id))."))
        }
    }

    static func response(_ error: ServerError) -> Response {
        var headers: HTTPFields = [.contentType: "application/json"]
        for (name, value) in error.headers { headers[name] = value }
        var members: [(String, JSONValue)] = [("code", .string(error.code)), ("message", .string(error.message))]
        if let target = error.target { members.append(("target", .string(target))) }
        let body = JSONValue.object([("error", .object(members))])
        return Response(
            status: error.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body.serializedBytes)))
    }
}
