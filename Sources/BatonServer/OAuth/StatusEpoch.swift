import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The data directory's `status.epoch` on SQLite: the word every process on the file rewrites after a token status
/// changes, so that the other processes' token-status caches drop what they hold.
///
/// Each server maps the file into memory and reads the word on every request: no system call (a `stat` of the
/// file's path cost 2.3 µs a request on this project's machine, about a fiftieth of a key read). A writer rewrites
/// the word in place, in the page the servers have mapped, so the next request of every server sees it as soon as
/// the write returns.
///
/// A file replaced or removed rather than rewritten — by hand, or by an admin command of a version that replaced it —
/// is not the one mapped: ``isStillAtPath()`` tells, and ``TokenStatusCache`` asks it at most once a
/// ``TokenStatusCache/pathCheckInterval``.
final class StatusEpoch: Sendable {
    /// The mapped length, one page: a file at least this long is never read past its end. Writers never shorten it.
    static let length = 4096

    let path: String
    /// The mapped page, read-only; only its first 8 bytes are read.
    private nonisolated(unsafe) let word: UnsafeMutablePointer<Atomic<UInt64>>
    /// The device and inode of the file mapped.
    let identity: (device: UInt64, inode: UInt64)

    /// Maps the file at `path`, creating it (owner only) or lengthening it to ``length`` as needed.
    ///
    /// - Throws: ``StatusEpochError`` when it is not a regular file or cannot be opened, lengthened or mapped.
    init(path: String) throws(StatusEpochError) {
        let descriptor = try Self.openFile(path, flags: O_RDWR)
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw StatusEpochError(path: path, operation: "read") }
        let mapping = mmap(nil, Self.length, PROT_READ, MAP_SHARED, descriptor, 0)
        guard let mapping, mapping != MAP_FAILED else { throw StatusEpochError(path: path, operation: "map") }
        self.path = path
        word = mapping.bindMemory(to: Atomic<UInt64>.self, capacity: 1)
        identity = (UInt64(status.st_dev), UInt64(status.st_ino))
    }

    deinit { munmap(UnsafeMutableRawPointer(word), Self.length) }

    /// The word now: any change from one request to the next means a status changed.
    var current: UInt64 { word.pointee.load(ordering: .acquiring) }

    /// Whether the file at ``path`` is still the one mapped (one `stat`).
    func isStillAtPath() -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0 else { return false }
        return (UInt64(status.st_dev), UInt64(status.st_ino)) == identity
    }

    /// Writes a new random word in place into the file at `path` (created if missing), seen at once by every process
    /// that maps it.
    ///
    /// - Throws: ``StatusEpochError`` when it is not a regular file or cannot be written.
    static func advance(path: String) throws(StatusEpochError) {
        let descriptor = try openFile(path, flags: O_WRONLY)
        defer { close(descriptor) }
        var value = UInt64.random(in: 1...UInt64.max)
        // 8 bytes at offset 0: one aligned word, which a reader's load takes whole or not at all.
        guard pwrite(descriptor, &value, 8, 0) == 8 else { throw StatusEpochError(path: path, operation: "write") }
    }

    /// Opens the file at `path` (created, owner only, if missing; never through a symbolic link) and lengthens it to
    /// ``length`` if shorter.
    private static func openFile(_ path: String, flags: Int32) throws(StatusEpochError) -> Int32 {
        let descriptor = open(path, flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw StatusEpochError(path: path, operation: "open") }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
            let error = StatusEpochError(path: path, operation: "open a regular file")
            close(descriptor)
            throw error
        }
        if status.st_size < length, ftruncate(descriptor, off_t(length)) != 0 {
            let error = StatusEpochError(path: path, operation: "lengthen")
            close(descriptor)
            throw error
        }
        return descriptor
    }
}

/// The epoch file could not be used; `errno` says why.
struct StatusEpochError: Error, CustomStringConvertible {
    let path: String
    let operation: String
    /// `errno` when the error was made.
    let code: Int32

    init(path: String, operation: String) {
        self.path = path
        self.operation = operation
        code = errno
    }

    var description: String {
        "Cannot \(operation) the token-status epoch file \(path): \(String(cString: strerror(code)))"
    }
}
