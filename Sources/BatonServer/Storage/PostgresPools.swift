import BatonSQL
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PostgresNIO
import Synchronization

extension StorageError {
    /// The kind of a PostgreSQL error, by SQLSTATE; without one (the connection failed), unavailable.
    init(postgres error: PSQLError) {
        guard let state = error.serverInfo?[.sqlState] else {
            self.init(.unavailable, "PostgreSQL cannot be reached (\(error.code)).")
            return
        }
        let kind: Kind =
            switch state {
            case "23505": .uniqueViolation
            case "23502", "23514": .constraintViolation
            case "40001", "40P01": .conflict
            case _ where state.hasPrefix("22"): .dataException(sqlState: state)
            // 55P03: a lock not granted within `lock_timeout` (another writer held a row too long).
            case _ where state.hasPrefix("08") || state.hasPrefix("57P") || state == "53300" || state == "55P03":
                .unavailable
            default: .other
            }
        // A data exception's message quotes the value it refused (user data): only its SQLSTATE is kept.
        let message = state.hasPrefix("22") ? "a value was refused" : error.serverInfo?[.message] ?? "no message"
        self.init(kind, "PostgreSQL error \(state): \(message)")
    }
}

/// Whichever of two racing completions comes first.
final class Claim: Sendable {
    private let taken = Mutex(false)

    /// Whether a caller claimed it.
    var isTaken: Bool { taken.withLock { $0 } }

    /// `true` once: for the first caller.
    func claim() -> Bool {
        taken.withLock { taken in
            defer { taken = true }
            return !taken
        }
    }
}

/// A request waiting for a connection of a ``LoopPool``: answered once, by whichever comes first — a holder that
/// runs its access, its deadline, its cancellation, or the pool closing — even when that comes before the request
/// began to wait.
final class Waiter<T: Sendable>: Sendable {
    private let claim = Claim()
    private let state = Mutex<(waiting: CheckedContinuation<T, any Error>?, early: Result<T, any Error>?)>((nil, nil))

    /// Whether the outcome is decided.
    var isTaken: Bool { claim.isTaken }

    /// Decides the outcome: `true` for the first caller only.
    func take() -> Bool { claim.claim() }

    /// Answers the request, after ``take()``.
    func deliver(_ result: Result<T, any Error>) {
        let waiting = state.withLock { state -> CheckedContinuation<T, any Error>? in
            guard let waiting = state.waiting else {
                state.early = result
                return nil
            }
            state.waiting = nil
            return waiting
        }
        waiting?.resume(with: result)
    }

    /// Takes the outcome and answers with `result`, unless another did first.
    func finish(_ result: Result<T, any Error>) {
        guard take() else { return }
        deliver(result)
    }

    /// Waits with `continuation` (answered at once when the outcome came first).
    func wait(_ continuation: CheckedContinuation<T, any Error>) {
        let early = state.withLock { state -> Result<T, any Error>? in
            if let early = state.early { return early }
            state.waiting = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }
}

/// A postgres-nio pool whose connections live on one event loop, with its share of the connections, how many
/// leases it has (held or waited for), and the tasks that hold its connections.
///
/// Each of `share` holder tasks (``hold()``) leases a connection from postgres-nio and keeps it, running the jobs
/// requests hand it (``submit(_:)``) one after another, until the connection closes; then it leases another. So
/// postgres-nio's pool never sees a connection go idle between requests (it would arm an idle timer each time),
/// and it makes connections only when one is missing.
final class LoopPool: Sendable {
    let loop: any EventLoop
    let share: Int
    let client: PostgresClient
    let leases = Atomic<Int>(0)
    private let queue = Mutex(Queue())

    init(loop: any EventLoop, share: Int, client: PostgresClient) {
        (self.loop, self.share, self.client) = (loop, share, client)
    }

    /// Connections not leased (negative while leases wait).
    var free: Int { share - leases.load(ordering: .relaxed) }

    /// Whether ``close()`` ended the holders.
    var isClosed: Bool { queue.withLock { $0.closed } }

