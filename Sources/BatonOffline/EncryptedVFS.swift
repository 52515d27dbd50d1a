import Crypto
import Foundation
import GRDBSQLite
import Synchronization

/// Encryption at rest for the offline store: an SQLite VFS that encrypts every database page — in the main
/// file and in the write-ahead log — with AES-256-GCM under the device's store key.
///
/// Each 4096-byte page keeps its last 32 bytes free (SQLite's per-page reserved space, set when the database
/// is created): the first 4064 bytes are encrypted in place, and a fresh 12-byte nonce, the 16-byte tag and a
/// format byte go into the reserved bytes, as SQLCipher does. The page's offset and the file kind are
/// authenticated data — and for a page of the WAL, its frame header's page number and commit size — so a
/// page moved, swapped, relabelled or altered is detected when read (``OfflineError`` `Storage`), never silently
/// used. The WAL's file and frame headers stay as SQLite writes them, in plain text; the pages in its frames are
/// encrypted. Rollback journals and temporary files are refused (the store runs in WAL mode with
/// `temp_store = MEMORY`), so nothing is ever written in plain text.
///
/// The VFS is registered as SQLite's default once per process; files without a registered key (a server's
/// databases in the same process, for example) go straight to the platform VFS, untouched.
enum EncryptedVFS {
    static let pageSize = 4096
    static let reservedBytes: Int32 = 32
    static var payloadSize: Int { pageSize - Int(reservedBytes) }
    static let keys = Mutex<[String: SymmetricKey]>([:])

    /// Registers the VFS (once) and the key for the database at `path` (and its WAL).
    static func register(key: SymmetricKey, for path: String) {
        _ = registered
        keys.withLock { $0[path] = key }
    }

    static func unregister(_ path: String) { keys.withLock { $0[path] = nil } }

    static func key(for path: String) -> SymmetricKey? {
        keys.withLock { keys in keys[path] ?? (path.hasSuffix("-wal") ? keys[String(path.dropLast(4))] : nil) }
    }

