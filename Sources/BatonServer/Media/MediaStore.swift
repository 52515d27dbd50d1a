import BatonOData
import BatonSQL
import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Synchronization

/// A media resource as stored: named by the SHA-256 of its bytes (after the location was removed).
struct StoredMedia: Sendable, Hashable, Codable {
    /// The SHA-256 of the bytes, lower-case hex.
    var sha256: String
    /// The SHA-256 of the bytes as they arrived, before the location was removed (the same when there was none, or
    /// when the tablet removed it, with the same code): what an author's signature covers.
    var receivedSHA256: String
    var size: Int64
    var kind: ImageKind
    /// The `Slug` the bytes came with (the entity's properties as the author sent them), which an author's
    /// signature covers with the SHA-256.
    var slug: String?
}

/// Why an upload is refused; nothing is stored then.
struct MediaRefusal: Error, Sendable, Equatable {
    enum Reason: Sendable, Equatable {
        case empty
        case tooLarge(limit: Int)
        case notAnImage
        case truncated
        case metadataOutOfReach
        /// The bytes are `actual`, not the `declared` type their `Content-Type` names.
        case mismatch(declared: ImageKind, actual: ImageKind)
        /// The bytes' SHA-256 is not the one `Content-Digest` gives.
        case digestMismatch
    }

    var reason: Reason
}

/// Where media entities' bytes live: on SQLite, files under the data directory named by their SHA-256 (written
/// to a temporary file while they stream in, flushed to disk, then renamed into place); on PostgreSQL, rows of
/// 256 KiB parts in the database, so every instance serves every photo. Each is checked against its name when it
/// is read.
///
/// Bytes are never held whole in memory: an upload keeps its first ``ImageHead/length`` bytes (where the metadata
/// whose location is removed lies) and one part at a time.
struct MediaStore: Sendable {
    enum Backend: Sendable {
        case files(URL)
        case postgres(PostgresStorage)
    }

    let backend: Backend
    /// How long an upload's bytes may stay unreferenced before ``sweep(referenced:)`` removes them: an upload and
    /// the entity that names it are written one after the other, seconds apart.
    static let grace: TimeInterval = 3600
    static let partSize = 256 * 1024
    /// Held while a blob file is renamed into place or renewed, and while the sweep decides to unlink one: so a
    /// sweep never removes a file an upload has just renewed (SQLite: one server process owns the directory).
    static let fileLock = Mutex(())

    init(backend: Backend) { self.backend = backend }

    /// The file of a blob (SQLite): `media/ab/abcdef…`.
    func file(_ sha256: String, in directory: URL) -> URL {
        directory.appendingPathComponent(String(sha256.prefix(2)), isDirectory: true).appendingPathComponent(sha256)
    }

