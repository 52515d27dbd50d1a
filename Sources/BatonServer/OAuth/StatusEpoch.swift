import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The data directory's `status.epoch` on SQLite: the word every process on the file rewrites before and after a
/// commit that changes a token's status, so that the other processes' token-status caches drop what they hold.
///
/// Each server maps the file into memory and reads the word on every request: no system call (a `stat` of the
/// file's path cost 2.3 µs a request on this project's machine, about a fiftieth of a key read). A writer rewrites
/// the word in place, in the page the servers have mapped, so the next request of every server sees it as soon as
/// the write returns.
///
/// The word is odd from the write before a commit until the write after it (``isChanging(_:)``): a server does not
/// remember a status read while it is, so a writer that never made its second write (killed between its commit and
/// it) leaves the caches unused rather than holding what it changed.
///
/// A file replaced or removed rather than rewritten — by hand, or by an admin command of a version that replaced it —
/// is not the one mapped: ``isStillAtPath()`` tells, and ``TokenStatusCache`` asks it at most once a
/// ``TokenStatusCache/pathCheckInterval``.
///
/// Only a file fit to be trusted is mapped or written: a regular file (not a link, a directory or a FIFO), with one
/// name, of this process's user or the owner of the server's database (of the directory, before the database
/// exists), that neither its group nor others may write. Anyone who could write it could hide a change (by writing
/// back the word last seen) or stop the server (a file cut shorter than the mapped page faults the next request that
/// reads it); a file with a second name could be another file of the directory, whose first bytes a writer would
/// overwrite.
final class StatusEpoch: Sendable {
    /// The mapped length, one page: a file at least this long is never read past its end. Writers never shorten it.
    static let length = 4096

    let path: String
    /// The mapped page, read-only; only its first 8 bytes are read.
    private nonisolated(unsafe) let word: UnsafePointer<Atomic<UInt64>>
    /// The device and inode of the file mapped.
    let identity: (device: UInt64, inode: UInt64)

    /// Maps the file at `path`, creating it (owner only) or lengthening it to ``length`` as needed.
    ///
    /// - Throws: ``StatusEpochError`` when it is not a file fit to be trusted or cannot be opened, lengthened or mapped.
    init(path: String) throws(StatusEpochError) {
        let (descriptor, status) = try Self.openFile(path, flags: O_RDWR)
        defer { close(descriptor) }
        let mapping = mmap(nil, Self.length, PROT_READ, MAP_SHARED, descriptor, 0)
        guard let mapping, mapping != MAP_FAILED else { throw StatusEpochError(path: path, operation: "map") }
        self.path = path
        word = UnsafePointer(mapping.bindMemory(to: Atomic<UInt64>.self, capacity: 1))
        identity = (UInt64(status.st_dev), UInt64(status.st_ino))
    }

    deinit { munmap(UnsafeMutableRawPointer(mutating: word), Self.length) }

    /// The word now: any change from one request to the next means a status changed.
    var current: UInt64 { word.pointee.load(ordering: .acquiring) }

    /// Whether `word` was written before a commit whose write after it has not come (yet).
    static func isChanging(_ word: UInt64) -> Bool { word & 1 == 1 }

