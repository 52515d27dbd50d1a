import Foundation

/// An HTTP request as the SDK sends it: absolute URL, headers in order, body bytes.
public struct ClientRequest: Sendable {
    public var method: String
    public var url: URL
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// How long the whole exchange may take.
    public var timeout: Duration

    public init(
        method: String = "GET", url: URL, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
        timeout: Duration = .seconds(30)
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }

    /// The first value of a header (names compare case-insensitively).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// An HTTP response: status, headers, the whole body.
public struct ClientResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first value of a header (names compare case-insensitively).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// Sends HTTP requests. ``AsyncHTTPClientTransport`` talks to a real server; tests and apps can put their own
/// in front (to cut the network, count requests, inject faults).
public protocol HTTPTransport: Sendable {
    /// Sends `request` and returns the response, whatever its status.
    ///
    /// - Throws: ``BatonClientError`` with code `Unreachable` when no response arrived (no route, refused,
    ///   timed out, connection dropped).
    func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse
}
