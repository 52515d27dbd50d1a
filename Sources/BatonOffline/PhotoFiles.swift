import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc

    private let systemWrite = Glibc.write
#elseif canImport(Darwin)
    import Darwin

    private let systemWrite = Darwin.write
#endif

/// Photos' bytes on the device, one file each beside the store (`offline.sqlite-media/NAME`), sealed with
/// AES-GCM in 256 KiB chunks under a key derived from the store key (HKDF-SHA256): nothing in them is readable
/// without the store key, as nothing in the store is.
///
/// Each chunk authenticates the file's name, its own index and whether it is the last, so a chunk moved to another
/// place or file, a file renamed, or a file cut after a chunk does not open. A file is written whole under a fresh
/// name (a temporary file, flushed, renamed, the directory flushed) before the transaction that names it in
/// `$mediaInfo` commits; a name no row holds is an orphan of a transaction that did not commit, removed by
/// ``sweep(keeping:olderThan:)``.
///
/// Photos are kept outside the database because every page SQLite writes goes through the encrypted VFS twice
/// (log, then checkpoint): 2,560 page encryptions and writes for a 5 MiB photo, against one pass here.
struct PhotoFiles: Sendable {
    let directory: URL
    let key: SymmetricKey

    static let chunkSize = 256 * 1024
    static let sealedOverhead = 12 + 16
    static let magic = Array("baton-photo-v1\n".utf8)

    init(store: URL, storeKey: SymmetricKey) {
        directory = URL(fileURLWithPath: store.path + "-media", isDirectory: true)
        key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: storeKey, info: Data("baton-photo-files-v1".utf8), outputByteCount: 32)
    }

    /// Whether `name` is one this type gives (a lower-case UUID): never a path from elsewhere.
    static func isName(_ name: String) -> Bool {
        name.utf8.count == 36 && name.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) || $0 == 45 }
    }

    func authenticatedData(_ name: String, chunk: Int, last: Bool) -> [UInt8] {
        var data = Array("baton-photo-v1".utf8) + Array(name.utf8)
        withUnsafeBytes(of: UInt32(chunk).bigEndian) { data += $0 }
        data.append(last ? 1 : 0)
        return data
    }

    /// Seals `bytes` into a new file, flushed to disk; returns its name.
    func write(_ bytes: [UInt8]) throws(OfflineError) -> String {
        let name = UUID().uuidString.lowercased()
        var sealed = Self.magic
        let chunks = max(1, (bytes.count + Self.chunkSize - 1) / Self.chunkSize)
        sealed.reserveCapacity(Self.magic.count + bytes.count + chunks * Self.sealedOverhead)
        do {
            for index in 0..<chunks {
                let start = index * Self.chunkSize
                let box = try AES.GCM.seal(
                    bytes[start..<min(bytes.count, start + Self.chunkSize)], using: key,
                    authenticating: authenticatedData(name, chunk: index, last: index == chunks - 1))
                sealed += box.nonce
                sealed += box.ciphertext
                sealed += box.tag
            }
        } catch {
            throw OfflineError(.storage, "The photo could not be encrypted.")
        }
        do {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw OfflineError(.storage, "Cannot create the photo folder beside the offline store.")
        }
        let temporary = directory.appendingPathComponent(name + ".tmp").path
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw OfflineError(.storage, "Cannot write the photo's file (\(errno)).") }
        let flushed = sealed.withUnsafeBytes { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            var written = 0
            while written < buffer.count {
                let count = systemWrite(descriptor, base + written, buffer.count - written)
                guard count > 0 else { return false }
                written += count
            }
            return fsync(descriptor) == 0
        }
        close(descriptor)
        guard flushed, rename(temporary, directory.appendingPathComponent(name).path) == 0 else {
            unlink(temporary)
            throw OfflineError(.storage, "Cannot write the photo's file: the disk refused it (full?).")
        }
        let folder = open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folder >= 0 {
            fsync(folder)
            close(folder)
        }
        return name
    }

    /// The bytes of the file `name`, every chunk authenticated in its place.
    func read(_ name: String) throws(OfflineError) -> [UInt8] {
        guard Self.isName(name),
            let data = FileManager.default.contents(atPath: directory.appendingPathComponent(name).path)
        else { throw OfflineError(.storage, "A photo's file is missing on this device.") }
        let stored = [UInt8](data)
        guard stored.starts(with: Self.magic) else { throw OfflineError(.storage, "A photo's file is damaged.") }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(stored.count)
        var offset = Self.magic.count
        var index = 0
        repeat {
            let length = min(Self.chunkSize + Self.sealedOverhead, stored.count - offset)
            let last = offset + length == stored.count
            do {
                guard length >= Self.sealedOverhead else { throw OfflineError(.storage, "") }
                let box = try AES.GCM.SealedBox(
                    nonce: AES.GCM.Nonce(data: stored[offset..<offset + 12]),
                    ciphertext: stored[offset + 12..<offset + length - 16],
                    tag: stored[offset + length - 16..<offset + length])
                bytes += try AES.GCM.open(
                    box, using: key, authenticating: authenticatedData(name, chunk: index, last: last))
            } catch {
                throw OfflineError(.storage, "A photo's file is damaged or was altered.")
            }
            offset += length
            index += 1
        } while offset < stored.count
        return bytes
    }

    /// Removes the files `names` (gone already is fine).
    func remove(_ names: some Sequence<String>) {
        for name in names where Self.isName(name) { unlink(directory.appendingPathComponent(name).path) }
    }

    /// Removes every file no row names — orphans of transactions that did not commit, files of rows deleted —
    /// leaving those written in the last `age` seconds (another process may be about to name one).
    func sweep(keeping names: Set<String>, olderThan age: TimeInterval = 60) {
        let manager = FileManager.default
        let cutoff = Date().addingTimeInterval(-age)
        for file in (try? manager.contentsOfDirectory(atPath: directory.path)) ?? [] where !names.contains(file) {
            let path = directory.appendingPathComponent(file).path
            let modified = (try? manager.attributesOfItem(atPath: path)[.modificationDate]) as? Date
            if let modified, modified > cutoff { continue }
            unlink(path)
        }
    }

    /// Removes the folder and everything in it.
    func removeAll() { try? FileManager.default.removeItem(at: directory) }
}