    static let registered: Bool = {
        guard let platform = sqlite3_vfs_find(nil) else { return false }
        let vfs = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)
        vfs.initialize(to: platform.pointee)
        vfs.pointee.zName = UnsafePointer(strdup("baton-aes256gcm"))
        vfs.pointee.pAppData = UnsafeMutableRawPointer(platform)
        vfs.pointee.szOsFile = max(platform.pointee.szOsFile, Int32(headerSize))
        vfs.pointee.xOpen = { vfs, name, file, flags, outFlags in
            guard let vfs, let file, let platform = vfs.pointee.pAppData?.assumingMemoryBound(to: sqlite3_vfs.self)
            else { return SQLITE_ERROR }
            let path = name.map { String(cString: $0) }
            guard let path, let key = EncryptedVFS.key(for: path) else {
                // Not an encrypted store's file: refuse temporary and journal files next to an encrypted store,
                // pass everything else to the platform VFS untouched.
                return platform.pointee.xOpen(platform, name, file, flags, outFlags)
            }
            let kind: FileKind
            if flags & SQLITE_OPEN_MAIN_DB != 0 {
                kind = .main
            } else if flags & SQLITE_OPEN_WAL != 0 {
                kind = .wal
            } else {
                return SQLITE_CANTOPEN
            }
            let inner = UnsafeMutableRawPointer.allocate(byteCount: Int(platform.pointee.szOsFile), alignment: 16)
            inner.initializeMemory(as: UInt8.self, repeating: 0, count: Int(platform.pointee.szOsFile))
            let innerFile = inner.assumingMemoryBound(to: sqlite3_file.self)
            let code = platform.pointee.xOpen(platform, name, innerFile, flags, outFlags)
            guard code == SQLITE_OK else {
                if innerFile.pointee.pMethods != nil { _ = innerFile.pointee.pMethods.pointee.xClose(innerFile) }
                inner.deallocate()
                return code
            }
            let box = EncryptedFile(inner: innerFile, kind: kind, key: key, path: path)
            let raw = UnsafeMutableRawPointer(file)
            raw.storeBytes(
                of: Unmanaged.passRetained(box).toOpaque(), toByteOffset: boxOffset, as: UnsafeMutableRawPointer.self)
            file.pointee.pMethods = UnsafePointer(methods)
            return SQLITE_OK
        }
        return sqlite3_vfs_register(vfs, 1) == SQLITE_OK
    }()

    /// Our file: SQLite's `sqlite3_file` header, then a pointer to the ``EncryptedFile``.
    static var boxOffset: Int { MemoryLayout<sqlite3_file>.stride }
    static var headerSize: Int { boxOffset + MemoryLayout<UnsafeMutableRawPointer>.stride }

    static func box(_ file: UnsafeMutablePointer<sqlite3_file>?) -> EncryptedFile? {
        guard let file else { return nil }
        let pointer = UnsafeMutableRawPointer(file).load(fromByteOffset: boxOffset, as: UnsafeMutableRawPointer.self)
        return Unmanaged<EncryptedFile>.fromOpaque(pointer).takeUnretainedValue()
    }

    // Written once here, then only read by SQLite.
    nonisolated(unsafe) static let methods: UnsafeMutablePointer<sqlite3_io_methods> = {
        let methods = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
        methods.initialize(to: sqlite3_io_methods())
        methods.pointee.iVersion = 2  // no xFetch: memory-mapped reads would bypass decryption
        methods.pointee.xClose = { file in
            guard let file, let box = EncryptedVFS.box(file) else { return SQLITE_ERROR }
            let code = box.inner.pointee.pMethods.pointee.xClose(box.inner)
            UnsafeMutableRawPointer(box.inner).deallocate()
            let pointer = UnsafeMutableRawPointer(file).load(
                fromByteOffset: EncryptedVFS.boxOffset, as: UnsafeMutableRawPointer.self)
            Unmanaged<EncryptedFile>.fromOpaque(pointer).release()
            return code
        }
        methods.pointee.xRead = { file, buffer, amount, offset in
            guard let box = EncryptedVFS.box(file), let buffer else { return IOError.read }
            return box.read(into: buffer, amount: Int(amount), offset: Int(offset))
        }
        methods.pointee.xWrite = { file, buffer, amount, offset in
            guard let box = EncryptedVFS.box(file), let buffer else { return IOError.write }
            switch DiskFaults.next(sync: false, path: box.path) {
            case .proceed:
                return box.write(from: buffer, amount: Int(amount), offset: Int(offset))
            case .fail(let code):
                return code
            case .tear(let thenDie):
                _ = box.write(from: buffer, amount: Int(amount), offset: Int(offset), storing: max(1, Int(amount) / 2))
                if thenDie { DiskFaults.die() }
                return SQLITE_FULL
            case .dieAfter:
                _ = box.write(from: buffer, amount: Int(amount), offset: Int(offset))
                DiskFaults.die()
            }
        }
        methods.pointee.xTruncate = { file, size in
            guard let box = EncryptedVFS.box(file) else { return IOError.truncate }
            return box.inner.pointee.pMethods.pointee.xTruncate(box.inner, size)
        }
        methods.pointee.xSync = { file, flags in
            guard let box = EncryptedVFS.box(file) else { return IOError.fsync }
            switch DiskFaults.next(sync: true, path: box.path) {
            case .proceed, .tear:
                return box.inner.pointee.pMethods.pointee.xSync(box.inner, flags)
            case .fail(let code):
                return code
            case .dieAfter:
                _ = box.inner.pointee.pMethods.pointee.xSync(box.inner, flags)
                DiskFaults.die()
            }
        }
        methods.pointee.xFileSize = { file, size in
            guard let box = EncryptedVFS.box(file) else { return IOError.fstat }
            return box.inner.pointee.pMethods.pointee.xFileSize(box.inner, size)
        }
        methods.pointee.xLock = { file, level in
            guard let box = EncryptedVFS.box(file) else { return IOError.lock }
            return box.inner.pointee.pMethods.pointee.xLock(box.inner, level)
        }
        methods.pointee.xUnlock = { file, level in
            guard let box = EncryptedVFS.box(file) else { return IOError.unlock }
            return box.inner.pointee.pMethods.pointee.xUnlock(box.inner, level)
        }
        methods.pointee.xCheckReservedLock = { file, result in
            guard let box = EncryptedVFS.box(file) else { return IOError.checkReservedLock }
            return box.inner.pointee.pMethods.pointee.xCheckReservedLock(box.inner, result)
        }
        methods.pointee.xFileControl = { file, operation, argument in
            guard let box = EncryptedVFS.box(file) else { return SQLITE_NOTFOUND }
            // Memory-mapped I/O would bypass decryption.
            if operation == SQLITE_FCNTL_MMAP_SIZE { return SQLITE_NOTFOUND }
            return box.inner.pointee.pMethods.pointee.xFileControl(box.inner, operation, argument)
        }
        methods.pointee.xSectorSize = { file in
            guard let box = EncryptedVFS.box(file) else { return 4096 }
            return box.inner.pointee.pMethods.pointee.xSectorSize(box.inner)
        }
        methods.pointee.xDeviceCharacteristics = { file in
            guard let box = EncryptedVFS.box(file) else { return 0 }
            return box.inner.pointee.pMethods.pointee.xDeviceCharacteristics(box.inner)
        }
        methods.pointee.xShmMap = { file, page, size, extend, pointer in
            guard let box = EncryptedVFS.box(file) else { return IOError.shmMap }
            return box.inner.pointee.pMethods.pointee.xShmMap(box.inner, page, size, extend, pointer)
        }
        methods.pointee.xShmLock = { file, offset, count, flags in
            guard let box = EncryptedVFS.box(file) else { return IOError.shmLock }
            return box.inner.pointee.pMethods.pointee.xShmLock(box.inner, offset, count, flags)
        }
        methods.pointee.xShmBarrier = { file in
            guard let box = EncryptedVFS.box(file) else { return }
            box.inner.pointee.pMethods.pointee.xShmBarrier(box.inner)
        }
        methods.pointee.xShmUnmap = { file, delete in
            guard let box = EncryptedVFS.box(file) else { return IOError.shmUnmap }
            return box.inner.pointee.pMethods.pointee.xShmUnmap(box.inner, delete)
        }
        return methods
    }()

    enum FileKind: UInt8 {
        case main = 1
        case wal = 2
    }
}

