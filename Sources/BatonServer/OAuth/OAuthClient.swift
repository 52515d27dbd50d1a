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

    /// Creates a client.
    public init(id: String, grants: Set<String>, redirectURIs: [String] = [], allowsLoopbackRedirects: Bool = false) {
        self.id = id
        self.grants = grants
        self.redirectURIs = redirectURIs
        self.allowsLoopbackRedirects = allowsLoopbackRedirects
    }

    /// The first-party device app: password and refresh-token grants.
    public static let device = OAuthClient(id: "baton-device", grants: ["password", "refresh_token"])

    /// Browser and native clients: authorization code with PKCE, refresh tokens, loopback redirects.
    public static let web = OAuthClient(
        id: "baton-web", grants: ["authorization_code", "refresh_token"], allowsLoopbackRedirects: true)

    /// Whether `uri` is a redirect URI this client may use.
    func accepts(redirectURI uri: String) -> Bool {
        if redirectURIs.contains(uri) { return true }
        guard allowsLoopbackRedirects, let components = URLComponents(string: uri), components.scheme == "http",
            components.host == "127.0.0.1" || components.host == "localhost" || components.host == "[::1]",
            components.fragment == nil, components.user == nil
        else { return false }
        return true
    }
}
