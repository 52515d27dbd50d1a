import Foundation
import Logging
import ServiceLifecycle

/// Removes the bytes of photos no entity names any more (``BatonServer/sweepMedia()``) when it starts and then
/// every ``interval``, until the service group shuts down. `baton-server serve` runs it; every instance on one
/// PostgreSQL database may run it (a blob is deleted in the transaction that checks it is still unnamed and old).
public struct MediaSweep: Service {
    let server: BatonServer
    let logger: Logger
    /// How long between two sweeps. Default: one hour.
    public var interval: Duration

    public init(server: BatonServer, interval: Duration = .seconds(3_600), logger: Logger) {
        self.server = server
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        while !Task.isCancelledOrShuttingDown {
            do {
                let removed = try await server.sweepMedia()
                if removed > 0 { logger.info("unnamed photo bytes removed", metadata: ["count": "\(removed)"]) }
            } catch {
                logger.warning("media sweep failed", metadata: ["error": "\(type(of: error))"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
