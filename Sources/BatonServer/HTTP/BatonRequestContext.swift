import Hummingbird
import Logging
import NIOCore

/// The per-request context: Hummingbird's core storage, the client address, and the signed-in user once
/// authenticated.
public struct BatonRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The client's address, when the request came over a socket.
    public let remoteAddress: SocketAddress?
    /// The client's address as a trusted load balancer reported it (``ForwardedAddressMiddleware``).
    var forwardedAddress: String?
    /// The authenticated user's token, set by ``BearerAuthenticationMiddleware``: one reference, so the context's
    /// copies through the middleware do not copy the claims' strings.
    var token: VerifiedToken?
    /// The authenticated user's claims.
    var claims: AccessTokenClaims? { token?.claims }
    /// The authenticated user's current role, read with the token checks.
    var role: User.Role?
    /// The device that signed this request with its own key (``DeviceProofMiddleware``).
    var provenDevice: String?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }

    /// Request bodies are small JSON or form documents: 64 KiB is plenty. Larger bodies get 413.
    public var maxUploadSize: Int { 64 * 1024 }

    /// The client address as text, for throttling and the audit log.
    var clientAddress: String { Self.clientAddress(forwarded: forwardedAddress, remote: remoteAddress) }

    /// The client's address as text: the load balancer's word when it gave one, else the socket's peer, else
    /// `local` (a request that came over no socket). The data service's context writes it out the same way, later.
    static func clientAddress(forwarded: String?, remote: SocketAddress?) -> String {
        forwarded ?? remote?.ipAddress ?? "local"
    }

    /// The signed-in user's name.
    func userName() throws(ServerError) -> String {
        guard let claims else { throw ServerError.unauthorized("Sign in first.", error: nil) }
        return claims.sub.value
    }
}
