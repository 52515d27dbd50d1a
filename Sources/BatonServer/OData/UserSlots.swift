import HTTPTypes
import Synchronization

/// How many requests of one kind (changes, reads) each user has running on this instance, and the most each may
/// have. One more than the limit answers 429 at once, before it queues or reads anything, and changes nothing; a
/// device waits `Retry-After` and sends it again. A request whose client went away keeps its slot until it ends.
///
/// Changes: only one writer of entities runs at a time (across all instances on PostgreSQL, on the one writer
/// connection with SQLite), so writers queue; without a limit, one account holder's few hundred concurrent batches
/// made every other user's changes wait past the lock timeout (503). A change whose client went away still applies,
/// once, and its repeatable retry waits for it.
///
/// Reads: each holds a database connection while it runs (on PostgreSQL one of the instance's pool); without a
/// limit, forty slow reads of one user took every connection, and other users' small reads answered 503 after
/// the lease deadline. The limit is a quarter of the pool unless the operator names another
/// (``DataServiceConfiguration/maximumConcurrentReadsPerUser``).
final class UserSlots: Sendable {
    /// The most requests of this kind one user may have running at once (at least 1).
    let limit: Int
    /// What the slots are for, as a refusal names them: "requests that change data", "reads".
    let what: String
    private let taken = Mutex<[String: Int]>([:])
    private let refusals = Atomic<Int>(0)

    init(limit: Int, for what: String) {
        self.limit = max(1, limit)
        self.what = what
    }

    /// Runs `body`, in one of `user`'s slots when `taking`.
    ///
    /// - Throws: ``ServerError`` 429 `TooManyRequests` with `Retry-After: 1` when `taking` and `user` has `limit`
    ///   requests of this kind running; `body` is not run.
    func run<T>(for user: String, taking: Bool = true, _ body: () async throws -> T) async throws -> T {
        guard taking else { return try await body() }
        let granted = taken.withLock { taken in
            guard taken[user, default: 0] < limit else { return false }
            taken[user, default: 0] += 1
            return true
        }
        guard granted else {
            refusals.add(1, ordering: .relaxed)
            var error = ServerError(
                .tooManyRequests, "TooManyRequests",
                "You have \(limit) \(what) running on this server already; send this one when one of them has been answered."
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

    /// How many requests of this kind `user` has running.
    func inFlight(_ user: String) -> Int { taken.withLock { $0[user, default: 0] } }

    /// How many requests of this kind were refused since the start.
    var refused: Int { refusals.load(ordering: .relaxed) }
}
