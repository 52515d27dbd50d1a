import BatonServer
import BatonTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Synchronization

/// A clock tests move by hand.
final class TestClock: Sendable {
    let current = Mutex(Date(timeIntervalSince1970: 1_795_000_000))

    var serverClock: ServerClock { ServerClock { self.current.withLock { $0 } } }

    func advance(by seconds: TimeInterval) { current.withLock { $0 += seconds } }
}

/// A server over a fresh temporary data directory, with a test clock and cheap bcrypt.
struct TestServer {
    let server: BatonServer
    let clock: TestClock
    let directory: URL

    static let issuer = "http://127.0.0.1:8080"

    /// Where the server keeps its state.
    let backend: StorageBackend

    init(
        backend: StorageBackend = .sqlite, logger: Logger? = nil,
        configure: (inout BatonServerConfiguration) -> Void = { _ in }
    ) async throws {
        self.backend = backend
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-server-\(UUID().uuidString)")
        clock = TestClock()
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = directory
        configuration.clock = clock.serverClock
        configuration.bcryptCost = 4
        configuration.port = 0
        configuration.fixedIssuer = true
        if let database = try await backend.freshDatabase() {
            // PostgreSQL takes the master key from a file only, as every instance must share it.
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let file = directory.appendingPathComponent("master.key")
            try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: file)
            configuration.database = database
            // Every test server keeps its pool open: a few connections each, for many servers on one cluster.
            configuration.databaseConnections = 4
            configuration.masterKeyFile = file
        }
        configure(&configuration)
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        server = try await BatonServer(configuration: configuration, logger: logger ?? quiet)
    }

    /// The master-key file (PostgreSQL backends have one in the data directory).
    var masterKeyFile: URL? { server.configuration.masterKeyFile }

    /// Closes the server's databases and deletes its data directory.
    func remove() {
        server.close()
        try? FileManager.default.removeItem(at: directory)
    }
}

extension TestServer {
    /// Runs `body` against the server's application in process.
    func test<Value: Sendable>(_ body: @Sendable (any TestClientProtocol) async throws -> Value) async throws -> Value {
        try await server.application().test(.router, body)
    }

    /// Adds a user with a valid password.
    @discardableResult
    func addUser(_ name: String, password: String = "correct-horse-battery") async throws -> User {
        try await server.users.add(name: name, displayName: nil, role: .groundStaff, password: password)
    }
}

/// Form-encodes parameters.
func formBody(_ parameters: [(String, String)]) -> ByteBuffer {
    var allowed = CharacterSet.alphanumerics
    allowed.insert(charactersIn: "-._~")
    let text = parameters.map {
        "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")"
    }.joined(separator: "&")
    return ByteBuffer(string: text)
}

let formHeaders: HTTPFields = [.contentType: "application/x-www-form-urlencoded"]

extension TestClientProtocol {
    /// POSTs a form to the token endpoint and returns the status and JSON body.
    func token(_ parameters: [(String, String)]) async throws -> (HTTPResponse.Status, [String: Any]) {
        try await execute(uri: "/oauth/token", method: .post, headers: formHeaders, body: formBody(parameters)) {
            response in
            (response.status, Self.object(response.body))
        }
    }

    /// Signs in with the password grant as the device client.
    func signIn(_ user: String, password: String = "correct-horse-battery") async throws -> (
        access: String, refresh: String
    ) {
        let (status, body) = try await token([
            ("grant_type", "password"), ("client_id", "baton-device"), ("username", user), ("password", password),
        ])
        guard status == .ok, let access = body["access_token"] as? String,
            let refresh = body["refresh_token"] as? String
        else {
            throw TestFailure("sign-in failed: \(status) \(body)")
        }
        return (access, refresh)
    }

    /// GETs with a bearer token.
    func get(_ uri: String, token: String?, headers: HTTPFields = [:]) async throws -> (
        HTTPResponse.Status, [String: Any], HTTPFields
    ) {
        var headers = headers
        if let token { headers[.authorization] = "Bearer \(token)" }
        return try await execute(uri: uri, method: .get, headers: headers) { response in
            (response.status, Self.object(response.body), response.headers)
        }
    }

    static func object(_ body: ByteBuffer?) -> [String: Any] {
        guard let body, let json = try? JSONSerialization.jsonObject(with: Data(buffer: body)) as? [String: Any] else {
            return [:]
        }
        return json
    }
}

struct TestFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
