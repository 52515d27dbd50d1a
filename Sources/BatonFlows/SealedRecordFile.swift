import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An append-only file of records, each sealed on its own with AES-GCM, bounded by rotation: when the current
/// file passes `maxBytes` it becomes the previous one (the one before is dropped), so the pair never holds more
/// than about twice `maxBytes`. The device's log and its usage events are kept this way: a stolen tablet's
/// files show record sizes and nothing else without the device key.
///
/// A record is a 4-byte big-endian length and the sealed box (nonce, ciphertext, tag), authenticated with the
/// file's purpose. Every operation holds an advisory lock (`flock`) on a lock file beside it, so the app and a
/// scripted command on the same device never write over each other. A torn last record (a crash mid-append) is
/// skipped on reading and written over by the next append; a whole record that does not open (damage) is
/// skipped and counted, so one bad record never blocks the rest.
public final class SealedRecordFile: Sendable {
    public let url: URL
    public let maxBytes: Int
    let key: SymmetricKey
    let purpose: Data

    /// The file at `url` (and `url` + `.1`, the previous one), sealed with `key` for `purpose`.
    public init(url: URL, key: SymmetricKey, purpose: String, maxBytes: Int = 256 * 1024) {
        self.url = url
        self.key = key
        self.purpose = Data(purpose.utf8)
        self.maxBytes = maxBytes
    }

    var previousURL: URL { URL(fileURLWithPath: url.path + ".1") }
    var lockURL: URL { URL(fileURLWithPath: url.path + ".lock") }
    /// The records taken by ``drain(_:)`` and not yet confirmed sent.
    var sendingURLs: [URL] {
        [URL(fileURLWithPath: url.path + ".sending.1"), URL(fileURLWithPath: url.path + ".sending")]
    }

