import BatonOData
import BatonTestSupport
import BatonTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import NIOCore
import Testing

@testable import BatonServer

enum Fixtures {
    static let aircraft = #"{"TailNumber":"D-AIBL","Type":"A320","Station":"FRA","Status":"ready"}"#
    static func check(_ id: String, fuel: String = "5200.5", tail: String = "D-AIBL", extra: String = "") -> String {
        #"{"ID":"\#(id)","TailNumber":"\#(tail)","FuelKg":\#(fuel),"TyrePressureMainPsi":200.5,"TyrePressureNosePsi":58,"OilQuarts":12.25,"Status":"final"\#(extra)}"#
    }
    static func id(_ n: Int) -> String { String(format: "00000000-0000-4000-8000-%012d", n) }

    /// A server of `model` with sam (supervisor) signed in.
    static func supervisor(
        on model: ServiceModel, backend: StorageBackend = .sqlite,
        _ body: @Sendable (TestServer, any TestClientProtocol, String) async throws -> Void
    ) async throws {
        let server = try await TestServer(backend: backend) { $0.dataService.model = model }
        defer { server.remove() }
        try await server.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        try await server.test { client in
            try await body(server, client, try await client.signIn("sam").access)
        }
    }

    /// A server with alice (ground staff) and sam (supervisor) signed in and one aircraft.
    static func world(
        backend: StorageBackend = .sqlite,
        _ body: @Sendable (TestServer, any TestClientProtocol, String, String) async throws -> Void
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        try await server.test { client in
            let alice = try await client.signIn("alice").access
            let sam = try await client.signIn("sam").access
            let created = try await client.odata(.post, "Aircraft", token: sam, body: aircraft)
            #expect(created.status == .created)
            try await body(server, client, alice, sam)
        }
    }
}