/// One open encrypted file: the platform VFS's file underneath, its kind, key and path.
final class EncryptedFile: @unchecked Sendable {
    // SQLite serialises calls on one file handle; the handle is never shared between threads at once.
    let inner: UnsafeMutablePointer<sqlite3_file>
    let kind: EncryptedVFS.FileKind
    let key: SymmetricKey
    let path: String

    init(inner: UnsafeMutablePointer<sqlite3_file>, kind: EncryptedVFS.FileKind, key: SymmetricKey, path: String) {
        self.inner = inner
        self.kind = kind
        self.key = key
        self.path = path
    }

    /// The stretch of the file containing `offset`: where it starts, how long it is, whether it is an
    /// encrypted page.
    func unit(containing offset: Int) -> (start: Int, length: Int, encrypted: Bool) {
        let page = EncryptedVFS.pageSize
        switch kind {
        case .main:
            return (offset / page * page, page, true)
        case .wal:
            if offset < 32 { return (0, 32, false) }
            let frame = 24 + page
            let start = 32 + (offset - 32) / frame * frame
            if offset < start + 24 { return (start, 24, false) }
            return (start + 24, page, true)
        }
    }

    /// What a page's encryption authenticates besides its content: the file kind and the page's offset, and for a
    /// page of the log its frame header's page number and commit size (format 2), so a frame cannot be relabelled
    /// as another page or made a commit without its page failing. Not the salts: SQLite writes a frame's header
    /// with zero salts while it may still rewrite frames of the transaction (`walEncodeFrame` when `iReCksum` is
    /// set) and puts the real salts in afterwards (`walRewriteChecksums`), page untouched. Format 0 (offset only)
    /// is every page of the database file, and log pages written before format 2.
    func authenticatedData(_ start: Int, frameHeader: [UInt8]?) -> [UInt8] {
        var data: [UInt8] = Array((frameHeader == nil ? "baton-page-v1" : "baton-page-v2").utf8) + [kind.rawValue]
        withUnsafeBytes(of: UInt64(start).bigEndian) { data += $0 }
        if let frameHeader { data += frameHeader }
        return data
    }

