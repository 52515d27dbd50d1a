import NIOCore
import NIOPosix
import Synchronization

/// An event loop as a Swift `TaskExecutor`: a request's handling prefers the loop it arrived on, so that its many
/// `async` calls run one after another on that loop instead of each being queued on it again.
///
/// `BatonServer.runConcurrencyOnEventLoops()` makes NIO's loops Swift concurrency's global executor. NIO runs each
/// global job *as the loop's serial executor*, so the runtime sees every call into code that runs on the generic
/// executor (every Hummingbird middleware's `handle`, every `@concurrent` function) as a change of executor: it
/// queues the task on the loop and runs it at the loop's next tick. With the server built `NonisolatedNonsendingByDefault`
/// a key read still did so 49 times; preferring this executor took it to 26, 14 of them the in-process harness's
/// (docs/BENCHMARKS.md).
/// A job run through this executor runs on the generic executor with this task executor preferred, which is what
/// that code asks for: the runtime goes on without queuing it. The thread is the same loop's either way.
///
/// Work that must not block a loop stays where it was (bcrypt on NIO's thread pool, SQLite writes on GRDB's queue);
/// when it resumes the request, the request comes back to this loop rather than to any loop.
final class EventLoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    private init(_ loop: any EventLoop) { self.loop = loop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// One executor per loop, made once.
    private static let executors = Mutex<[ObjectIdentifier: EventLoopTaskExecutor]>([:])

    /// The executor of the event loop the caller runs on; `nil` off the loops (when Swift concurrency runs on its own
    /// thread pool, as in the tests: a request is not moved onto a loop it does not already run on).
    static var current: EventLoopTaskExecutor? {
        MultiThreadedEventLoopGroup.currentEventLoop.map(executor(for:))
    }

    /// The executor of `loop`.
    static func executor(for loop: any EventLoop) -> EventLoopTaskExecutor {
        executors.withLock { executors in
            if let executor = executors[ObjectIdentifier(loop)] { return executor }
            let executor = EventLoopTaskExecutor(loop)
            executors[ObjectIdentifier(loop)] = executor
            return executor
        }
    }

    /// Runs `body` preferring the current event loop's executor, when the caller runs on a loop.
    static func onCurrentLoop<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        guard let executor = current else { return try await body() }
        return try await withTaskExecutorPreference(executor, operation: body)
    }
}
