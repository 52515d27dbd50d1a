import BatonOData
import BatonSQL
import BatonSQLGRDB
import Crypto
import Foundation
import GRDB
import GRDBSQLite

/// What a device downloads: an entity set with an optional filter, relative to the service root (SAP:
/// OfflineODataDefiningQuery), e.g. `PreflightChecks?$filter=Status eq 'final'`.
public struct DefiningQuery: Sendable, Hashable, Codable {
    public var name: String
    public var url: String

    public init(name: String, url: String) {
        self.name = name
        self.url = url
    }
}

/// The user the store is open for: their name on the server and their signing key on this device.
public struct OfflineUser: Sendable {
    public var name: String
    public var signingKey: P256.Signing.PrivateKey

    public init(name: String, signingKey: P256.Signing.PrivateKey) {
        self.name = name
        self.signingKey = signingKey
    }
}

/// An entity as the store has it.
public struct LocalEntity: Sendable, Hashable {
    /// Its canonical URL relative to the service root, e.g. `PreflightChecks(…)`.
    public var id: String
    public var values: [String: PrimitiveValue]
    /// The server's ETag of the version downloaded or last uploaded.
    public var etag: String?
    /// Changed on this device and not on the server yet.
    public var pending: Bool
}

/// One queued change: everything needed to upload it later, by whoever is signed in then.
public struct QueueEntry: Sendable, Hashable {
    public var sequence: Int64
    /// Reused as `Repeatability-Request-ID`, so a retried upload applies once.
    public var requestID: String
    public var author: String
    public var device: String
    /// `Baton-Created-At`.
    public var createdAt: String
    public var method: String
    /// Relative to the service root.
    public var url: String
    public var body: [UInt8]
    public var ifMatch: String?
    /// The `If-Match` the author signed (`Baton-If-Match`): the ETag the change was recorded against, `*`, or
    /// empty for a create. `ifMatch` may move on to versions this device's earlier changes made; this never does.
    public var signedIfMatch: String
    /// The author's signature over the canonical form (base64url), made when the change was recorded.
    public var signature: String
    /// The entity the change is about (canonical URL).
    public var entityID: String
    /// For a photo (a media entity's bytes): their SHA-256, which the author signed; the bytes wait in the store.
    public var media: String? = nil
}

/// A change the server refused, kept with the server's reason (and, for a conflict, its current version)
/// until the app resolves it.
public struct ArchiveEntry: Sendable, Hashable {
    public var entry: QueueEntry
    public var status: Int
    public var code: String
    public var message: String
    /// The server's current version of the entity, for conflicts.
    public var serverVersion: JSONValue?
}

/// One property of an entity in conflict: the server's value beside the device's.
public struct ConflictField: Sendable, Hashable {
    public var property: String
    /// The server's value; nil when the server has no version of the entity.
    public var server: PrimitiveValue?
    /// The device's value; nil when the entity is deleted on the device.
    public var mine: PrimitiveValue?
    /// Whether the archived change sets this property.
    public var changedHere: Bool

    public init(property: String, server: PrimitiveValue?, mine: PrimitiveValue?, changedHere: Bool) {
        self.property = property
        self.server = server
        self.mine = mine
        self.changedHere = changedHere
    }

    /// Whether the two versions differ in this property.
    public var differs: Bool { server != mine }
}

