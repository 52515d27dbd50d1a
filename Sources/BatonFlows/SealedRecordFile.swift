import Crypto
import Foundation
import Synchronization

/// An append-only file of records, each sealed on its own with AES-GCM, bounded by rotation: when the current
/// file passes `maxBytes` it becomes the previous one (the one before is dropped), so the pair never holds more
/// than about twice `maxBytes`. The device's log and its usage events are kept this way: a stolen tablet's
/// files show record sizes and nothing else.
///
/// A record is a 4-byte big-endian length and the sealed box (nonce, ciphertext, tag), authenticated with the
/// file's purpose. A torn last record (a crash mid-append) is skipped on reading, and the next append starts
/// after the last whole record.
public final class SealedRecordFile: Sendable {
    public let url: URL
    public let maxBytes: Int
    let key: SymmetricKey
    let purpose: Data
    /// The end of the current file's whole records, once known (each process checks the file once).
    let end = Mutex<Int?>(nil)

    /// The file at `url` (and `url` + `.1`, the previous one), sealed with `key` for `purpose`.
    public init(url: URL, key: SymmetricKey, purpose: String, maxBytes: Int = 256 * 1024) {
        self.url = url
        self.key = key
        self.purpose = Data(purpose.utf8)
        self.maxBytes = maxBytes
    }

    var previousURL: URL { URL(fileURLWithPath: url.path + ".1") }

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
        let result: Result<Void, FlowsError> = end.withLock { end in
            do {
                let manager = FileManager.default
                if !manager.fileExists(atPath: url.path) {
                    try manager.createDirectory(
                        at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
                        attributes: [.posixPermissions: 0o700])
                    guard manager.createFile(atPath: url.path, contents: nil, attributes: [.posixPermissions: 0o600])
                    else { throw FlowsError(.storage, "Cannot create \(url.lastPathComponent).") }
                }
                // After a torn record, write over it: the file ends at the last whole record.
                var whole = try end ?? Self.wholeLength(of: Data(contentsOf: url))
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
                end = whole + frame.count
                return .success(())
            } catch let error as FlowsError {
                return .failure(error)
            } catch {
                return .failure(FlowsError(.storage, "Cannot write \(url.lastPathComponent)."))
            }
        }
        try result.get()
    }

    /// Every whole record, oldest first (the previous file's, then the current one's).
    ///
    /// - Throws: ``FlowsError`` `Storage` when a whole record does not open with the key (another key, or
    ///   tampering).
    public func records() throws(FlowsError) -> [Data] {
        let result: Result<[Data], FlowsError> = end.withLock { _ in
            var records: [Data] = []
            for file in [previousURL, url] {
                guard let data = try? Data(contentsOf: file) else { continue }
                var offset = 0
                while let (box, next) = Self.frame(in: data, at: offset) {
                    guard let sealed = try? AES.GCM.SealedBox(combined: box),
                        let plain = try? AES.GCM.open(sealed, using: key, authenticating: purpose)
                    else {
                        return .failure(
                            FlowsError(.storage, "\(url.lastPathComponent) does not open with this device's key."))
                    }
                    records.append(plain)
                    offset = next
                }
            }
            return .success(records)
        }
        return try result.get()
    }

    /// Removes both files.
    public func removeAll() {
        end.withLock { end in
            try? FileManager.default.removeItem(at: previousURL)
            try? FileManager.default.removeItem(at: url)
            end = nil
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
