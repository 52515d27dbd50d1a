import HTTPTypes
import Synchronization

/// How many requests that change data each user has running on this instance, and the most each may have.
///
/// Only one writer of entities runs at a time (across all instances on PostgreSQL, on the one writer connection
/// with SQLite), so writers queue; without a limit, one account holder's few hundred concurrent batches made every
/// other user's changes wait past the lock timeout (503). One more than the limit answers 429 at once, before it
/// queues or reads anything, and changes nothing; a device waits `Retry-After` and sends it again. A request whose
/// client went away keeps its slot until it ends: it still applies, once, and its repeatable retry waits for it.
final class ChangeSlots: Sendable {
    /// The most changing requests one user may have running at once (at least 1).
    let limit: Int
    private let taken = Mutex<[String: Int]>([:])
    private let refusals = Atomic<Int>(0)

    init(limit: Int) { self.limit = max(1, limit) }

    /// Runs `body`, in one of `user`'s slots when `changing`.
    ///
    /// - Throws: ``ServerError`` 429 `TooManyRequests` with `Retry-After: 1` when `changing` and `user` has `limit`
    ///   changing requests running; `body` is not run.
    func run<T>(for user: String, changing: Bool, _ body: () async throws -> T) async throws -> T {
        guard changing else { return try await body() }
        let granted = taken.withLock { taken in
            guard taken[user, default: 0] < limit else { return false }
            taken[user, default: 0] += 1
            return true
        }
        guard granted else {
            refusals.add(1, ordering: .relaxed)
            var error = ServerError(
                .tooManyRequests, "TooManyRequests",
                "You have \(limit) requests that change data running on this server already; send this one when one of them has been answered."
            )
            error.headers = [(.retryAfter, "1")]
            throw error
        }
        defer {
            taken.withLock { taken in
                let left = taken[user, default: 1] - 1
                taken[user] = left > 0 ? left : nil
            }
        }
        return try await body()
    }

    /// How many changing requests `user` has running.
    func inFlight(_ user: String) -> Int { taken.withLock { $0[user, default: 0] } }

    /// How many changing requests were refused since the start.
    var refused: Int { refusals.load(ordering: .relaxed) }
}
