import BatonOData
import BatonSQL
import Foundation
import GRDB

/// The entity data of the OData service: one SQLite file (`data.sqlite`) with a table per entity set, created
/// and migrated from the model.
///
/// Every row carries a hidden `$seq` column: the value of a service-wide sequence at its last change. It is
/// the entity's ETag and what delta links compare against. Deleted entities leave a tombstone in `$removed`
/// with the sequence value of the deletion.
struct DataStore: Sendable {
    /// The data database (reads in place: short, bounded by the page size).
    let storage: SQLiteStorage
    let model: ServiceModel

    /// The GRDB pool (migrations, tests).
    var pool: DatabasePool { storage.pool }

    static let sequenceColumn = "$seq"
    /// Audit entries of committed changes not yet in the audit log (server.sqlite): written in the change's own
    /// transaction, so a crash between the two databases loses none.
    static let auditOutbox = "$auditOutbox"

    init(directory: DataDirectory, model: ServiceModel) throws(ServerSetupError) {
        self.model = model
        do {
            storage = try SQLiteStorage(
                path: directory.url.appendingPathComponent("data.sqlite").path, readsInPlace: true)
            try storage.pool.write { db in try Self.migrate(db, model: model) }
        } catch let error as ServerSetupError {
            throw error
        } catch {
            throw ServerSetupError("Cannot open or migrate the data database in '\(directory.url.path)': \(error)")
        }
    }

    /// Closes every connection to the data database.
    func close() {
        storage.close()
    }

    /// Creates missing tables and adds columns for properties new to the model.
    static func migrate(_ db: Database, model: ServiceModel) throws {
        let dialect = SQLDialect.sqlite
        let schema = SQLSchema(
            model: model, dialect: dialect, systemColumns: [(sequenceColumn, "INTEGER NOT NULL DEFAULT 0")])
        for statement in schema.createStatements() { try db.execute(sql: statement) }
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS \(dialect.quote(auditOutbox)) (
                    key TEXT PRIMARY KEY, at REAL NOT NULL, actor TEXT, action TEXT NOT NULL, subject TEXT,
                    address TEXT, detail TEXT)
                """)
        for set in model.entitySets {
            guard let type = model.entityType(of: set) else { continue }
            let existing = Set(
                try Row.fetchAll(db, sql: "PRAGMA table_info(\(dialect.quote(set.name)))").map { $0["name"] as String })
            for property in type.properties where !existing.contains(property.name) {
                guard property.isNullable else {
                    throw ServerSetupError(
                        "The model adds non-nullable property '\(set.name)/\(property.name)' to existing data; make it nullable or migrate the data first."
                    )
                }
                try db.execute(
                    sql:
                        "ALTER TABLE \(dialect.quote(set.name)) ADD COLUMN \(dialect.quote(property.name)) \(dialect.columnType(for: property.type))"
                )
            }
            try db.execute(
                sql:
                    "CREATE INDEX IF NOT EXISTS \(dialect.quote("\(set.name)$seq")) ON \(dialect.quote(set.name)) (\(dialect.quote(sequenceColumn)))"
            )
        }
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS "$sequence" (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL, horizon INTEGER NOT NULL);
                INSERT INTO "$sequence" (id, value, horizon) VALUES (1, 0, 0) ON CONFLICT(id) DO NOTHING;
                CREATE TABLE IF NOT EXISTS "$removed" (seq INTEGER PRIMARY KEY, entitySet TEXT NOT NULL, keyJSON TEXT NOT NULL, removedAt REAL NOT NULL);
                CREATE INDEX IF NOT EXISTS "$removedSet" ON "$removed" (entitySet, seq);
                CREATE INDEX IF NOT EXISTS "$removedAt" ON "$removed" (removedAt);
                """)
        try migrateRepeatability(db)
    }

    /// The records of applied repeatable requests: keyed by scope (the signing author and device, or the
    /// signed-in user) and request id; kept for ever, their stored answers only for the retention window.
    /// A store from before scopes (ids were global, records deleted after the window) is moved over.
    static func migrateRepeatability(_ db: Database) throws {
        let columns = try Row.fetchAll(db, sql: #"PRAGMA table_info("$repeatability")"#).map { $0["name"] as String }
        guard !columns.contains("scope") else { return }
        try db.execute(
            sql: """
                CREATE TABLE "$repeatabilityScoped" (
                    scope TEXT NOT NULL, requestID TEXT NOT NULL, device TEXT, fingerprint TEXT NOT NULL,
                    status INTEGER NOT NULL, etag TEXT, headers TEXT, body TEXT, createdAt REAL NOT NULL,
                    PRIMARY KEY (scope, requestID));
                """)
        if !columns.isEmpty {
            try db.execute(
                sql: """
                    INSERT INTO "$repeatabilityScoped" (scope, requestID, fingerprint, status, headers, body, createdAt)
                    SELECT '', requestID, fingerprint, status, headers, body, createdAt FROM "$repeatability";
                    DROP TABLE "$repeatability";
                    """)
        }
        try db.execute(
            sql: """
                ALTER TABLE "$repeatabilityScoped" RENAME TO "$repeatability";
                -- Every change drops the answers past the window: without this index, each prune scans the table.
                CREATE INDEX "$repeatabilityAnswered" ON "$repeatability" (createdAt) WHERE headers IS NOT NULL;
                -- A queued change moved onto a version its device made is checked against the ETags made there.
                CREATE INDEX "$repeatabilityDevice" ON "$repeatability" (device, etag) WHERE device IS NOT NULL;
                """)
    }

    /// Takes the next value of the service-wide sequence, inside the caller's write transaction.
    static func nextSequence(_ db: any SQLConnection) throws -> Int64 {
        try db.fetchOne(#"UPDATE "$sequence" SET value = value + 1 WHERE id = 1 RETURNING value"#)?[0].integer ?? 0
    }

    /// The current sequence value and the oldest delta token still answerable.
    static func sequenceState(_ db: any SQLConnection) throws -> (value: Int64, horizon: Int64) {
        let row = try db.fetchOne(#"SELECT value, horizon FROM "$sequence" WHERE id = 1"#)
        return (row?["value"].integer ?? 0, row?["horizon"].integer ?? 0)
    }

    /// Forgets tombstones older than `cutoff`; delta tokens from before them become unanswerable (410).
    static func purgeTombstones(_ db: any SQLConnection, before cutoff: Date) throws {
        guard let newest = try db.fetchOne(#"SELECT max(seq) FROM "$removed" WHERE removedAt < ?"#, cutoff)?[0].integer
        else { return }
        try db.execute(#"DELETE FROM "$removed" WHERE seq <= ?"#, newest)
        try db.execute(
            #"UPDATE "$sequence" SET horizon = CASE WHEN horizon > ? THEN horizon ELSE ? END WHERE id = 1"#, newest,
            newest)
    }
}