    /// Whether `text` is a SHA-256 in lower-case hex (what names a blob: never a path from outside).
    static func isHash(_ text: String) -> Bool {
        text.utf8.count == 64 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    // MARK: Writing

    /// Stores the bytes of `body`: checks they are a JPEG, PNG or HEIC by their first bytes, removes the location
    /// from their metadata unless `keepLocation`, and refuses more than `limit` bytes.
    ///
    /// - Throws: ``MediaRefusal`` for bytes that are refused (nothing is kept), or a storage error.
    func ingest<Body: AsyncSequence & Sendable>(
        _ body: Body, limit: Int, keepLocation: Bool, declared: ImageKind?, digest: [UInt8]? = nil, slug: String?,
        now: Date
    ) async throws -> StoredMedia where Body.Element == ByteBuffer {
        var head: [UInt8] = []
        var hasher = SHA256()
        var received = SHA256()
        var size = 0
        var sink: Sink?
        var tail: [UInt8] = []
        var kind: ImageKind?
        var watcher: PNGChunkWatcher?
        /// Checks and cleans the head, then writes it: what follows streams straight through.
        func start(isWhole: Bool) async throws {
            received.update(data: head)
            let (found, rest) = try prepare(&head, isWhole: isWhole, keepLocation: keepLocation)
            if let declared, declared != found {
                throw MediaRefusal(reason: .mismatch(declared: declared, actual: found))
            }
            kind = found
            watcher = rest
            sink = try await openSink(now: now)
            hasher.update(data: head)
            try await sink?.write(head)
            tail = Array(head.suffix(12))
            head = []
        }
        do {
            for try await buffer in body {
                let offset = size
                size += buffer.readableBytes
                guard size <= limit else { throw MediaRefusal(reason: .tooLarge(limit: limit)) }
                if kind == nil {
                    head.append(contentsOf: buffer.readableBytesView)
                    // What cannot be an image is refused on its first bytes, before more is read.
                    if head.count >= 12, ImageKind(sniffing: head) == nil {
                        throw MediaRefusal(reason: .notAnImage)
                    }
                    if head.count >= ImageHead.length { try await start(isWhole: false) }
                    continue
                }
                let bytes = Array(buffer.readableBytesView)
                if !keepLocation {
                    do { try watcher?.feed(bytes, at: offset) } catch {
                        throw MediaRefusal(reason: .metadataOutOfReach)
                    }
                }
                hasher.update(data: bytes)
                received.update(data: bytes)
                try await sink?.write(bytes)
                tail = Array((tail + bytes).suffix(12))
            }
            if kind == nil {
                guard !head.isEmpty else { throw MediaRefusal(reason: .empty) }
                try await start(isWhole: true)
            }
            guard let kind, let opened = sink else { throw MediaRefusal(reason: .empty) }
            guard kind.endsComplete(tail) else { throw MediaRefusal(reason: .truncated) }
            let sha256 = hasher.finalize().lowercaseHex
            let receivedDigest = Array(received.finalize())
            // The bytes the client says it sent (`Content-Digest`) are the bytes that arrived, or nothing is kept.
            if let digest, digest != receivedDigest { throw MediaRefusal(reason: .digestMismatch) }
            try await opened.commit(as: sha256, size: Int64(size), now: now)
            return StoredMedia(
                sha256: sha256, receivedSHA256: receivedDigest.lowercaseHex, size: Int64(size), kind: kind,
                slug: slug)
        } catch {
            try? await sink?.abandon()
            throw error
        }
    }

    /// Checks the head and removes the location from it; for a PNG whose chunks go on, their watcher.
    func prepare(_ head: inout [UInt8], isWhole: Bool, keepLocation: Bool) throws(MediaRefusal) -> (
        ImageKind, PNGChunkWatcher?
    ) {
        do {
            if keepLocation { return (try ImageHead.inspect(head, isWhole: isWhole), nil) }
            let scrubbed = try ImageHead.scrub(&head, isWhole: isWhole)
            return (scrubbed.kind, scrubbed.watcher)
        } catch .notAnImage {
            throw MediaRefusal(reason: .notAnImage)
        } catch .truncated {
            throw MediaRefusal(reason: .truncated)
        } catch {
            throw MediaRefusal(reason: .metadataOutOfReach)
        }
    }

    /// Where an upload's bytes go until they are named.
    enum Sink: Sendable {
        case file(FileSink)
        case rows(RowSink)

        func write(_ bytes: [UInt8]) async throws {
            switch self {
            case .file(let sink): try sink.write(bytes)
            case .rows(let sink): try await sink.write(bytes)
            }
        }

        func commit(as sha256: String, size: Int64, now: Date) async throws {
            switch self {
            case .file(let sink): try sink.commit(as: sha256, now: now)
            case .rows(let sink): try await sink.commit(as: sha256, size: size, now: now)
            }
        }

        func abandon() async throws {
            switch self {
            case .file(let sink): sink.abandon()
            case .rows(let sink): try await sink.abandon()
            }
        }
    }

    func openSink(now: Date) async throws -> Sink {
        switch backend {
        case .files(let directory): return .file(try FileSink(directory: directory, store: self))
        case .postgres(let storage): return .rows(RowSink(storage: storage, now: now))
        }
    }

    // MARK: Reading

    /// A blob, checked against its name (its bytes read and hashed part by part), ready to be read part by part
    /// as the answer is written; `nil` when it is missing.
    ///
    /// - Throws: ``MediaCorruption`` when the stored bytes do not hash to their name.
    func open(_ sha256: String) async throws -> MediaReader? {
        guard Self.isHash(sha256) else { return nil }
        switch backend {
        case .files(let directory):
            let url = file(sha256, in: directory)
            let present = try await NIOThreadPool.singleton.runIfActive { () throws -> Bool in
                guard FileManager.default.fileExists(atPath: url.path) else { return false }
                var hasher = SHA256()
                for part in try FileParts(url: url) { hasher.update(data: part) }
                guard hasher.finalize().lowercaseHex == sha256 else { throw MediaCorruption(sha256: sha256) }
                return true
            }
            return present ? .file(url) : nil
        case .postgres(let storage):
            let count = try await storage.readStatement {
                try await $0.fetchOne(#"SELECT count(*) FROM "$mediaPart" WHERE blob = ?"#, sha256)?[0].integer ?? 0
            }
            guard count > 0 else { return nil }
            var hasher = SHA256()
            for index in 0..<Int(count) {
                hasher.update(data: try await MediaReader.part(index, of: sha256, in: storage))
            }
            guard hasher.finalize().lowercaseHex == sha256 else { throw MediaCorruption(sha256: sha256) }
            return .rows(storage, sha256: sha256, parts: Int(count))
        }
    }

    /// A blob checked against its name, for an answer: 404 when it is missing, 500 `MediaCorrupt` (logged, with its
    /// hash only) when its bytes are damaged.
    func answerReader(_ sha256: String, logger: Logger?) async throws -> MediaReader {
        let reader: MediaReader?
        do {
            reader = try await open(sha256)
        } catch is MediaCorruption {
            logger?.error("Stored media bytes do not match their SHA-256", metadata: ["media.sha256": "\(sha256)"])
            throw ServerError(
                .internalServerError, "MediaCorrupt",
                "The stored bytes of this photo are damaged; an administrator restores them from a backup.")
        }
        guard let reader else { throw ServerError.notFound("The bytes of this photo are missing.") }
        return reader
    }

    // MARK: Sweeping

    /// Removes the blobs no entity names any more that were last written more than ``grace`` ago, and the parts
    /// of uploads abandoned as long ago; returns how many blobs went.
    ///
    /// - Parameters:
    ///   - now: the time now.
    ///   - referenced: the hashes the entities name now (read after the candidates were listed, so an entity
    ///     created meanwhile keeps its blob).
    /// - Returns: how many blobs were removed.
    /// - Throws: a storage error.
    @discardableResult
    func sweep(now: Date, referenced: () async throws -> Set<String>) async throws -> Int {
        let cutoff = now.addingTimeInterval(-Self.grace)
        switch backend {
        case .files(let directory):
            var candidates: [URL] = []
            let manager = FileManager.default
            for shard in (try? manager.contentsOfDirectory(atPath: directory.path)) ?? [] {
                let folder = directory.appendingPathComponent(shard, isDirectory: true)
                for name in (try? manager.contentsOfDirectory(atPath: folder.path)) ?? [] {
                    let url = folder.appendingPathComponent(name)
                    let modified = (try? manager.attributesOfItem(atPath: url.path)[.modificationDate]) as? Date
                    if let modified, modified < cutoff { candidates.append(url) }
                }
            }
            guard !candidates.isEmpty else { return 0 }
            let kept = try await referenced()
            var removed = 0
            for url in candidates where !kept.contains(url.lastPathComponent) {
                let gone = Self.fileLock.withLock { _ -> Bool in
                    // Renewed since it was listed: an upload of the same bytes is about to name it.
                    let modified = (try? manager.attributesOfItem(atPath: url.path)[.modificationDate]) as? Date
                    guard let modified, modified < cutoff else { return false }
                    return (try? manager.removeItem(at: url)) != nil
                }
                if gone, Self.isHash(url.lastPathComponent) { removed += 1 }
            }
            return removed
        case .postgres(let storage):
            let candidates = try await storage.readStatement {
                try await $0.fetchAll(#"SELECT hash FROM "$mediaBlob" WHERE touchedAt < ?"#, cutoff).compactMap {
                    $0[0].text
                }
            }
            let kept = try await referenced()
            var removed = 0
            for hash in candidates where !kept.contains(hash) {
                removed += try await storage.write { db in
                    let gone = try await db.execute(
                        #"DELETE FROM "$mediaBlob" WHERE hash = ? AND touchedAt < ?"#, hash, cutoff)
                    if gone > 0 { try await db.execute(#"DELETE FROM "$mediaPart" WHERE blob = ?"#, hash) }
                    return gone
                }
            }
            // Parts of uploads that never finished (their process stopped mid-upload).
            try await storage.write { db in
                try await db.execute(
                    #"DELETE FROM "$mediaPart" WHERE blob IN (SELECT blob FROM "$mediaUpload" WHERE startedAt < ?)"#,
                    cutoff)
                try await db.execute(#"DELETE FROM "$mediaUpload" WHERE startedAt < ?"#, cutoff)
            }
            return removed
        }
    }
}

/// A checked blob's bytes, read one part at a time as they are written out (never all at once).
enum MediaReader: Sendable {
    case file(URL)
    case rows(PostgresStorage, sha256: String, parts: Int)

    /// The bytes as an answer's body, written part by part as the client takes them.
    var responseBody: ResponseBody {
        ResponseBody { writer in
            try await forEachPart { try await writer.write(ByteBuffer(bytes: $0)) }
            try await writer.finish(nil)
        }
    }

    /// Calls `body` with each part in order, reading the next only when `body` returned.
    func forEachPart(_ body: @concurrent ([UInt8]) async throws -> Void) async throws {
        switch self {
        case .file(let url):
            let handle = try FileHandle(forReadingFrom: url)
            defer { try? handle.close() }
            while true {
                let part = try await NIOThreadPool.singleton.runIfActive {
                    try handle.read(upToCount: MediaStore.partSize).map(Array.init) ?? []
                }
                if part.isEmpty { return }
                try await body(part)
            }
        case .rows(let storage, let sha256, let parts):
            for index in 0..<parts { try await body(try await Self.part(index, of: sha256, in: storage)) }
        }
    }

    static func part(_ index: Int, of sha256: String, in storage: PostgresStorage) async throws -> [UInt8] {
        let row = try await storage.readStatement {
            try await $0.fetchOne(#"SELECT bytes FROM "$mediaPart" WHERE blob = ? AND part = ?"#, sha256, index)
        }
        guard case .blob(let bytes)? = row?[0] else { throw MediaCorruption(sha256: sha256) }
        return bytes
    }
}

/// Stored bytes that do not hash to their name: a disk or database that changed them.
struct MediaCorruption: Error, Sendable {
    var sha256: String
}
