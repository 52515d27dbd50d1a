import BatonOData
import HTTPTypes
import Hummingbird

/// Requires a valid Bearer access token (RFC 6750) and records its claims in the context; answers 401 with
/// `WWW-Authenticate` otherwise. Checks the app version against the inactive list too.
struct BearerAuthenticationMiddleware: RouterMiddleware {
    typealias Context = BatonRequestContext
    let tokens: TokenService
    let settings: SettingsStore

    @concurrent func handle(
        _ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response
    ) async throws
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
        if let scope = Self.requiredScope(request.uri.path), !verified.claims.grants(scope) {
            var error = ServerError(
                .forbidden, "InsufficientScope", "This access token was not granted the '\(scope)' scope this needs.")
            error.headers = [
                (.wwwAuthenticate, "Bearer realm=\"baton\", error=\"insufficient_scope\", scope=\"\(scope)\"")
            ]
            throw error
        }
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

extension BearerAuthenticationMiddleware {
    /// The OAuth scope a protected path needs (RFC 6750 §3.1): `odata` for the data service, `settings` for the
    /// settings exchange, `devices` for device registration, store keys and backups; none for `/me`. Anything
    /// else behind a token counts as data, so a path spelled another way never needs less.
    static func requiredScope(_ path: String) -> String? {
        if path == "/me" { return nil }
        if path == "/settings" { return "settings" }
        if path.hasPrefix("/devices/") { return "devices" }
        return "odata"
    }
}

extension HTTPField.Name {
    /// `Baton-App-Version`: the client's app version, checked against `BatonOData/SettingsDocument/AppVersions`.
    static let batonAppVersion: HTTPField.Name = {
        guard let name = HTTPField.Name("Baton-App-Version") else { preconditionFailure("valid header name") }
        return name
    }()
}
