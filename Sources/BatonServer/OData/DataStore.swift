import BatonOData
import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB

/// The entity data of the OData service: one SQLite file (`data.sqlite`) with a table per entity set, created
/// and migrated from the model.
///
/// Every row carries a hidden `$seq` column: the value of a service-wide sequence at its last change. It is
/// the entity's ETag and, on SQLite, what delta links compare against (on PostgreSQL they compare the `$xid`
/// of the change's transaction with snapshots: ``Watermark``). Deleted entities leave a tombstone in `$removed`
/// with the sequence value (and, on PostgreSQL, the transaction) of the deletion. `$created` and `$origin` tell which clients can hold a row (the
/// sequence value and device of its creation): a filtered delta sends "left the set" only to them.
struct DataStore: Sendable {
    /// The data database: `data.sqlite` in the data directory (reads in place: short, bounded by the page
    /// size), or the server's PostgreSQL database.
    let storage: StorageEngine
    let model: ServiceModel

    /// The GRDB pool, on SQLite (tests).
    var pool: DatabasePool? {
        guard case .sqlite(let storage) = storage else { return nil }
        return storage.pool
    }

    static let sequenceColumn = "$seq"
    /// The sequence value of the entity's creation (0 for entities from before the column): a client whose delta
    /// token is older never held it.
    static let createdColumn = "$created"
    /// The device the entity was created on, when the server knows it (`Baton-Device`, registered to the
    /// uploader): that device holds it whatever its delta token says.
    static let originColumn = "$origin"

    /// On PostgreSQL, the transaction that made the row's last change (`xid8`, set on insert by default and on
    /// update by the `$stamp` trigger): what delta links compare against there (``Watermark``).
    static let changeColumn = "$xid"
    /// On PostgreSQL, the transaction that created the row: which clients can hold it (``createdColumn``'s part
    /// there).
    static let createdTransactionColumn = "$createdXid"
    /// The columns PostgreSQL has and SQLite does not (a copy between the engines leaves them to PostgreSQL).
    static let postgresOnlyColumns: Set<String> = [changeColumn, createdTransactionColumn]

    /// The system columns after the model's properties, with their types in `dialect`.
    static func systemColumns(_ dialect: SQLDialect) -> [(String, String)] {
        let integer = dialect == .postgres ? "bigint" : "INTEGER"
        var columns = [
            (sequenceColumn, "\(integer) NOT NULL DEFAULT 0"), (createdColumn, "\(integer) NOT NULL DEFAULT 0"),
            (originColumn, dialect == .postgres ? "text" : "TEXT"),
        ]
        if dialect == .postgres {
            columns += [
                (changeColumn, "xid8 NOT NULL DEFAULT pg_current_xact_id()"),
                (createdTransactionColumn, "xid8 NOT NULL DEFAULT pg_current_xact_id()"),
            ]
        }
        return columns
    }

    /// The sequence object PostgreSQL's writers take values from, a block at a time (``sequenceBlock``).
    static let sequenceObject = "$seqblocks"
    /// How many values of the sequence a PostgreSQL transaction takes at once: one `nextval` for up to this many
    /// changes, counted on in memory (the values are ETags; the gaps between blocks mean nothing).
    static let sequenceBlock: Int64 = 1_024
    /// Audit entries of committed changes not yet in the audit log (server.sqlite): written in the change's own
    /// transaction, so a crash between the two databases loses none.
    static let auditOutbox = "$auditOutbox"

    init(directory: DataDirectory, model: ServiceModel) throws(ServerSetupError) {
        try DataService.checkMediaTypes(model)
        self.model = model
        do {
            let storage = try SQLiteStorage(
                path: directory.url.appendingPathComponent("data.sqlite").path, readsInPlace: true)
            try storage.pool.write { db in try Self.migrate(db, model: model) }
            self.storage = .sqlite(storage)
        } catch let error as ServerSetupError {
            throw error
        } catch {
            throw ServerSetupError("Cannot open or migrate the data database in '\(directory.url.path)': \(error)")
        }
    }

