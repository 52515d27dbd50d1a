import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// The real transport: async-http-client's shared client, with the request's timeout as its deadline.
public struct AsyncHTTPClientTransport: HTTPTransport {
    let client: HTTPClient
    /// The largest response body accepted.
    public var maximumResponseSize = 64 * 1024 * 1024

    /// A transport on Baton's process-wide client: connection attempts are not retried (a refused or
    /// unreachable server is reported at once, so the app goes offline without waiting), connecting times
    /// out after 5 seconds.
    public init() { client = Self.shared }

    static let shared: HTTPClient = {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        configuration.timeout.connect = .seconds(5)
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }()

    /// A transport on a client the caller owns (and shuts down).
    public init(client: HTTPClient) { self.client = client }

    public func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
        var outgoing = HTTPClientRequest(url: request.url.absoluteString)
        outgoing.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers { outgoing.headers.add(name: name, value: value) }
        if !request.body.isEmpty { outgoing.body = .bytes(ByteBuffer(bytes: request.body)) }
        let seconds = Int64(request.timeout.components.seconds)
        let timeout = TimeAmount.seconds(max(1, seconds))
        let response: HTTPClientResponse
        do {
            response = try await client.execute(outgoing, timeout: timeout)
        } catch {
            throw BatonClientError(
                .unreachable,
                "The server at \(request.url.host ?? "?") cannot be reached (\(Self.reason(error))); work goes on offline."
            )
        }
        do {
            let body = try await response.body.collect(upTo: maximumResponseSize)
            return ClientResponse(
                status: Int(response.status.code), headers: response.headers.map { ($0.name, $0.value) },
                body: Array(buffer: body))
        } catch is NIOTooManyBytesError {
            throw BatonClientError(
                .invalidResponse, "The server's answer is larger than \(maximumResponseSize / 1_048_576) MiB.")
        } catch {
            throw BatonClientError(
                .unreachable,
                "The server at \(request.url.host ?? "?") cannot be reached (\(Self.reason(error))); work goes on offline."
            )
        }
    }

    /// A short, secret-free reason for a transport failure.
    static func reason(_ error: any Error) -> String {
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .deadlineExceeded, .readTimeout: return "timed out"
            case .remoteConnectionClosed: return "connection closed"
            default: return "connection failed"
            }
        }
        return "connection failed"
    }
}