    /// Whether the file at ``path`` is still the one mapped (one `lstat`).
    func isStillAtPath() -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0 else { return false }
        return (UInt64(status.st_dev), UInt64(status.st_ino)) == identity
    }

    /// Writes a new random word in place into the file at `path` (created if missing), seen at once by every process
    /// that maps it: odd when `changing` (before a commit), even after it.
    ///
    /// - Throws: ``StatusEpochError`` when it is not a file fit to be trusted or cannot be written.
    static func advance(path: String, changing: Bool) throws(StatusEpochError) {
        let (descriptor, _) = try openFile(path, flags: O_WRONLY)
        defer { close(descriptor) }
        var value = UInt64.random(in: 1...UInt64.max)
        value = changing ? value | 1 : value & ~1
        // The kernel may copy the 8 bytes in pieces, so a reader can see a mix of the old and the new word for a
        // moment: it differs from the old one (a change heard, which it is), and the whole word is there when the
        // write returns, before the writer commits or answers.
        guard pwrite(descriptor, &value, 8, 0) == 8 else {
            throw StatusEpochError(path: path, operation: "write 8 bytes to")
        }
    }

    /// Opens the file at `path` — created (owner only) if missing, never through a symbolic link, never blocking on a
    /// FIFO — that is fit to be trusted (see the type), lengthened to ``length`` if shorter. One that is not, or that
    /// this process may not open (a link, a FIFO, a file an earlier version's admin command left to root), is removed
    /// and made again by a process that may change the directory. The owner it must have is this process's user or
    /// the owner of the server's database beside it (`server.sqlite`), and an admin command run as root that creates
    /// it gives it to that owner, as SQLite gives its `-wal` and `-shm` files to its database's.
    private static func openFile(_ path: String, flags: Int32) throws(StatusEpochError) -> Opened {
        let directory = (path as NSString).deletingLastPathComponent
        var database = stat()
        guard
            stat((directory as NSString).appendingPathComponent("server.sqlite"), &database) == 0
                || stat(directory, &database) == 0
        else {
            throw StatusEpochError(path: path, operation: "find the directory of")
        }
        let owner = (uid: database.st_uid, gid: database.st_gid)
        if let opened = try openFit(path, flags: flags, owner: owner) { return opened }
        guard unlink(path) == 0 || errno == ENOENT else {
            throw StatusEpochError(path: path, operation: "remove an untrusted")
        }
        // Made again, or opened as another process made it again meanwhile (then it must be fit in turn).
        guard let opened = try openFit(path, flags: flags, owner: owner) else {
            throw StatusEpochError(
                path: path,
                operation:
                    "trust (not a regular file of one name, of this user or the database's owner, writable by it alone)",
                code: nil)
        }
        return opened
    }

    /// An open descriptor of the file, and what `fstat` said of it.
    typealias Opened = (descriptor: Int32, status: stat)

    /// The file at `path` opened and lengthened, or `nil` when it is not fit to be trusted or this process may not open
    /// it (a link or a FIFO: `ELOOP`, `ENXIO`; another user's file: `EACCES`, `EPERM`).
    private static func openFit(_ path: String, flags: Int32, owner: (uid: uid_t, gid: gid_t)) throws(StatusEpochError)
        -> Opened?
    {
        let descriptor = open(path, flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0o600)
        guard descriptor >= 0 else {
            if [ELOOP, ENXIO, EACCES, EPERM].contains(errno) { return nil }
            throw StatusEpochError(path: path, operation: "open")
        }
        var status = stat()
        var fit = false
        if fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG, status.st_nlink == 1,
            status.st_mode & 0o022 == 0
        {
            // Made just now by root for the database's owner.
            if status.st_uid != owner.uid, status.st_size == 0, geteuid() == 0,
                fchown(descriptor, owner.uid, owner.gid) == 0
            {
                status.st_uid = owner.uid
            }
            fit = status.st_uid == geteuid() || status.st_uid == owner.uid
        }
        guard fit else {
            close(descriptor)
            return nil
        }
        if status.st_size < length, ftruncate(descriptor, off_t(length)) != 0 {
            let error = StatusEpochError(path: path, operation: "lengthen")
            close(descriptor)
            throw error
        }
        return (descriptor, status)
    }
}

/// The epoch file could not be used; `errno` says why, where there is one.
struct StatusEpochError: Error, CustomStringConvertible {
    let path: String
    let operation: String
    /// `errno` when the error was made; `nil` when no system call failed.
    let code: Int32?

    init(path: String, operation: String, code: Int32? = errno) {
        self.path = path
        self.operation = operation
        self.code = code
    }

    var description: String {
        "Cannot \(operation) the token-status epoch file \(path)"
            + (code.map { ": " + String(cString: strerror($0)) } ?? "")
    }
}