    /// Keeps the entity data in the server's PostgreSQL database: creates missing tables (native column types,
    /// ``BatonSQL/SQLDialect/postgres``) and adds columns for properties new to the model, in one transaction
    /// under the migration lock.
    init(postgres storage: PostgresStorage, model: ServiceModel) async throws(ServerSetupError) {
        try DataService.checkMediaTypes(model)
        self.model = model
        self.storage = .postgres(storage)
        do {
            try await storage.migrate { db in try await Self.migratePostgres(db, model: model) }
        } catch let error as ServerSetupError {
            throw error
        } catch {
            throw ServerSetupError(
                "Cannot create or migrate the entity tables in \(storage.location.database): \(error)")
        }
    }

    static func migratePostgres(_ db: any SQLConnection, model: ServiceModel) async throws {
        let dialect = SQLDialect.postgres
        try await db.execute("SELECT pg_advisory_xact_lock(7243019)")
        let schema = SQLSchema(model: model, dialect: dialect, systemColumns: systemColumns(dialect))
        for statement in schema.createStatements() { try await db.execute(statement, []) }
        try await migrateChangeFunctions(db)
        for set in model.entitySets {
            guard let type = model.entityType(of: set) else { continue }
            let existing = Set(
                try await db.fetchAll(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?",
                    set.name
                ).compactMap { $0[0].text })
            // Tables from before a system column get it, with its default (created at 0, origin unknown).
            for (column, definition) in systemColumns(dialect) where !existing.contains(column) {
                try await db.execute(
                    "ALTER TABLE \(dialect.quote(set.name)) ADD COLUMN \(dialect.quote(column)) \(definition)", [])
            }
            for property in type.properties where !existing.contains(property.name) {
                guard property.isNullable else {
                    throw ServerSetupError(
                        "The model adds non-nullable property '\(set.name)/\(property.name)' to existing data; make it nullable or migrate the data first."
                    )
                }
                try await db.execute(
                    "ALTER TABLE \(dialect.quote(set.name)) ADD COLUMN \(dialect.quote(property.name)) \(dialect.columnType(for: property.type))",
                    [])
            }
            // Only when missing: CREATE INDEX IF NOT EXISTS locks the table even when the index is there, and
            // an instance starting beside a serving one would wait for its writers (or deadlock with them).
            let indexed =
                try await db.fetchOne(
                    "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?",
                    changesIndex(set.name)) != nil
            if !indexed {
                try await db.execute(changesIndexStatement(set.name, dialect: dialect), [])
                try await db.execute("DROP INDEX IF EXISTS \(dialect.quote("\(set.name)$seq"))", [])
            }
            try await migrateChangeTracking(db, table: set.name)
        }
        for statement in [
            """
            CREATE TABLE IF NOT EXISTS \(dialect.quote(auditOutbox)) (
                key text PRIMARY KEY, at double precision NOT NULL, actor text, action text NOT NULL, subject text,
                address text, detail text, ordinal bigint GENERATED BY DEFAULT AS IDENTITY)
            """,
            #"CREATE TABLE IF NOT EXISTS "$sequence" (id integer PRIMARY KEY CHECK (id = 1), value bigint NOT NULL, horizon bigint NOT NULL)"#,
            #"INSERT INTO "$sequence" (id, value, horizon) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING"#,
            #"CREATE TABLE IF NOT EXISTS "$removed" (seq bigint PRIMARY KEY, entitySet text NOT NULL, keyJSON text NOT NULL, removedAt double precision NOT NULL)"#,
            #"CREATE INDEX IF NOT EXISTS "$removedSet" ON "$removed" (entitySet, seq)"#,
            #"CREATE INDEX IF NOT EXISTS "$removedAt" ON "$removed" (removedAt)"#,
            """
            CREATE TABLE IF NOT EXISTS "$repeatability" (
                scope text NOT NULL, requestID text NOT NULL, device text, fingerprint text NOT NULL,
                status integer NOT NULL, etag text, headers text, body text, createdAt double precision NOT NULL,
                PRIMARY KEY (scope, requestID))
            """,
            #"CREATE INDEX IF NOT EXISTS "$repeatabilityAnswered" ON "$repeatability" (createdAt) WHERE headers IS NOT NULL"#,
            #"CREATE INDEX IF NOT EXISTS "$repeatabilityDevice" ON "$repeatability" (device, etag) WHERE device IS NOT NULL"#,
            // Media entities' bytes (``MediaStore``): blobs by SHA-256, their parts, and uploads in progress.
            #"CREATE TABLE IF NOT EXISTS "$mediaBlob" (hash text PRIMARY KEY, size bigint NOT NULL, touchedAt double precision NOT NULL)"#,
            #"CREATE TABLE IF NOT EXISTS "$mediaPart" (blob text NOT NULL, part integer NOT NULL, bytes bytea NOT NULL, PRIMARY KEY (blob, part))"#,
            #"CREATE TABLE IF NOT EXISTS "$mediaUpload" (blob text PRIMARY KEY, startedAt double precision NOT NULL)"#,
            // Resumable uploads in progress (``ResumableUploadStore``) and the parts they received.
            """
            CREATE TABLE IF NOT EXISTS "$resumable" (
                id text PRIMARY KEY, owner text NOT NULL, requestID text NOT NULL, request text NOT NULL,
                length bigint NOT NULL, received bigint NOT NULL, parts integer NOT NULL, media text,
                createdAt double precision NOT NULL, touchedAt double precision NOT NULL, UNIQUE (owner, requestID))
            """,
            #"CREATE TABLE IF NOT EXISTS "$resumablePart" (upload text NOT NULL, part integer NOT NULL, bytes bytea NOT NULL, PRIMARY KEY (upload, part))"#,
            // Which bytes each stream property (`Edm.Stream`) holds (``DataService/changeStream``).
            """
            CREATE TABLE IF NOT EXISTS "$stream" (
                entitySet text NOT NULL, entity text NOT NULL, property text NOT NULL, sha256 text NOT NULL,
                contentType text NOT NULL, size bigint NOT NULL, owner text NOT NULL,
                PRIMARY KEY (entitySet, entity, property))
            """,
            #"CREATE INDEX IF NOT EXISTS "$streamOwner" ON "$stream" (owner)"#,
        ] {
            // What exists is left alone without taking a lock: instances start beside serving ones.
            let prefix = #"CREATE INDEX IF NOT EXISTS ""#
            if statement.hasPrefix(prefix) {
                let name = String(statement.dropFirst(prefix.count).prefix { $0 != "\"" })
                let exists = try await db.fetchOne(
                    "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?", name)
                if exists != nil { continue }
            } else if statement.hasPrefix(#"INSERT INTO "$sequence""#) {
                if try await db.fetchOne(#"SELECT 1 FROM "$sequence" WHERE id = 1"#) != nil { continue }
            }
            try await db.execute(statement, [])
        }
        try await migrateChangeTracking(db, table: "$removed")
        try await migrateSequenceObject(db)
    }

    /// On PostgreSQL, what orders a table's changes for delta links: the `$xid` column's index and, on entity
    /// tables, the `$stamp` trigger that sets it (and keeps `$createdXid`) on every update. Each is made only when
    /// missing: instances start beside serving ones.
    static func migrateChangeTracking(_ db: any SQLConnection, table: String) async throws {
        let dialect = SQLDialect.postgres
        if table == "$removed",
            try await db.fetchOne(
                "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? AND column_name = ?",
                table, changeColumn) == nil
        {
            try await db.execute(
                #"ALTER TABLE "$removed" ADD COLUMN "$xid" xid8 NOT NULL DEFAULT pg_current_xact_id()"#)
        }
        let index = "\(table)$xid"
        if try await db.fetchOne(
            "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?", index) == nil
        {
            try await db.execute(
                "CREATE INDEX \(dialect.quote(index)) ON \(dialect.quote(table)) (\(dialect.quote(changeColumn)))")
        }
        guard table != "$removed" else { return }
        let trigger = "\(table)$stamp"
        if try await db.fetchOne(
            "SELECT 1 FROM pg_trigger WHERE tgname = ? AND tgrelid = ?::regclass", trigger, dialect.quote(table)) == nil
        {
            try await db.execute(
                "CREATE TRIGGER \(dialect.quote(trigger)) BEFORE UPDATE ON \(dialect.quote(table)) FOR EACH ROW EXECUTE FUNCTION \"$stamp\"()"
            )
        }
    }

    /// On PostgreSQL, the functions of the change-tracking triggers, made once: `$stamp` (a row's last change and
    /// creating transaction) and `$sequenceFrozen`, which refuses the sequence row's value to writers of a
    /// `baton-server` from before the sequence object (an instance not yet upgraded would hand out values the
    /// new blocks also hand out: the same ETag twice, a tombstone's key taken, a delta link missing changes).
    static func migrateChangeFunctions(_ db: any SQLConnection) async throws {
        if try await db.fetchOne("SELECT 1 FROM pg_proc WHERE proname = '$stamp'") == nil {
            try await db.execute(
                """
                CREATE FUNCTION "$stamp"() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    NEW."$xid" := pg_current_xact_id();
                    NEW."$createdXid" := OLD."$createdXid";
                    RETURN NEW;
                END $$
                """)
        }
        if try await db.fetchOne("SELECT 1 FROM pg_proc WHERE proname = '$sequenceFrozen'") == nil {
            try await db.execute(
                """
                CREATE FUNCTION "$sequenceFrozen"() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    RAISE EXCEPTION 'baton-server was upgraded: writers take blocks of the sequence object "$seqblocks". Stop and upgrade every older instance.'
                        USING ERRCODE = '55000';
                END $$
                """)
        }
    }

    /// On PostgreSQL, the sequence object writers take their values from, created once from the sequence row's
    /// value (the writers' turn it replaces), and the horizon of the tombstones forgotten since, as a transaction
    /// id (`xidHorizon`): delta tokens from before are sequence values, still answered (``Watermark/window``).
    static func migrateSequenceObject(_ db: any SQLConnection) async throws {
        let exists =
            try await db.fetchOne(
                "SELECT 1 FROM pg_class WHERE relkind = 'S' AND relname = ? AND relnamespace = current_schema()::regnamespace",
                sequenceObject) != nil
        guard !exists else { return }
        try await db.execute(
            "CREATE SEQUENCE \(SQLDialect.postgres.quote(sequenceObject)) AS bigint INCREMENT BY \(sequenceBlock) MINVALUE 1"
        )
        try await db.execute(
            #"SELECT setval(?::regclass, greatest(value, 1)) FROM "$sequence" WHERE id = 1"#,
            SQLDialect.postgres.quote(sequenceObject))
        try await db.execute(#"ALTER TABLE "$sequence" ADD COLUMN xidHorizon bigint NOT NULL DEFAULT 0"#)
        try await db.execute(
            #"CREATE TRIGGER "$sequenceFrozen" BEFORE UPDATE OF value ON "$sequence" FOR EACH ROW WHEN (NEW.value <> OLD.value) EXECUTE FUNCTION "$sequenceFrozen"()"#
        )
    }

    /// Closes every connection to the data database.
    func close() {
        storage.close()
    }

    /// Creates missing tables and adds columns for properties new to the model.
    static func migrate(_ db: Database, model: ServiceModel) throws {
        let dialect = SQLDialect.sqlite
        let schema = SQLSchema(model: model, dialect: dialect, systemColumns: systemColumns(dialect))
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
            for (column, definition) in systemColumns(dialect) where !existing.contains(column) {
                try db.execute(
                    sql: "ALTER TABLE \(dialect.quote(set.name)) ADD COLUMN \(dialect.quote(column)) \(definition)")
            }
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
            try db.execute(sql: changesIndexStatement(set.name, dialect: dialect))
            try db.execute(sql: "DROP INDEX IF EXISTS \(dialect.quote("\(set.name)$seq"))")
        }
        try db.execute(
            sql: """
                CREATE TABLE IF NOT EXISTS "$sequence" (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL, horizon INTEGER NOT NULL);
                INSERT INTO "$sequence" (id, value, horizon) VALUES (1, 0, 0) ON CONFLICT(id) DO NOTHING;
                CREATE TABLE IF NOT EXISTS "$removed" (seq INTEGER PRIMARY KEY, entitySet TEXT NOT NULL, keyJSON TEXT NOT NULL, removedAt REAL NOT NULL);
                CREATE INDEX IF NOT EXISTS "$removedSet" ON "$removed" (entitySet, seq);
                CREATE INDEX IF NOT EXISTS "$removedAt" ON "$removed" (removedAt);
                CREATE TABLE IF NOT EXISTS "$resumable" (
                    id TEXT PRIMARY KEY, owner TEXT NOT NULL, requestID TEXT NOT NULL, request TEXT NOT NULL,
                    length INTEGER NOT NULL, received INTEGER NOT NULL, parts INTEGER NOT NULL, media TEXT,
                    createdAt REAL NOT NULL, touchedAt REAL NOT NULL, UNIQUE (owner, requestID));
                CREATE TABLE IF NOT EXISTS "$resumablePart" (
                    upload TEXT NOT NULL, part INTEGER NOT NULL, bytes BLOB NOT NULL, PRIMARY KEY (upload, part));
                CREATE TABLE IF NOT EXISTS "$stream" (
                    entitySet TEXT NOT NULL, entity TEXT NOT NULL, property TEXT NOT NULL, sha256 TEXT NOT NULL,
                    contentType TEXT NOT NULL, size INTEGER NOT NULL, owner TEXT NOT NULL,
                    PRIMARY KEY (entitySet, entity, property));
                CREATE INDEX IF NOT EXISTS "$streamOwner" ON "$stream" (owner);
                """)
        try migrateRepeatability(db)
        // Entries a crash left before instants were stored as numbers carry GRDB's date text.
        try db.execute(
            sql: """
                UPDATE \(dialect.quote(auditOutbox)) SET at = (julianday(at) - 2440587.5) * 86400.0
                WHERE typeof(at) = 'text'
                """)
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

    /// The index a delta walks: by sequence, with the creation columns (and, in every index, the key), so the
    /// entities a device may hold are told apart without reading the rows. It replaces `{set}$seq`.
    static func changesIndex(_ set: String) -> String { "\(set)$changes" }

    static func changesIndexStatement(_ set: String, dialect: SQLDialect) -> String {
        let columns = [sequenceColumn, createdColumn, originColumn].map(dialect.quote).joined(separator: ", ")
        return "CREATE INDEX IF NOT EXISTS \(dialect.quote(changesIndex(set))) ON \(dialect.quote(set)) (\(columns))"
    }

    /// The system columns of an entity created at `sequence` on `device` (nil: not known).
    static func created(at sequence: Int64, on device: String?) -> [(String, SQLValue)] {
        [
            (sequenceColumn, .integer(sequence)), (createdColumn, .integer(sequence)),
            (originColumn, device.map(SQLValue.text) ?? .null),
        ]
    }

    /// Runs a write that may take values of the service-wide sequence (every write of entities goes through here).
    ///
    /// On SQLite the one writer takes the values from the sequence row once and counts on in memory
    /// (``SequencedConnection``), writing the last back before the commit: values are taken in commit order,
    /// which delta links count on. On PostgreSQL writers do not wait for one another: each takes a block of values
    /// from the sequence object (one `nextval`, ``sequenceBlock`` values), and delta links compare the
    /// transactions that made the changes with snapshots (``Watermark``) instead of the values' order. (Before,
    /// every writer of every instance took the sequence row in turn, `LOCK TABLE "$sequence"`, so the fleet
    /// wrote in a single line: two instances did 0.88 times the batches of one.)
    func write<T: Sendable>(_ body: @escaping @Sendable (any SQLConnection) async throws -> T) async throws -> T {
        try await storage.write { db in
            let connection = SequencedConnection(db)
            let result = try await body(connection)
            try await connection.writeBack()
            return result
        }
    }

    /// Takes the next value of the service-wide sequence, inside the caller's ``write(_:)`` (from memory after the
    /// first).
    ///
    /// - Throws: ``StorageError`` when `db` is not the connection of a ``write(_:)``: on SQLite a write of entities
    ///   elsewhere could take values out of commit order (a delta reader would miss them).
    static func nextSequence(_ db: any SQLConnection) async throws -> Int64 {
        try await sequenced(db).next()
    }

    /// `db` as the connection of a ``write(_:)``, which takes the sequence's values.
    static func sequenced(_ db: any SQLConnection) async throws -> SequencedConnection {
        guard let sequenced = db as? SequencedConnection else {
            throw StorageError(
                .other, "A write of entities ran outside DataStore.write, where the sequence's values are taken.")
        }
        return sequenced
    }

    static func takeSequence(_ db: any SQLConnection) async throws -> Int64 {
        switch db.dialect {
        case .sqlite:
            return try await db.fetchOne(#"UPDATE "$sequence" SET value = value + 1 WHERE id = 1 RETURNING value"#)?[0]
                .integer ?? 0
        case .postgres:
            guard
                let first = try await db.fetchOne(
                    "SELECT nextval(?::regclass)", SQLDialect.postgres.quote(sequenceObject))?[0]
                    .integer
            else { throw StorageError(.other, "PostgreSQL answered no sequence value.") }
            return first
        }
    }

    /// The oldest delta tokens still answerable: a sequence value (every token on SQLite; on PostgreSQL those from
    /// before its writers took blocks), and on PostgreSQL the newest forgotten tombstone's transaction.
    static func horizons(_ db: any SQLConnection) async throws -> (sequence: Int64, transaction: Int64) {
        guard db.dialect == .postgres else { return (try await sequenceState(db).horizon, 0) }
        let row = try await db.fetchOne(#"SELECT horizon, xidHorizon FROM "$sequence" WHERE id = 1"#)
        return (row?["horizon"].integer ?? 0, row?["xidHorizon"].integer ?? 0)
    }

    /// On PostgreSQL, the highest value of the sequence any writer may have taken (the last block's end).
    static func highestIssued(_ db: any SQLConnection) async throws -> Int64 {
        let row = try await db.fetchOne(
            "SELECT last_value FROM \(SQLDialect.postgres.quote(sequenceObject))")
        return (row?[0].integer ?? 0) + sequenceBlock - 1
    }

    /// The current sequence value and the oldest delta token still answerable.
    static func sequenceState(_ db: any SQLConnection) async throws -> (value: Int64, horizon: Int64) {
        let row = try await db.fetchOne(#"SELECT value, horizon FROM "$sequence" WHERE id = 1"#)
        return (row?["value"].integer ?? 0, row?["horizon"].integer ?? 0)
    }

    /// Forgets tombstones older than `cutoff`; delta tokens from before them become unanswerable (410). The horizon
    /// is the newest forgotten tombstone's sequence value on SQLite, its transaction id on PostgreSQL.
    static func purgeTombstones(_ db: any SQLConnection, before cutoff: Date) async throws {
        let newest: Int64
        switch db.dialect {
        case .sqlite:
            guard
                let found = try await db.fetchOne(#"SELECT max(seq) FROM "$removed" WHERE removedAt < ?"#, cutoff)?[0]
                    .integer
            else { return }
            try await db.execute(#"DELETE FROM "$removed" WHERE seq <= ?"#, found)
            newest = found
        case .postgres:
            // Sequence values are not in commit order there: the old tombstones go by age, and tokens that may have
            // needed one go by either horizon.
            let purged = try await db.fetchAll(
                #"DELETE FROM "$removed" WHERE removedAt < ? RETURNING seq, "$xid"::text::bigint"#, cutoff)
            guard let found = purged.compactMap({ $0[0].integer }).max(),
                let transaction = purged.compactMap({ $0[1].integer }).max()
            else { return }
            newest = found
            try await db.execute(
                #"UPDATE "$sequence" SET xidHorizon = greatest(xidHorizon, ?) WHERE id = 1"#, transaction)
        }
        try await db.execute(
            #"UPDATE "$sequence" SET horizon = CASE WHEN horizon > ? THEN horizon ELSE ? END WHERE id = 1"#, newest,
            newest)
    }
}
