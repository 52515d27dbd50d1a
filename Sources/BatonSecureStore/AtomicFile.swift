import Foundation

#if canImport(Darwin)
    import Darwin
#elseif canImport(Glibc)
    import Glibc
#endif

/// Crash-safe file replacement: the new content goes to a temporary file in the same directory, is flushed to
/// disk, then renamed over the old file (rename is atomic), and the directory entry is flushed. A crash at any
/// point leaves either the old or the new content, never a mix.
public enum AtomicFile {
    /// Replaces the file at `url` with `data` (mode 0600), crash-safely.
    public static func write(_ data: Data, to url: URL) throws(SecureStoreError) {
        let directory = url.deletingLastPathComponent().path
        let temporary = url.deletingLastPathComponent().appendingPathComponent(
            ".\(url.lastPathComponent).\(UUID().uuidString).tmp"
        ).path
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else { throw SecureStoreError(.io, "Cannot write the secure store in \(directory).") }
        var ok = data.withUnsafeBytes { raw -> Bool in
            var offset = 0
            while offset < raw.count {
                let written = Foundation.write(descriptor, raw.baseAddress?.advanced(by: offset), raw.count - offset)
                if written <= 0 { return false }
                offset += written
            }
            return true
        }
        ok = ok && fsync(descriptor) == 0
        ok = close(descriptor) == 0 && ok
        guard ok, rename(temporary, url.path) == 0 else {
            unlink(temporary)
            throw SecureStoreError(.io, "Cannot write the secure store in \(directory).")
        }
        let directoryDescriptor = open(directory, O_RDONLY)
        if directoryDescriptor >= 0 {
            fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }
}