/// The device's offline OData store: one per device, shared by its users (SAP: SAPOfflineOData with
/// currentUser). Local reads and writes go through the same OData model and the server's own SQL translation;
/// each local change and its queue entry are written in one transaction; `upload(using:allowOnBehalf:)`
/// and `download(using:)` sync with baton-server.
public actor OfflineStore {
    public nonisolated let model: ServiceModel
    public nonisolated let deviceID: String
    public nonisolated let definingQueries: [DefiningQuery]
    /// The entity sets more than one defining query reads: their entities remember which queries hold them
    /// (`$held`), so one query's "left my set" removes an entity only when no other query still holds it.
    nonisolated let sharedSets: Set<String>
    public nonisolated let url: URL
    var database: DatabaseQueue?
    let now: @Sendable () -> Date
    var user: OfflineUser?
    var progressObservers: [UUID: AsyncStream<SyncProgress>.Continuation] = [:]
    /// Where photos' bytes are kept, sealed under the store key; `nil` while the store is closed.
    var photoFiles: PhotoFiles?
    /// Counts the store's closings: work that awaited the network checks it did not change meanwhile (a photo
    /// downloaded for a store closed and opened again, under another key, is not kept).
    var closings = 0
    /// How long an upload batch, a download page or a read of the server's version may take before the store
    /// gives up on it (and retries at the next sync). Default: 30 seconds.
    public private(set) var requestTimeout: Duration = .seconds(30)
    /// The most bytes of photos already on the server that the device keeps (``photo(_:using:)``); photos waiting
    /// for their upload are never dropped. Default: 200 MiB.
    public internal(set) var photoCacheLimit = 200 * 1024 * 1024
    /// How many bytes of a photo go in one request of its resumable upload: a broken connection costs at most
    /// this much again. Default: 1 MiB.
    public private(set) var photoChunkSize = 1024 * 1024

    /// Sets ``requestTimeout``.
    public func setRequestTimeout(_ timeout: Duration) { requestTimeout = timeout }

    /// Sets ``photoChunkSize`` (at least 1 KiB).
    public func setPhotoChunkSize(_ bytes: Int) { photoChunkSize = max(1024, bytes) }

    /// Whether SQLite's `PRAGMA integrity_check` finds the open store whole (every page decrypts and every
    /// b-tree and index agrees).
    public func integrityCheck() throws(OfflineError) -> Bool {
        try read { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") == "ok" }
    }

    /// The fault harness's knob: SQLite checkpoints the log after this many pages (its default is 1,000), so the
    /// harness's writes also meet a log that starts over on its old frames.
    package func setLogCheckpoint(pages: Int) throws(OfflineError) {
        let database = try requireDatabase()
        do {
            try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_autocheckpoint = \(pages)") }
        } catch {
            throw OfflineError(.storage, "Cannot set the log's checkpoint: \(error)")
        }
    }

    var translator: SQLTranslator { SQLTranslator(model: model, dialect: .sqlite) }

    static let etagColumn = "$etag"

    /// The store whose encrypted file is at `url`; ``open(as:key:)`` opens it for a user.
    ///
    /// - Throws: ``OfflineError`` `BadRequest` for a defining query that is not an entity set of the model.
    public init(
        url: URL, model: ServiceModel, deviceID: String, definingQueries: [DefiningQuery],
        now: @escaping @Sendable () -> Date = { Date() }
    ) throws(OfflineError) {
        self.url = url
        self.model = model
        self.deviceID = deviceID
        self.definingQueries = definingQueries
        self.now = now
        var readers: [String: Int] = [:]
        for query in definingQueries {
            let parsed: ODataURL
            do { parsed = try ODataURL(parsing: query.url, model: model) } catch {
                throw OfflineError(.badRequest, "Defining query '\(query.name)': \(error.description)")
            }
            guard case .resource(let segments) = parsed.path, segments.count == 1,
                case .entitySet(let name)? = segments.first
            else {
                throw OfflineError(.badRequest, "Defining query '\(query.name)' must name an entity set.")
            }
            readers[name, default: 0] += 1
        }
        sharedSets = Set(readers.filter { $0.value > 1 }.keys)
    }

    static func migrate(_ db: Database, model: ServiceModel) throws {
        let schema = SQLSchema(model: model, dialect: .sqlite, systemColumns: [(etagColumn, "TEXT")])
        for statement in schema.createStatements() { try db.execute(sql: statement) }
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS "$queue" (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT, requestID TEXT NOT NULL UNIQUE, author TEXT NOT NULL,
                    device TEXT NOT NULL, createdAt TEXT NOT NULL, method TEXT NOT NULL, url TEXT NOT NULL,
                    body BLOB NOT NULL, ifMatch TEXT, signature TEXT NOT NULL, entityID TEXT NOT NULL,
                    firstSentAt TEXT);
                CREATE INDEX IF NOT EXISTS "$queueEntity" ON "$queue" (entityID, seq);
                CREATE TABLE IF NOT EXISTS "$archive" (
                    seq INTEGER PRIMARY KEY, requestID TEXT NOT NULL, author TEXT NOT NULL, device TEXT NOT NULL,
                    createdAt TEXT NOT NULL, method TEXT NOT NULL, url TEXT NOT NULL, body BLOB NOT NULL,
                    ifMatch TEXT, signature TEXT NOT NULL, entityID TEXT NOT NULL, status INTEGER NOT NULL,
                    code TEXT NOT NULL, message TEXT NOT NULL, serverVersion TEXT);
                CREATE TABLE IF NOT EXISTS "$deltaLinks" (query TEXT PRIMARY KEY NOT NULL, link TEXT NOT NULL);
                CREATE TABLE IF NOT EXISTS "$held" (
                    query TEXT NOT NULL, entityID TEXT NOT NULL, PRIMARY KEY (query, entityID)) WITHOUT ROWID;
                CREATE INDEX IF NOT EXISTS "$heldEntity" ON "$held" (entityID);
                """)
        // Links stored page by page stand exactly where the device's copy does (`exact`); older ones may not.
        let linkColumns = try Row.fetchAll(db, sql: #"PRAGMA table_info("$deltaLinks")"#).map { $0["name"] as String }
        if !linkColumns.contains("exact") {
            try db.execute(sql: #"ALTER TABLE "$deltaLinks" ADD COLUMN exact INTEGER NOT NULL DEFAULT 0"#)
        }
        // The signed If-Match (baton-change-v2); changes queued before it carry v1 signatures, which the server
        // refuses into the error archive, where their author records them again. A photo's SHA-256 (`media`).
        for table in ["$queue", "$archive"] {
            let columns = try Row.fetchAll(db, sql: "PRAGMA table_info(\"\(table)\")").map { $0["name"] as String }
            if !columns.contains("signedIfMatch") {
                try db.execute(sql: "ALTER TABLE \"\(table)\" ADD COLUMN signedIfMatch TEXT NOT NULL DEFAULT ''")
            }
            if !columns.contains("media") { try db.execute(sql: "ALTER TABLE \"\(table)\" ADD COLUMN media TEXT") }
        }
        // Photos' bytes, in parts: the ones taken here until they are uploaded, and those opened since (a cache).
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS "$mediaPart" (
                    entityID TEXT NOT NULL, part INTEGER NOT NULL, bytes BLOB NOT NULL, PRIMARY KEY (entityID, part)
                ) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS "$mediaInfo" (
                    entityID TEXT PRIMARY KEY NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
                    contentType TEXT NOT NULL, pending INTEGER NOT NULL, lastUsed REAL NOT NULL);
                """)
        // Since photos went to files of their own (``PhotoFiles``): the file's name; parts for older photos.
        let mediaColumns = try Row.fetchAll(db, sql: #"PRAGMA table_info("$mediaInfo")"#).map { $0["name"] as String }
        if !mediaColumns.contains("file") { try db.execute(sql: #"ALTER TABLE "$mediaInfo" ADD COLUMN file TEXT"#) }
    }

    // MARK: Users

    /// Opens the store for `user` with the device's store key (from that user's secure store): their changes
    /// are recorded and signed as theirs. Creates the encrypted database on first use.
    ///
    /// - Throws: ``OfflineError`` `Storage` when the file cannot be opened with this key or was altered.
    public func open(as user: OfflineUser, key: SymmetricKey) throws(OfflineError) {
        if database == nil {
            EncryptedVFS.register(key: key, for: url.path)
            do {
                var configuration = Configuration()
                configuration.journalMode = .wal
                configuration.prepareDatabase { db in
                    // Before the first page is written: room for each page's nonce and tag.
                    var reserve = EncryptedVFS.reservedBytes
                    let code = sqlite3_file_control(db.sqliteConnection, "main", SQLITE_FCNTL_RESERVE_BYTES, &reserve)
                    guard code == SQLITE_OK else { throw OfflineError(.storage, "SQLite refused the page layout.") }
                    try db.execute(sql: "PRAGMA temp_store = MEMORY")
                }
                let queue = try DatabaseQueue(path: url.path, configuration: configuration)
                // GRDB's WAL mode comes with `synchronous = NORMAL`, where a commit reaches the disk only at the
                // next checkpoint: a tablet that loses power could forget a check it reported recorded. FULL
                // flushes the log at each commit.
                try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
                let model = model
                try queue.write { db in try Self.migrate(db, model: model) }
                // Encrypted, but still nobody else's business: owner-only, like the secure stores.
                for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: url.path + suffix) {
                    try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: url.path + suffix)
                }
                database = queue
                photoFiles = PhotoFiles(store: url, storeKey: key)
                try sweepPhotoFiles()
            } catch {
                EncryptedVFS.unregister(url.path)
                throw Self.openFailure(error, file: url.lastPathComponent)
            }
        }
        self.user = user
    }

    /// Why the store did not open, as it is: a page that does not authenticate means another key or an altered
    /// file; anything else (no space, no file handle, a file SQLite cannot open) is said by SQLite's own words.
    static func openFailure(_ error: any Error, file: String) -> OfflineError {
        if let error = error as? OfflineError { return error }
        guard let error = error as? DatabaseError else {
            return OfflineError(.storage, "The offline store at \(file) cannot be opened: \(error)")
        }
        let code = error.extendedResultCode.rawValue
        guard code != IOError.data && error.resultCode != .SQLITE_NOTADB && error.resultCode != .SQLITE_CORRUPT else {
            return OfflineError(
                .storage,
                "The offline store at \(file) cannot be opened: it was made with another store key, or its file was altered (SQLite \(code))."
            )
        }
        return OfflineError(
            .storage,
            "The offline store at \(file) cannot be opened: \(String(cString: sqlite3_errstr(error.extendedResultCode.rawValue))) (SQLite \(error.extendedResultCode.rawValue))."
        )
    }

    /// Closes the store (on lock, sign-out or user switch): the database is closed and its key forgotten.
    public func close() {
        user = nil
        photoFiles = nil
        closings += 1
        try? database?.close()
        database = nil
        EncryptedVFS.unregister(url.path)
    }

    /// The user the store is open for.
    public var currentUser: String? { user?.name }

    /// Whether the store is open for a user (a locked device's store is closed: its key is not in memory).
    public var isOpen: Bool { database != nil && user != nil }

    func requireDatabase() throws(OfflineError) -> DatabaseQueue {
        guard let database else {
            throw OfflineError(.notOpen, "The offline store is closed; a user must sign in to open it.")
        }
        return database
    }

    func requireUser() throws(OfflineError) -> OfflineUser {
        guard let user else { throw OfflineError(.notOpen, "The offline store is not open for a user; sign in first.") }
        return user
    }

    // MARK: Local reads

    /// Entities for a URL relative to the service root: an entity set or one entity, with `$filter`,
    /// `$select`, `$orderby`, `$top`, `$skip` executed locally (your own unsynced changes included).
    public func read(_ url: String) throws(OfflineError) -> [LocalEntity] {
        let (set, type, options) = try parseRead(url)
        let query: SQLQuery
        do {
            query = try translator.select(from: set.name, options: options, extraColumns: [Self.etagColumn])
        } catch {
            throw OfflineError(.badRequest, error.message)
        }
        let database = try requireDatabase()
        do {
            return try database.read { db in
                let rows = try Row.fetchAll(db, sql: query.sql, arguments: query.statementArguments)
                let pending = try Self.pendingIDs(in: db)
                return try rows.map { row in
                    var values: [String: PrimitiveValue] = [:]
                    for property in type.properties where row.hasColumn(property.name) {
                        let stored: DatabaseValue = row[property.name]
                        values[property.name] = try SQLDialect.sqlite.decode(
                            SQLValue(stored), as: property.type, column: property.name)
                    }
                    let id = try Self.entityID(set: set.name, type: type, values: values)
                    return LocalEntity(
                        id: id, values: values, etag: row[Self.etagColumn], pending: pending.contains(id))
                }
            }
        } catch let error as OfflineError {
            throw error
        } catch {
            throw OfflineError(.storage, "Cannot read the offline store: \(error)")
        }
    }

    /// How many entities a URL selects (its `$top`/`$skip` ignored).
    public func count(_ url: String) throws(OfflineError) -> Int {
        var (set, _, options) = try parseRead(url)
        options.top = nil
        options.skip = nil
        do {
            let query = try translator.count(from: set.name, options: options)
            return try requireDatabase().read { db in
                try Int.fetchOne(db, sql: query.sql, arguments: query.statementArguments) ?? 0
            }
        } catch let error as BatonSQLError {
            throw OfflineError(.badRequest, error.message)
        } catch let error as OfflineError {
            throw error
        } catch {
            throw OfflineError(.storage, "Cannot read the offline store: \(error)")
        }
    }

    func parseRead(_ url: String) throws(OfflineError) -> (EntitySet, EntityType, QueryOptions) {
        let parsed: ODataURL
        do { parsed = try ODataURL(parsing: url, model: model) } catch {
            throw OfflineError(.badRequest, error.description)
        }
        guard case .resource(let segments) = parsed.path, case .entitySet(let name)? = segments.first,
            let set = model.entitySet(named: name), let type = model.entityType(of: set), segments.count <= 2
        else { throw OfflineError(.badRequest, "The offline store reads entity sets and single entities.") }
        var options = parsed.query
        if segments.count == 2 {
            guard case .key(let key) = segments[1] else {
                throw OfflineError(.badRequest, "The offline store reads entity sets and single entities.")
            }
            options.filter = ODataExpression.conjunction(
                ODataExpression.keyConditions(key, of: type) + (options.filter.map { [$0] } ?? []))
        }
        return (set, type, options)
    }

    /// The canonical URL of an entity from its key values.
    static func entityID(set: String, type: EntityType, values: [String: PrimitiveValue]) throws(OfflineError)
        -> String
    {
        ResourcePath.canonicalURL(entitySet: set, key: try key(of: type, in: values))
    }

    /// The key of an entity from its values.
    static func key(of type: EntityType, in values: [String: PrimitiveValue]) throws(OfflineError) -> [KeyValue] {
        var key: [KeyValue] = []
        for name in type.key {
            guard let value = values[name], value != .null else {
                throw OfflineError(.badRequest, "The entity has no value for its key property '\(name)'.")
            }
            key.append(KeyValue(name: name, value: value))
        }
        return key
    }
}
