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
        guard let header = request.headers.value(.authorization) else {
            throw ServerError.unauthorized(
                "This resource needs an access token: send 'Authorization: Bearer <token>'.", error: nil)
        }
        guard let token = Self.bearerToken(header) else {
            throw ServerError.unauthorized(
                "The Authorization header must be 'Bearer <token>'.", error: "invalid_request")
        }
        var context = context
        let verified = try await tokens.verifyAccessToken(token)
        if let scope = Self.requiredScope(request.uri.path), !verified.token.claims.grants(scope) {
            var error = ServerError(
                .forbidden, "InsufficientScope", "This access token was not granted the '\(scope)' scope this needs.")
            error.headers = [
                (.wwwAuthenticate, "Bearer realm=\"baton\", error=\"insufficient_scope\", scope=\"\(scope)\"")
            ]
            throw error
        }
        context.token = verified.token
        context.role = verified.role
        if let version = request.headers.value(.batonAppVersion) {
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
    /// The token of an `Authorization` value `Bearer <token>`, split by byte at the first space: the scheme compared
    /// with only ASCII letters folded (RFC 9110 §11.1: a scheme is a case-insensitive token), the rest the token;
    /// `nil` when the value has no scheme, another scheme or no token. Split by `Character`, a combining mark after
    /// the space joined it to the token's first character and hid the space.
    static func bearerToken(_ value: String) -> String? {
        let bytes = value.utf8
        guard let space = bytes.firstIndex(of: UInt8(ascii: " ")),
            HeaderScanner.sameName(String(decoding: bytes[..<space], as: UTF8.self), "Bearer")
        else { return nil }
        let token = bytes[bytes.index(after: space)...]
        guard !token.isEmpty else { return nil }
        return String(decoding: token, as: UTF8.self)
    }

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
