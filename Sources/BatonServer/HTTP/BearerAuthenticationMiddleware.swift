import HTTPTypes
import Hummingbird

/// Requires a valid Bearer access token (RFC 6750) and records its claims in the context; answers 401 with
/// `WWW-Authenticate` otherwise. Checks the app version against the inactive list too.
struct BearerAuthenticationMiddleware: RouterMiddleware {
    typealias Context = BatonRequestContext
    let tokens: TokenService
    let settings: SettingsStore

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws
        -> Response
    {
        guard let header = request.headers[.authorization] else {
            throw ServerError.unauthorized(
                "This resource needs an access token: send 'Authorization: Bearer <token>'.", error: nil)
        }
        let parts = header.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer", !parts[1].isEmpty else {
            throw ServerError.unauthorized(
                "The Authorization header must be 'Bearer <token>'.", error: "invalid_request")
        }
        var context = context
        let verified = try await tokens.verifyAccessToken(String(parts[1]))
        context.claims = verified.claims
        context.role = verified.role
        if let version = request.headers[.batonAppVersion] {
            let inactive = try await settings.current().appVersions.inactive
            if inactive.contains(version) {
                throw ServerError(
                    .forbidden, "AppVersionInactive",
                    "App version \(version.prefix(32)) is no longer allowed on this server. Update the app.")
            }
        }
        return try await next(request, context)
    }
}

extension HTTPField.Name {
    /// `Baton-App-Version`: the client's app version, checked against ``ServerSettings/AppVersions``.
    static let batonAppVersion: HTTPField.Name = {
        guard let name = HTTPField.Name("Baton-App-Version") else { preconditionFailure("valid header name") }
        return name
    }()
}
