import BatonOData
import BatonSQL
import Crypto
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// An upload's bytes in a temporary file of the media directory, renamed to their hash when complete.
final class FileSink: Sendable {
    let directory: URL
    let temporary: URL
    let handle: FileHandle
    let store: MediaStore

    init(directory: URL, store: MediaStore) throws {
        self.directory = directory
        self.store = store
        let uploads = directory.appendingPathComponent("uploads", isDirectory: true)
        try FileManager.default.createDirectory(
            at: uploads, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        temporary = uploads.appendingPathComponent(UUID().uuidString.lowercased())
        guard
            FileManager.default.createFile(
                atPath: temporary.path, contents: nil, attributes: [.posixPermissions: 0o600])
        else { throw CocoaError(.fileWriteUnknown) }
        handle = try FileHandle(forWritingTo: temporary)
    }

    func write(_ bytes: [UInt8]) throws { try handle.write(contentsOf: bytes) }

    /// Flushes the file to disk and renames it to its hash (a blob already there has the same bytes: it stays, and
    /// its time is renewed so a sweep leaves it for the entity about to name it).
    func commit(as sha256: String, now: Date) throws {
        try handle.synchronize()
        try handle.close()
        let target = store.file(sha256, in: directory)
        let shard = target.deletingLastPathComponent()
        try FileManager.default.createDirectory(
            at: shard, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let renamed = try MediaStore.fileLock.withLock { _ throws -> Bool in
            // The server's clock, which the sweep reads, dates the blob.
            if FileManager.default.fileExists(atPath: target.path) {
                try FileManager.default.setAttributes([.modificationDate: now], ofItemAtPath: target.path)
                return false
            }
            guard rename(temporary.path, target.path) == 0 else { throw CocoaError(.fileWriteUnknown) }
            try FileManager.default.setAttributes([.modificationDate: now], ofItemAtPath: target.path)
            return true
        }
        guard renamed else {
            try? FileManager.default.removeItem(at: temporary)
            return
        }
        // The rename is durable once the directory is.
        let descriptor = open(shard.path, O_RDONLY)
        if descriptor >= 0 {
            fsync(descriptor)
            close(descriptor)
        }
    }

    func abandon() {
        try? handle.close()
        try? FileManager.default.removeItem(at: temporary)
    }
}

/// A file's bytes in parts of ``MediaStore/partSize``.
struct FileParts: Sequence, IteratorProtocol {
    let handle: FileHandle

    init(url: URL) throws { handle = try FileHandle(forReadingFrom: url) }

    mutating func next() -> [UInt8]? {
        guard let data = try? handle.read(upToCount: MediaStore.partSize), !data.isEmpty else {
            try? handle.close()
            return nil
        }
        return Array(data)
    }
}

/// An upload's bytes in PostgreSQL rows under a fresh upload id, renamed to their hash when complete.
final class RowSink: Sendable {
    let storage: PostgresStorage
    let upload = "upload:" + UUID().uuidString.lowercased()
    let state = Mutex<(pending: [UInt8], parts: Int, started: Bool)>(([], 0, false))
    let startedAt: Date

    init(storage: PostgresStorage, now: Date) {
        self.storage = storage
        startedAt = now
    }

    func write(_ bytes: [UInt8]) async throws {
        var full: [[UInt8]] = []
        let first = state.withLock { state -> Bool in
            state.pending += bytes
            while state.pending.count >= MediaStore.partSize {
                full.append(Array(state.pending.prefix(MediaStore.partSize)))
                state.pending.removeFirst(MediaStore.partSize)
            }
            defer { state.started = true }
            return !state.started
        }
        if first {
            try await storage.write { db in
                try await db.execute(
                    #"INSERT INTO "$mediaUpload" (blob, startedAt) VALUES (?, ?)"#, self.upload, self.startedAt)
            }
        }
        for part in full { try await store(part) }
    }

    func store(_ bytes: [UInt8]) async throws {
        let index = state.withLock { state -> Int in
            defer { state.parts += 1 }
            return state.parts
        }
        try await storage.write { db in
            try await db.execute(
                #"INSERT INTO "$mediaPart" (blob, part, bytes) VALUES (?, ?, ?)"#, self.upload, index,
                SQLValue.blob(bytes))
        }
    }

    /// Writes the last part and, in one transaction, names the parts by their hash — or drops them when a blob of
    /// that hash exists already (renewing its time).
    func commit(as sha256: String, size: Int64, now: Date) async throws {
        let rest = state.withLock { state -> [UInt8] in
            defer { state.pending = [] }
            return state.pending
        }
        if !rest.isEmpty { try await store(rest) }
        let upload = upload
        try await storage.write { db in
            let inserted = try await db.execute(
                #"INSERT INTO "$mediaBlob" (hash, size, touchedAt) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING"#,
                sha256, size, now)
            if inserted > 0 {
                try await db.execute(#"UPDATE "$mediaPart" SET blob = ? WHERE blob = ?"#, sha256, upload)
            } else {
                try await db.execute(#"UPDATE "$mediaBlob" SET touchedAt = ? WHERE hash = ?"#, now, sha256)
                try await db.execute(#"DELETE FROM "$mediaPart" WHERE blob = ?"#, upload)
            }
            try await db.execute(#"DELETE FROM "$mediaUpload" WHERE blob = ?"#, upload)
        }
    }

    func abandon() async throws {
        let upload = upload
        try await storage.write { db in
            try await db.execute(#"DELETE FROM "$mediaPart" WHERE blob = ?"#, upload)
            try await db.execute(#"DELETE FROM "$mediaUpload" WHERE blob = ?"#, upload)
        }
    }
}

extension DataService {
    /// The SHA-256 of every media resource an entity names now.
    func referencedMedia() async throws -> Set<String> {
        var hashes: Set<String> = []
        for set in model.entitySets {
            guard let type = model.entityType(of: set), type.hasStream, type.property(named: "SHA256") != nil else {
                continue
            }
            let dialect = store.storage.dialect
            let rows = try await store.storage.read { db in
                try await db.fetchAll(
                    "SELECT DISTINCT \(dialect.quote("SHA256")) FROM \(dialect.quote(set.name)) WHERE \(dialect.quote("SHA256")) IS NOT NULL"
                )
            }
            for row in rows { if let hash = row[0].text { hashes.insert(hash) } }
        }
        // And every stream property's.
        let streams = try await store.storage.read { db in try await db.fetchAll(#"SELECT sha256 FROM "$stream""#) }
        for row in streams { if let hash = row[0].text { hashes.insert(hash) } }
        return hashes
    }

    /// Removes resumable uploads untouched for ``ResumableUploadStore/expiry``, and media bytes no entity has named
    /// for ``MediaStore/grace`` (``MediaStore/sweep(now:referenced:)``).
    func sweepMedia() async throws -> Int {
        let now = clock.now()
        try await ResumableUploadStore(storage: store.storage).sweep(
            before: now.addingTimeInterval(-ResumableUploadStore.expiry))
        return try await media.sweep(now: now) { try await referencedMedia() }
    }
}

extension BatonServer {
    /// Removes the stored bytes of photos that no entity names any more — deleted photos, replaced ones, uploads
    /// whose entity was refused — once they are an hour old; returns how many went.
    @discardableResult
    public func sweepMedia() async throws -> Int { try await data.sweepMedia() }
}
