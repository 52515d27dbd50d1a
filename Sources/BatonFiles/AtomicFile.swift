import Foundation

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#endif

/// Crash-safe file writes: the new content goes to a temporary file in the same directory and is flushed to
/// disk, then takes the file's name in one step, and the directory entry is flushed. A crash or a power loss at
/// any point leaves either the old content or the new, never a mix, and a write that returned stays.
public enum AtomicFile {
    /// Replaces the file at `url` with `data` (mode 0600), crash-safely.
    ///
    /// - Throws: ``AtomicFileError`` when the file cannot be written.
    public static func write(_ data: Data, to url: URL) throws(AtomicFileError) {
        let temporary = try flushedTemporary(data, beside: url)
        guard rename(temporary, url.path) == 0 else {
            unlink(temporary)
            throw failure(url)
        }
        flushDirectory(of: url)
    }

    /// Creates the file at `url` with `data` (mode 0600), crash-safely, unless it exists: then it is left as it
    /// is (another process created it first) and this returns false.
    ///
    /// - Throws: ``AtomicFileError`` when the file can be neither created nor found.
    public static func create(_ data: Data, at url: URL) throws(AtomicFileError) -> Bool {
        let temporary = try flushedTemporary(data, beside: url)
        defer { unlink(temporary) }
        // A hard link fails when the name exists, where a rename would replace it.
        guard link(temporary, url.path) == 0 else {
            switch errno {
            case EEXIST: return false
            case EPERM, EOPNOTSUPP, ENOTSUP, EXDEV: return try createExclusively(data, at: url)
            default: throw failure(url)
            }
        }
        flushDirectory(of: url)
        return true
    }

    /// ``create(_:at:)`` on a file system without hard links: the name is taken exclusively, then written and
    /// flushed (a reader in between sees a short file, which the callers treat as damaged, not as a key).
    static func createExclusively(_ data: Data, at url: URL) throws(AtomicFileError) -> Bool {
        guard try writeNew(data, atPath: url.path) else { return false }
        flushDirectory(of: url)
        return true
    }

    /// Creates the file at `path` (mode 0600) holding `data`, flushed to disk; false when the name exists.
    ///
    /// - Throws: ``AtomicFileError`` when it cannot be created or written (a partly written file is removed).
    static func writeNew(_ data: Data, atPath path: String) throws(AtomicFileError) -> Bool {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else {
            if errno == EEXIST { return false }
            throw failure(URL(fileURLWithPath: path))
        }
        var ok = writeAll(data, to: descriptor) && fsync(descriptor) == 0
        ok = close(descriptor) == 0 && ok
        guard ok else {
            unlink(path)
            throw failure(URL(fileURLWithPath: path))
        }
        return true
    }

    /// Writes all of `data`; false on any failure.
    static func writeAll(_ data: Data, to descriptor: Int32) -> Bool {
        data.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let written = Foundation.write(descriptor, raw.baseAddress?.advanced(by: offset), raw.count - offset)
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
    }

    /// A new temporary file beside `url` holding `data`, flushed to disk; its path.
    static func flushedTemporary(_ data: Data, beside url: URL) throws(AtomicFileError) -> String {
        let temporary = url.deletingLastPathComponent().appendingPathComponent(
            ".\(url.lastPathComponent).\(UUID().uuidString).tmp"
        ).path
        // A fresh name: it exists only if something else put it there.
        guard try writeNew(data, atPath: temporary) else { throw failure(url) }
        return temporary
    }

    /// Flushes the directory entry of `url`, so that its new name survives a power loss.
    static func flushDirectory(of url: URL) {
        let directoryDescriptor = open(url.deletingLastPathComponent().path, O_RDONLY)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }

    /// The error names the directory only: a caller's file name may carry a user's name.
    static func failure(_ url: URL) -> AtomicFileError {
        AtomicFileError(
            "Cannot write in \(url.deletingLastPathComponent().path): the disk is full or the folder not writable.")
    }
}

/// A file that could not be written: the message names the directory (never the file, whose name may carry a
/// user's name) and what to do.
public struct AtomicFileError: Error, Sendable, CustomStringConvertible {
    /// What went wrong, in words a person can act on.
    public let message: String

    /// An error saying `message`.
    ///
    /// - Parameter message: what went wrong.
    public init(_ message: String) { self.message = message }

    public var description: String { message }
}
