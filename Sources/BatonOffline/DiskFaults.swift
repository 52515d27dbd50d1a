import Foundation
import GRDBSQLite
import Synchronization

/// A storage fault the fault harness (`baton-chaos`) makes the encrypted VFS report, as a failing disk would.
package enum DiskFault: String, CaseIterable, Sendable, Codable {
    /// A write returns `SQLITE_FULL` and writes nothing (the disk is full), for a few writes in a row.
    case diskFull = "disk-full"
    /// A write stores only the first half of what it was given (a page, or a log's frame header), then reports
    /// `SQLITE_FULL` (what a short `write(2)` on a full disk leaves behind): a torn page in the file.
    case shortWrite = "short-write"
    /// An `fsync` fails (`SQLITE_IOERR_FSYNC`).
    case fsyncFailure = "fsync-failure"
    /// The process dies right after a page write: between a frame and its transaction's commit frame in the
    /// write-ahead log, or between a checkpoint's page write into the database and the log's reset.
    case deathAfterWrite = "death-after-write"
    /// The process dies in the middle of a write (a page, or a log's frame header): its first half is in the
    /// file, the rest is what was there before.
    case deathInWrite = "death-in-write"
    /// The process dies right after an `fsync`.
    case deathAfterSync = "death-after-sync"

    /// Whether the fault ends the process.
    package var kills: Bool { [.deathAfterWrite, .deathInWrite, .deathAfterSync].contains(self) }
    /// Whether the fault is counted on syncs rather than on writes.
    package var onSync: Bool { self == .fsyncFailure || self == .deathAfterSync }
}

/// Armed faults of the encrypted VFS: only the fault harness arms them, for the files of one store; the app never
/// does, and with nothing armed a write costs one lock.
package enum DiskFaults {
    struct Plan {
        /// Nothing, to count the store's writes and syncs only.
        var fault: DiskFault?
        /// The store file's path: its database and log are affected, nothing else in the process.
        var path: String
        /// Writes (or syncs) to let through before the fault.
        var countdown: Int
        /// How many writes (or syncs) in a row fail once it starts.
        var failures: Int
        var writes = 0
        var syncs = 0
        var injected = 0
    }

    static let plan = Mutex<Plan?>(nil)

    /// Arms `fault` for the store at `path`: it strikes after `operations` writes (syncs, for the sync faults), and
    /// lasts `failures` operations (a full disk stays full for a while). Without a fault, only counts.
    package static func arm(_ fault: DiskFault?, path: String, after operations: Int = 0, failures: Int = 1) {
        plan.withLock { $0 = Plan(fault: fault, path: path, countdown: operations, failures: max(1, failures)) }
    }

    /// Disarms; returns the writes and syncs of the store's files since it was armed, and the faults injected.
    @discardableResult
    package static func disarm() -> (writes: Int, syncs: Int, injected: Int) {
        plan.withLock { plan in
            defer { plan = nil }
            return (plan?.writes ?? 0, plan?.syncs ?? 0, plan?.injected ?? 0)
        }
    }

    /// What the VFS does with the next write or sync of the file at `path`.
    enum Action {
        case proceed
        case fail(Int32)
        /// Write only the first half of what was asked, then: fail with `SQLITE_FULL`, or die.
        case tear(thenDie: Bool)
        /// Do the operation, then die.
        case dieAfter
    }

    static func next(sync: Bool, path: String) -> Action {
        plan.withLock { plan in
            guard var current = plan, path == current.path || path == current.path + "-wal" else { return .proceed }
            if sync { current.syncs += 1 } else { current.writes += 1 }
            defer { plan = current }
            guard let fault = current.fault, fault.onSync == sync, current.failures > 0 else { return .proceed }
            if current.countdown > 0 {
                current.countdown -= 1
                return .proceed
            }
            current.failures -= 1
            current.injected += 1
            switch fault {
            case .diskFull: return .fail(SQLITE_FULL)
            case .fsyncFailure: return .fail(IOError.fsync)
            case .shortWrite: return .tear(thenDie: false)
            case .deathInWrite: return .tear(thenDie: true)
            case .deathAfterWrite, .deathAfterSync: return .dieAfter
            }
        }
    }

    /// Ends the process at once, as a kill or a power cut would: no cleanup, no buffered output.
    static func die() -> Never { _exit(137) }
}
