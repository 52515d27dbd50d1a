import HTTPTypes
import Hummingbird

/// Takes the client's address from `X-Forwarded-For` — only when the connection comes from a configured load
/// balancer (``BatonServerConfiguration/trustedProxies``). From anyone else the header is ignored, so a client
/// cannot pick the address it is throttled and audited under.
///
/// The first middleware: the rest of the request runs preferring the event loop it arrived on
/// (``EventLoopTaskExecutor``).
struct ForwardedAddressMiddleware: RouterMiddleware {
    typealias Context = BatonRequestContext
    let trustedProxies: Set<String>

    @concurrent func handle(
        _ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        // The peer's address is written out only when a load balancer could have sent the request.
        guard !trustedProxies.isEmpty, let peer = context.remoteAddress?.ipAddress, trustedProxies.contains(peer),
            let header = request.headers[values: .xForwardedFor].last
        else {
            return try await EventLoopTaskExecutor.onCurrentLoop { try await next(request, context) }
        }
        var forwarded = context
        forwarded.forwardedAddress = Self.client(in: header, trusted: trustedProxies)
        return try await EventLoopTaskExecutor.onCurrentLoop { [forwarded] in try await next(request, forwarded) }
    }

    /// The right-most address in an `X-Forwarded-For` list that is not a trusted proxy (the left part is
    /// whatever the client sent), when it looks like an IP address.
    static func client(in header: String, trusted: Set<String>) -> String? {
        let hops = header.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard let hop = hops.last(where: { !trusted.contains($0) }), (2...45).contains(hop.count),
            hop.unicodeScalars.allSatisfy({ $0.properties.isASCIIHexDigit || $0 == "." || $0 == ":" })
        else { return nil }
        return hop
    }
}

extension HTTPField.Name {
    static let xForwardedFor: HTTPField.Name = {
        guard let name = HTTPField.Name("X-Forwarded-For") else { preconditionFailure("valid header name") }
        return name
    }()
}