    /// A request's use of a connection: run by the first holder free, unless its deadline, its cancellation or the
    /// pool closing took it first (then `isTaken`, and a holder skips it).
    struct Job: Sendable {
        let isTaken: @Sendable () -> Bool
        let run: @Sendable (PostgresConnection) async -> Void
        let fail: @Sendable (any Error) -> Void
    }

    /// The jobs waiting, first at `head` (taken from the front without moving the rest), and the holders waiting.
    private struct Queue: ~Copyable {
        var jobs: [Job] = []
        var head = 0
        var idle: [CheckedContinuation<Job?, Never>] = []
        var closed = false
        /// How many jobs may wait before the taken ones among them are dropped: doubled each time, so a long
        /// backlog (the database away) is filtered a logarithmic number of times, not on every request.
        var pruneAt = 256

        var isEmpty: Bool { head == jobs.count }

        mutating func popFirst() -> Job? {
            while head < jobs.count {
                let job = jobs[head]
                head += 1
                if head == jobs.count {
                    jobs.removeAll(keepingCapacity: true)
                    head = 0
                }
                if !job.isTaken() { return job }
            }
            return nil
        }

        mutating func append(_ job: Job, first: Bool) {
            if first, head > 0 {
                head -= 1
                jobs[head] = job
            } else if first {
                jobs.insert(job, at: 0)
            } else {
                // Jobs whose deadline passed while no holder came (the database away) go when they are many.
                if jobs.count - head >= pruneAt {
                    jobs = jobs[head...].filter { !$0.isTaken() }
                    head = 0
                    pruneAt = max(256, 2 * jobs.count)
                } else if head >= 1_024, head > jobs.count / 2 {
                    // Jobs handed out stay before `head` until the queue empties; under a steady backlog it never
                    // does, so they go once they are most of the array.
                    jobs.removeFirst(head)
                    head = 0
                }
                jobs.append(job)
            }
        }
    }

    /// How many jobs wait (their deadline may have passed).
    var queued: Int { queue.withLock { $0.jobs.count - $0.head } }

    /// Hands `job` to a holder waiting for work, or queues it for the next (`first`: before the others); fails it
    /// at once when the pool is closed.
    func submit(_ job: Job, first: Bool = false) {
        let (holder, closed) = queue.withLock { queue -> (CheckedContinuation<Job?, Never>?, Bool) in
            guard !queue.closed else { return (nil, true) }
            if let holder = queue.idle.popLast() { return (holder, false) }
            queue.append(job, first: first)
            return (nil, false)
        }
        if closed { job.fail(PostgresStorage.closedError) }
        holder?.resume(returning: job)
    }

    /// The next job, once there is one; `nil` once the pool is closed.
    private func next() async -> Job? {
        await withCheckedContinuation { (holder: CheckedContinuation<Job?, Never>) in
            let job = queue.withLock { queue -> Job?? in
                if let job = queue.popFirst() { return .some(job) }
                if queue.closed { return .some(nil) }
                queue.idle.append(holder)
                return nil
            }
            if let job { holder.resume(returning: job) }
        }
    }

    /// Holds a connection at a time and runs jobs on it until the pool closes.
    func hold() async {
        while !queue.withLock({ $0.closed }) {
            do {
                try await client.withConnection { connection in
                    while let job = await self.next() {
                        // A connection that closed while it waited (the database went away) takes no job: the job
                        // goes to the next holder, this one leases a new connection.
                        guard !connection.isClosed else { return self.submit(job, first: true) }
                        await job.run(connection)
                        if connection.isClosed { return }
                    }
                }
            } catch {
                // No connection (the database is away: postgres-nio keeps trying; or the pool shut down): the jobs
                // waiting meanwhile fail at their deadline.
                try? await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// Ends the holders — those waiting for work get none, the others stop after their job — and fails the jobs
    /// still waiting.
    func close() {
        let (holders, jobs) = queue.withLock { queue in
            queue.closed = true
            defer { (queue.idle, queue.jobs, queue.head) = ([], [], 0) }
            return (queue.idle, Array(queue.jobs[queue.head...]))
        }
        for holder in holders { holder.resume(returning: nil) }
        for job in jobs { job.fail(PostgresStorage.closedError) }
    }
}
