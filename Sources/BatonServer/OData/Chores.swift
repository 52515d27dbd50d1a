import Foundation
import Synchronization

/// Service-wide clean-ups a change does on the way — dropping stored answers past their window, forgetting
/// tombstones past theirs — each done by at most one change of an instance in a tenth of its window (and at most
/// a minute apart), not by every change. Done by every change, writers running at once found the same rows newly
/// due and all changed them: on PostgreSQL, at `REPEATABLE READ` (``WriteIsolation/rowChecked``), all but the first
/// to commit were refused, since their snapshots still saw the rows as due, and ran their whole batch again.
/// Either clean-up done late only keeps what is past its window a little longer.
final class Chores: Sendable {
    enum Chore: Hashable, Sendable {
        /// Stored answers of repeatable requests past the retention window.
        case answers
        /// Tombstones past the delta window.
        case tombstones
    }

    private let last = Mutex<[Chore: Date]>([:])

    /// Whether `chore`, whose rows are due after `window` seconds, is due at `now` on this instance; when it is, it is
    /// counted as done at `now` (a write that runs again after a conflict does not do it twice).
    func isDue(_ chore: Chore, window: TimeInterval, at now: Date) -> Bool {
        let every = min(60, window / 10)
        return last.withLock { last in
            if let previous = last[chore], now >= previous, now.timeIntervalSince(previous) < every { return false }
            last[chore] = now
            return true
        }
    }
}
