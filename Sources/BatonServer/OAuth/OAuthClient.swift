import Foundation

/// A client application allowed to obtain tokens.
public struct OAuthClient: Sendable, Hashable {
    /// The `client_id`.
    public var id: String
    /// The grant types it may use.
    public var grants: Set<String>
    /// Redirect URIs it may use with the authorization code grant.
    public var redirectURIs: [String]
    /// Whether any `http://127.0.0.1:PORT/…` or `http://localhost:PORT/…` redirect is allowed (RFC 8252 §7.3,
    /// native and command-line clients).
    public var allowsLoopbackRedirects: Bool
    /// Redirect paths on this server itself: each allows the issuer's URL followed by the path.
    public var issuerRedirectPaths: [String]

    /// Creates a client.
    public init(
        id: String, grants: Set<String>, redirectURIs: [String] = [], allowsLoopbackRedirects: Bool = false,
        issuerRedirectPaths: [String] = []
    ) {
        self.id = id
        self.grants = grants
        self.redirectURIs = redirectURIs
        self.allowsLoopbackRedirects = allowsLoopbackRedirects
        self.issuerRedirectPaths = issuerRedirectPaths
    }

    /// The admin cockpit (`/admin/`), served by the server itself: the authorization code with PKCE, redirected
    /// only to the server's own `/admin/callback`; it is given no tokens (the cockpit keeps a session instead).
    public static let cockpit = OAuthClient(
        id: "baton-cockpit", grants: ["authorization_code"], issuerRedirectPaths: ["/admin/callback"])

    /// The first-party device app: password, device-authorization (RFC 8628) and refresh-token grants.
    public static let device = OAuthClient(
        id: "baton-device", grants: ["password", "refresh_token", "urn:ietf:params:oauth:grant-type:device_code"])

    /// Browser and native clients: authorization code with PKCE, refresh tokens, loopback redirects.
    public static let web = OAuthClient(
        id: "baton-web", grants: ["authorization_code", "refresh_token"], allowsLoopbackRedirects: true)

    /// Whether `uri` is a redirect URI this client may use: a registered one byte for byte (`==` takes a Kelvin sign
    /// for a `K`, so another URI than the one registered would get the code).
    func accepts(redirectURI uri: String, issuer: String) -> Bool {
        if redirectURIs.contains(where: { $0.hasSameBytes(as: uri) })
            || issuerRedirectPaths.contains(where: { (issuer + $0).hasSameBytes(as: uri) })
        {
            return true
        }
        guard allowsLoopbackRedirects, let components = URLComponents(string: uri), components.scheme == "http",
            components.host == "127.0.0.1" || components.host == "localhost" || components.host == "[::1]",
            components.fragment == nil, components.user == nil
        else { return false }
        return true
    }
}