    /// The page number and commit size in the frame header before the log page at `start` (SQLite writes a
    /// frame's header just before its page), or nil when they cannot be read.
    func frameHeader(before start: Int) -> [UInt8]? {
        var header = [UInt8](repeating: 0, count: 8)
        let code = header.withUnsafeMutableBytes { bytes in
            inner.pointee.pMethods.pointee.xRead(inner, bytes.baseAddress, 8, sqlite3_int64(start - 24))
        }
        return code == SQLITE_OK ? header : nil
    }

    func read(into buffer: UnsafeMutableRawPointer, amount: Int, offset: Int) -> Int32 {
        var position = offset
        let end = offset + amount
        var short = false
        while position < end {
            let unit = unit(containing: position)
            let segmentEnd = min(end, unit.start + unit.length)
            let destination = buffer.advanced(by: position - offset)
            if !unit.encrypted {
                let code = inner.pointee.pMethods.pointee.xRead(
                    inner, destination, Int32(segmentEnd - position), sqlite3_int64(position))
                if code == IOError.shortRead { short = true } else if code != SQLITE_OK { return code }
            } else {
                var stored = [UInt8](repeating: 0, count: unit.length)
                let code = stored.withUnsafeMutableBytes { bytes in
                    inner.pointee.pMethods.pointee.xRead(
                        inner, bytes.baseAddress, Int32(unit.length), sqlite3_int64(unit.start))
                }
                if code == IOError.shortRead {
                    // Past the end of the file: nothing was ever written here.
                    guard stored.allSatisfy({ $0 == 0 }) else { return IOError.data }
                    destination.initializeMemory(as: UInt8.self, repeating: 0, count: segmentEnd - position)
                    short = true
                } else if code != SQLITE_OK {
                    return code
                } else if let plain = open(
                    stored, at: unit.start, frameHeader: kind == .wal ? frameHeader(before: unit.start) : nil)
                {
                    plain[(position - unit.start)..<(segmentEnd - unit.start)].withUnsafeBytes { bytes in
                        if let base = bytes.baseAddress { destination.copyMemory(from: base, byteCount: bytes.count) }
                    }
                } else if readTornPage(unit: unit.start, into: buffer, offset: offset, amount: amount) {
                    destination.initializeMemory(as: UInt8.self, repeating: 0, count: segmentEnd - position)
                } else {
                    return IOError.data
                }
            }
            position = segmentEnd
        }
        return short ? IOError.shortRead : SQLITE_OK
    }

    /// Whether a page that does not authenticate is read the way SQLite recovers from a torn page — one a write
    /// the process (or the power) died in left half new, half old — in the two places it meets one:
    /// - the database header, read alone when the store opens: a checkpoint that was copying page 1 from the log
    ///   into the database tore it. It reads as zeros, and SQLite, finding no header, takes page 1 from the log,
    ///   where it still is (and reads it whole, authenticated).
    /// - a page of the log read together with its frame header, as SQLite's recovery reads every frame: the frame
    ///   header handed back gets a salt no log has (its first salt inverted), so the log ends before that frame,
    ///   as it ends before a torn plain frame. That frame's transaction had not committed; what an attacker puts
    ///   in a frame — any page number, any commit size, a checksum made for any content — cannot make it count.
    ///
    /// Every other read of a page that does not authenticate fails (`SQLITE_IOERR_DATA`).
    func readTornPage(unit start: Int, into buffer: UnsafeMutableRawPointer, offset: Int, amount: Int) -> Bool {
        switch kind {
        case .main:
            return start == 0 && offset == 0 && amount <= 100
        case .wal:
            guard offset <= start - 24 else { return false }
            let salt = buffer.advanced(by: start - 24 - offset + 8).assumingMemoryBound(to: UInt8.self)
            for index in 0..<4 { salt[index] = ~salt[index] }
            return true
        }
    }

