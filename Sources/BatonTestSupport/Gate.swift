import Foundation
import Synchronization

/// A gate a test keeps shut while a blocking body waits in it: the body (a storage transaction holding the
/// writers' turn, a lock) stays until the test opens the gate, whatever the machine's speed, instead of for a
/// fixed sleep that a slow run outlasts.
public final class Gate: Sendable {
    private let entered = Atomic<Bool>(false)
    private let opened = Atomic<Bool>(false)

    public init() {}

    /// Waits in the gate until ``open()``, blocking the calling thread, with a short sleep between looks.
    public func hold() { hold { Thread.sleep(forTimeInterval: 0.02) } }

    /// Waits in the gate until ``open()``, blocking the calling thread, with `pause` between looks (on PostgreSQL a
    /// `pg_sleep` keeps the session busy in the database).
    public func hold(pausing pause: () throws -> Void) rethrows {
        entered.store(true, ordering: .relaxed)
        while !opened.load(ordering: .relaxed) { try pause() }
    }

    /// Waits in the gate until ``open()``, with `pause` between looks, from an asynchronous body (a PostgreSQL
    /// transaction whose `pg_sleep` keeps the session busy in the database). It runs on its caller's executor, as
    /// `pause` does: the server's storage bodies run so, and `pause` uses their connection.
    nonisolated(nonsending) public func hold(pausing pause: nonisolated(nonsending) () async throws -> Void)
        async rethrows
    {
        entered.store(true, ordering: .relaxed)
        while !opened.load(ordering: .relaxed) { try await pause() }
    }

    /// Returns once a body waits in the gate (at most `timeout`).
    public func entered(within timeout: Duration = .seconds(30)) async throws {
        try await eventually(within: timeout) { self.entered.load(ordering: .relaxed) }
    }

    /// Lets every body waiting in the gate go on, and any that comes later through at once.
    public func open() { opened.store(true, ordering: .relaxed) }
}

/// Returns once `condition` holds, looking every 10 ms; throws ``EventuallyTimedOut`` after `timeout`, so that a
/// test whose condition never comes fails instead of hanging the run.
public func eventually(
    within timeout: Duration = .seconds(30), _ condition: () async throws -> Bool
) async throws {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else { throw EventuallyTimedOut(timeout: timeout) }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// A condition that did not come within its time.
public struct EventuallyTimedOut: Error, CustomStringConvertible {
    public let timeout: Duration
    public var description: String { "The condition did not hold within \(timeout)." }
}
