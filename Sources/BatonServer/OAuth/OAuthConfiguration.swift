import Foundation

/// How the authorization server issues tokens.
public struct OAuthConfiguration: Sendable {
    /// The issuer URL (`iss`), which is also the base of every endpoint URL in the metadata. Default:
    /// `http://127.0.0.1:8080`; `serve` sets it to the address it listens on.
    public var issuer = "http://127.0.0.1:8080"
    /// The audience of access tokens. Default: `baton`.
    public var audience = "baton"
    /// Access-token lifetime in seconds; at most 900. Default: 900.
    public var accessTokenLifetime: TimeInterval = 900
    /// Refresh-token lifetime in seconds. Default: 30 days, so a shared device can stay offline for a shift
    /// rotation.
    public var refreshTokenLifetime: TimeInterval = 30 * 86_400
    /// Authorization-code lifetime in seconds. Default: 60.
    public var authorizationCodeLifetime: TimeInterval = 60
    /// The scopes a client may ask for; all of them are granted when none is asked. Default:
    /// `odata settings devices`.
    public var scopes: [String] = ["odata", "settings", "devices"]
    /// The registered clients. Default: ``OAuthClient/device``, ``OAuthClient/web`` and ``OAuthClient/cockpit``.
    public var clients: [OAuthClient] = [.device, .web, .cockpit]
    /// Sign-in throttling limits.
    var throttle = LoginThrottle.Limits()
    /// How many sign-in codes for a browser elsewhere (RFC 8628) may wait at once. Default: 50 per address (an
    /// IPv6 /64 as one), 100,000 in all.
    public var deviceCodes = DeviceCodeLimits()

    /// The defaults.
    public init() {}

    func client(_ id: String?) -> OAuthClient? { clients.first { $0.id == id } }
}
