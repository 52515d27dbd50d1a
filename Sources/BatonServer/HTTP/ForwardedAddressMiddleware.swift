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
    ///
    /// Split at each `,` byte and trimmed of spaces and tabs by byte: split by `Character`, a mark the client ends
    /// its part with (U+0600 joins what follows it) glued the proxy's `,` to it, the list read as one malformed
    /// entry, and the request was taken as the proxy's own — throttled and audited under the proxy's address.
    static func client(in header: String, trusted: Set<String>) -> String? {
        let hops = header.utf8.split(separator: UInt8(ascii: ","), omittingEmptySubsequences: false).map { hop in
            var hop = hop
            while let first = hop.first, first == UInt8(ascii: " ") || first == UInt8(ascii: "\t") {
                hop = hop.dropFirst()
            }
            while let last = hop.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { hop = hop.dropLast() }
            return hop
        }
        guard let hop = hops.last(where: { !trusted.contains(String(decoding: $0, as: UTF8.self)) }),
            (2...45).contains(hop.count), hop.allSatisfy(Self.isAddressByte)
        else { return nil }
        return String(decoding: hop, as: UTF8.self)
    }

    /// A byte of an IPv4 or IPv6 address's text: a hexadecimal digit, `.` or `:`.
    static func isAddressByte(_ byte: UInt8) -> Bool {
        byte &- UInt8(ascii: "0") < 10 || (byte | 0x20) &- UInt8(ascii: "a") < 6 || byte == UInt8(ascii: ".")
            || byte == UInt8(ascii: ":")
    }
}

extension HTTPField.Name {
    static let xForwardedFor: HTTPField.Name = {
        guard let name = HTTPField.Name("X-Forwarded-For") else { preconditionFailure("valid header name") }
        return name
    }()
}
