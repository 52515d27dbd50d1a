import BatonServer
import Foundation
import Logging
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

    init(configure: (inout BatonServerConfiguration) -> Void = { _ in }) async throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-server-\(UUID().uuidString)")
        clock = TestClock()
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = directory
        configuration.clock = clock.serverClock
        configuration.bcryptCost = 4
        configuration.port = 0
        configuration.fixedIssuer = true
        configure(&configuration)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        server = try await BatonServer(configuration: configuration, logger: logger)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}
