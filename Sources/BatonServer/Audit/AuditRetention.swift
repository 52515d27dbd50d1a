import Foundation
import Logging
import ServiceLifecycle

/// Keeps the audit log within its retention: prunes what the setting `audit.retention-days` (default 400) no
/// longer keeps when it starts and then every ``interval`` (``AuditLog/prune(settings:now:actor:)``), until the
/// service group shuts down. `baton-server serve` runs it; every instance on one PostgreSQL database may run it
/// (a prune deletes what is older than the cutoff, whoever gets there first).
public struct AuditRetention: Service {
    let audit: AuditLog
    let settings: SettingsStore
    let clock: ServerClock
    let logger: Logger
    /// How long between two prunes. Default: one hour.
    public var interval: Duration

    /// The retention of `server`'s audit log, pruned every `interval`.
    public init(server: BatonServer, interval: Duration = .seconds(3_600), logger: Logger) {
        audit = server.audit
        settings = server.settings
        clock = server.clock
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        while !Task.isCancelledOrShuttingDown {
            do {
                let deleted = try await audit.prune(settings: settings, now: clock.now(), actor: "retention")
                if deleted > 0 { logger.info("audit entries pruned", metadata: ["count": "\(deleted)"]) }
            } catch {
                // The database may be away for a while; the next round tries again.
                logger.warning("audit prune failed", metadata: ["error": "\(type(of: error))"])
            }
            // A shutdown ends the wait at once.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}

extension Task where Success == Never, Failure == Never {
    /// Whether the current task is cancelled or its service group is shutting down gracefully.
    static var isCancelledOrShuttingDown: Bool { Task.isCancelled || Task.isShuttingDownGracefully }
}
