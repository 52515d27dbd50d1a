import BatonClient
import Synchronization

/// A transport in front of a real one that can lose answers: with ``loseNextResponses(matching:count:)``
/// the request reaches the server, but the client is told the connection dropped — what a server crash or a
/// network fault after the server applied a change looks like to the device.
public final class FaultyTransport: HTTPTransport {
    let inner: any HTTPTransport
    let faults = Mutex<[(matching: String, remaining: Int)]>([])

    public init(_ inner: any HTTPTransport) { self.inner = inner }

    /// Loses the answers of the next `count` requests whose URL contains `matching`.
    public func loseNextResponses(matching: String, count: Int = 1) {
        faults.withLock { $0.append((matching, count)) }
    }

    public func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
        let response = try await inner.send(request)
        let lose = faults.withLock { faults -> Bool in
            guard let index = faults.firstIndex(where: { request.url.absoluteString.contains($0.matching) }) else {
                return false
            }
            faults[index].remaining -= 1
            if faults[index].remaining == 0 { faults.remove(at: index) }
            return true
        }
        if lose { throw BatonClientError(.unreachable, "The connection dropped before the answer arrived.") }
        return response
    }
}