    /// Writes `amount` bytes at `offset`, encrypting whole pages. `storing` (fault injection only) stops after that
    /// many bytes have reached the file: a torn write.
    func write(from buffer: UnsafeRawPointer, amount: Int, offset: Int, storing limit: Int = .max) -> Int32 {
        var budget = limit
        var position = offset
        let end = offset + amount
        while position < end {
            let unit = unit(containing: position)
            let segmentEnd = min(end, unit.start + unit.length)
            let source = buffer.advanced(by: position - offset)
            if !unit.encrypted {
                let count = min(budget, segmentEnd - position)
                let code = inner.pointee.pMethods.pointee.xWrite(inner, source, Int32(count), sqlite3_int64(position))
                if code != SQLITE_OK { return code }
                budget -= count
                if budget == 0 { return SQLITE_FULL }
            } else {
                var plain = [UInt8](repeating: 0, count: unit.length)
                if position != unit.start || segmentEnd != unit.start + unit.length {
                    // A partial page: read, change, write back.
                    let code = plain.withUnsafeMutableBytes { bytes in
                        bytes.baseAddress.map { read(into: $0, amount: unit.length, offset: unit.start) }
                            ?? IOError.read
                    }
                    if code != SQLITE_OK && code != IOError.shortRead { return code }
                }
                plain.replaceSubrange(
                    (position - unit.start)..<(segmentEnd - unit.start),
                    with: UnsafeRawBufferPointer(start: source, count: segmentEnd - position))
                var header: [UInt8]?
                if kind == .wal {
                    // SQLite wrote the frame's header just before: its page is bound to it.
                    guard let written = frameHeader(before: unit.start) else { return IOError.write }
                    header = written
                }
                guard let sealed = seal(plain, at: unit.start, frameHeader: header) else { return IOError.write }
                let count = min(budget, unit.length)
                let code = sealed.withUnsafeBytes { bytes in
                    inner.pointee.pMethods.pointee.xWrite(
                        inner, bytes.baseAddress, Int32(count), sqlite3_int64(unit.start))
                }
                if code != SQLITE_OK { return code }
                budget -= count
                if budget == 0 { return SQLITE_FULL }
            }
            position = segmentEnd
        }
        return SQLITE_OK
    }

    /// Encrypts a page's payload; nonce, tag and format (2 when bound to a frame header, else 0) go into its
    /// reserved bytes.
    func seal(_ plain: [UInt8], at start: Int, frameHeader: [UInt8]?) -> [UInt8]? {
        let payload = EncryptedVFS.payloadSize
        guard
            let box = try? AES.GCM.seal(
                plain[0..<payload], using: key, authenticating: authenticatedData(start, frameHeader: frameHeader))
        else { return nil }
        var page = Array(box.ciphertext)
        page += Array(box.nonce)
        page += Array(box.tag)
        page.append(frameHeader == nil ? 0 : 2)
        page += [UInt8](repeating: 0, count: EncryptedVFS.pageSize - page.count)
        return page
    }

    /// Decrypts a stored page; nil when it was altered, moved, relabelled or made with another key. A log page
    /// of format 2 is checked against its frame header; format 0 against its offset only.
    func open(_ stored: [UInt8], at start: Int, frameHeader: [UInt8]?) -> [UInt8]? {
        let payload = EncryptedVFS.payloadSize
        let bound: [UInt8]?
        switch stored[payload + 28] {
        case 0: bound = nil
        case 2 where frameHeader != nil: bound = frameHeader
        default: return nil
        }
        guard let nonce = try? AES.GCM.Nonce(data: stored[payload..<payload + 12]),
            let box = try? AES.GCM.SealedBox(
                nonce: nonce, ciphertext: stored[0..<payload], tag: stored[payload + 12..<payload + 28]),
            let plain = try? AES.GCM.open(
                box, using: key, authenticating: authenticatedData(start, frameHeader: bound))
        else { return nil }
        return Array(plain) + [UInt8](repeating: 0, count: Int(EncryptedVFS.reservedBytes))
    }
}

// SQLite's extended I/O result codes are C macros Swift does not import.
enum IOError {
    static func code(_ extended: Int32) -> Int32 { SQLITE_IOERR | (extended << 8) }
    static let read = code(1)
    static let shortRead = code(2)
    static let write = code(3)
    static let fsync = code(4)
    static let truncate = code(6)
    static let fstat = code(7)
    static let unlock = code(8)
    static let checkReservedLock = code(14)
    static let lock = code(15)
    static let shmLock = code(20)
    static let shmMap = code(21)
    static let shmUnmap = SQLITE_IOERR
    static let data = code(32)
}