    /// Runs `body` holding the file's lock (exclusive across processes).
    func locked<T>(_ body: () throws(FlowsError) -> T) throws(FlowsError) -> T {
        let manager = FileManager.default
        do {
            try manager.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o700])
        } catch {
            throw FlowsError(.storage, "Cannot create the folder of \(url.lastPathComponent).")
        }
        let descriptor = open(lockURL.path, O_CREAT | O_RDWR | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw FlowsError(.storage, "Cannot lock \(url.lastPathComponent).") }
        defer { close(descriptor) }
        guard flock(descriptor, LOCK_EX) == 0 else {
            throw FlowsError(.storage, "Cannot lock \(url.lastPathComponent).")
        }
        defer { flock(descriptor, LOCK_UN) }
        return try body()
    }

    /// Appends one record; rotates first when the current file is full.
    ///
    /// - Throws: ``FlowsError`` `Storage` when the file cannot be written.
    public func append(_ record: Data) throws(FlowsError) {
        let sealed: Data
        do {
            guard let combined = try AES.GCM.seal(record, using: key, authenticating: purpose).combined else {
                throw FlowsError(.storage, "Cannot seal a record of \(url.lastPathComponent).")
            }
            sealed = combined
        } catch let error as FlowsError {
            throw error
        } catch {
            throw FlowsError(.storage, "Cannot seal a record of \(url.lastPathComponent).")
        }
        var length = UInt32(sealed.count).bigEndian
        let frame = Data(bytes: &length, count: 4) + sealed
        try locked { () throws(FlowsError) in
            do {
                let manager = FileManager.default
                if !manager.fileExists(atPath: url.path) {
                    guard manager.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
                    else { throw FlowsError(.storage, "Cannot create \(url.lastPathComponent).") }
                }
                // After a torn record, write over it: the file ends at the last whole record. Read under the lock,
                // each time, because another process may have appended, rotated or emptied it.
                var whole = Self.wholeLength(of: try Data(contentsOf: url))
                if whole > 0, whole + frame.count > maxBytes {
                    try? manager.removeItem(at: previousURL)
                    try manager.moveItem(at: url, to: previousURL)
                    guard manager.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
                    else { throw FlowsError(.storage, "Cannot create \(url.lastPathComponent).") }
                    whole = 0
                }
                let handle = try FileHandle(forWritingTo: url)
                defer { try? handle.close() }
                try handle.truncate(atOffset: UInt64(whole))
                try handle.seek(toOffset: UInt64(whole))
                try handle.write(contentsOf: frame)
            } catch let error as FlowsError {
                throw error
            } catch {
                throw FlowsError(.storage, "Cannot write \(url.lastPathComponent).")
            }
        }
    }

    /// Every record that opens, oldest first (records taken for sending and not confirmed, then the previous
    /// file's, then the current one's), and how many whole records did not open.
    ///
    /// - Throws: ``FlowsError`` `Storage` when there are records and none opens (another key).
    public func read() throws(FlowsError) -> (records: [Data], damaged: Int) {
        try locked { () throws(FlowsError) in try unlockedRead(sendingURLs + [previousURL, url]) }
    }

    /// Every record that opens, oldest first.
    public func records() throws(FlowsError) -> [Data] { try read().records }

    func unlockedRead(_ files: [URL]) throws(FlowsError) -> (records: [Data], damaged: Int) {
        var records: [Data] = []
        var damaged = 0
        for file in files {
            guard let data = try? Data(contentsOf: file) else { continue }
            var offset = 0
            while let (box, next) = Self.frame(in: data, at: offset) {
                if let sealed = try? AES.GCM.SealedBox(combined: box),
                    let plain = try? AES.GCM.open(sealed, using: key, authenticating: purpose)
                {
                    records.append(plain)
                } else {
                    damaged += 1
                }
                offset = next
            }
        }
        if records.isEmpty, damaged > 0 {
            throw FlowsError(.storage, "\(url.lastPathComponent) does not open with this device's key.")
        }
        return (records, damaged)
    }

    /// Takes the records for sending: they move aside (records appended meanwhile go to a new file), `body`
    /// gets them, and only when it returns are they gone. When `body` throws they stay aside and come first
    /// next time, so nothing recorded is lost to a failed or concurrent upload.
    public func drain(_ body: ([Data]) async throws(FlowsError) -> Void) async throws(FlowsError) {
        let taken = try locked { () throws(FlowsError) -> [Data] in
            let manager = FileManager.default
            // Records left aside by a failed send stay there; the current files join them only when none are.
            if !sendingURLs.contains(where: { manager.fileExists(atPath: $0.path) }) {
                for (from, to) in zip([previousURL, url], sendingURLs) where manager.fileExists(atPath: from.path) {
                    do { try manager.moveItem(at: from, to: to) } catch {
                        throw FlowsError(.storage, "Cannot set \(url.lastPathComponent) aside for sending.")
                    }
                }
            }
            return try unlockedRead(sendingURLs).records
        }
        try await body(taken)
        try locked { () throws(FlowsError) in
            for file in sendingURLs { try? FileManager.default.removeItem(at: file) }
        }
    }

    /// Removes every record (and the files).
    public func removeAll() {
        try? locked { () throws(FlowsError) in
            for file in sendingURLs + [previousURL, url] { try? FileManager.default.removeItem(at: file) }
        }
    }

    /// The record at `offset` and the offset after it; nil at the end or at a torn record.
    static func frame(in data: Data, at offset: Int) -> (Data, Int)? {
        guard data.count - offset >= 4 else { return nil }
        let start = data.startIndex + offset
        let length = data[start..<start + 4].reduce(0) { $0 << 8 | Int($1) }
        guard length > 0, data.count - offset - 4 >= length else { return nil }
        return (Data(data[start + 4..<start + 4 + length]), offset + 4 + length)
    }

    /// The length of the file's whole records.
    static func wholeLength(of data: Data) -> Int {
        var offset = 0
        while let (_, next) = frame(in: data, at: offset) { offset = next }
        return offset
    }
}
