import AircraftChecks
import BatonClient
import BatonOData
import BatonTestSupport
import BatonTesting
import Foundation
import Synchronization
import Testing

/// The client's typed reads follow the server's pages, and only inside the server's own OData service: a page
/// whose `@odata.nextLink` points elsewhere (tampered on the way, or a compromised proxy) gets no request, so the
/// user's token goes nowhere else.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct TypedReadTests {
    /// Forwards to the real transport; rewrites the answers to reads of `PreflightChecks` to carry `link`, and
    /// records every URL requested.
    final class Tampering: HTTPTransport {
        let real = AsyncHTTPClientTransport()
        let link: String
        let requested = Mutex<[String]>([])
        init(link: String) { self.link = link }

        func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
            requested.withLock { $0.append(request.url.absoluteString) }
            var response = try await real.send(request)
            if request.method == "GET", request.url.path.hasSuffix("/odata/PreflightChecks") {
                let page = (try? JSONValue(parsing: response.body).objectMembers) ?? []
                response.body = JSONValue.object(page + [("@odata.nextLink", .string(link))]).serializedBytes
            }
            return response
        }
    }

    /// Alice, signed in at `server` through `transport`.
    static func signIn(_ server: LiveServer, through transport: Tampering) async throws -> AuthorizedSession {
        try await server.addUser("alice", displayName: "Alice Adler", password: "blue-harbour-1234")
        let client = BatonClient(serverURL: server.url, transport: transport, appVersion: "1.0")
        let (configuration, metadata) = try await client.discover()
        let oauth = OAuthClient(metadata: metadata, clientID: configuration.clientID, transport: transport)
        return AuthorizedSession(
            client: client, configuration: configuration, oauth: oauth,
            tokens: try await oauth.signIn(username: "alice", password: "blue-harbour-1234"))
    }

    @Test(arguments: [
        "https://evil.example/odata/PreflightChecks", "http://127.0.0.1:9/odata/PreflightChecks",
        "https://127.0.0.1@evil.example/odata/PreflightChecks",
    ])
    func aNextLinkOutsideTheServiceGetsNoRequest(link: String) async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        let transport = Tampering(link: link)
        let session = try await Self.signIn(server, through: transport)
        let refused = await #expect(throws: BatonClientError.self) {
            try await session.entities(PreflightCheck.self)
        }
        #expect(refused?.code == .invalidResponse)
        #expect(transport.requested.withLock { $0.allSatisfy { $0.hasPrefix(server.url.absoluteString) } })
        #expect(transport.requested.withLock { $0.filter { $0.contains("PreflightChecks") }.count } == 1)
    }

    @Test func aNextLinkThatLoopsEndsWithAnError() async throws {
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        let session = try await Self.signIn(server, through: Tampering(link: "PreflightChecks"))
        let refused = await #expect(throws: BatonClientError.self) {
            try await session.entities(PreflightCheck.self)
        }
        #expect(refused?.message.contains("loop") == true)
    }
}
