import BatonOData
import BatonSQL
import Foundation

/// The entity tables' schema, one migration for both engines over the storage seam: tables for the model's entity
/// sets with the system columns, columns for properties new to the model, and the service's own tables (audit
/// outbox, sequence, tombstones, repeatable requests, resumable uploads, stream properties; on PostgreSQL also the
/// media tables and the change-tracking triggers). It compares what is there with what the model needs, so it runs
/// at every start; on PostgreSQL it runs under the migration lock, and what exists is left alone without taking a
/// table's lock (instances start beside serving ones).
extension DataStore {
    /// Creates what is missing and adds columns for properties new to the model, in the caller's transaction.
    ///
    /// - Throws: ``ServerSetupError`` when the model adds a non-nullable property to an existing table; a storage
    ///   error when a statement fails.
    static func migrate(_ db: any SQLConnection, model: ServiceModel) async throws {
        let dialect = db.dialect
        let postgres = dialect == .postgres
        if postgres {
            try checkPostgresNames(model)
            try await db.execute("SELECT pg_advisory_xact_lock(7243019)")
        }
        let schema = SQLSchema(model: model, dialect: dialect, systemColumns: systemColumns(dialect))
        for statement in schema.createStatements() { try await db.execute(statement, []) }
        if postgres { try await migrateChangeFunctions(db) }
        for set in model.entitySets {
            guard let type = model.entityType(of: set) else { continue }
            let existing = try await columns(of: set.name, in: db)
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
            // Only when missing: on PostgreSQL, CREATE INDEX IF NOT EXISTS locks the table even when the index is
            // there, and an instance starting beside a serving one would wait for its writers (or deadlock).
            if try await !indexExists(changesIndex(set.name), in: db) {
                try await db.execute(changesIndexStatement(set.name, dialect: dialect), [])
                try await db.execute("DROP INDEX IF EXISTS \(dialect.quote("\(set.name)$seq"))", [])
            }
            if postgres { try await migrateChangeTracking(db, table: set.name) }
        }
        for statement in serviceTables(dialect) {
            // What exists is left alone without taking a lock.
            if let index = statement.index {
                if try await indexExists(index, in: db) { continue }
            } else if statement.sql.hasPrefix(#"INSERT INTO "$sequence""#) {
                if try await db.fetchOne(#"SELECT 1 FROM "$sequence" WHERE id = 1"#) != nil { continue }
            } else if statement.sql.hasPrefix(#"CREATE TABLE IF NOT EXISTS "$repeatability""#) {
                try await moveUnscopedRepeatability(db)
            }
            try await db.execute(statement.sql, [])
            // Columns a service table gained after it first shipped: a table made before them gets them now.
            for (table, column, definition) in addedServiceColumns(dialect)
            where statement.sql.hasPrefix("CREATE TABLE IF NOT EXISTS \(dialect.quote(table))") {
                if try await !columns(of: table, in: db).contains(column) {
                    try await db.execute(
                        "ALTER TABLE \(dialect.quote(table)) ADD COLUMN \(dialect.quote(column)) \(definition)", [])
                }
            }
        }
        if postgres {
            try await migrateChangeTracking(db, table: "$removed")
            try await migrateSequenceObject(db)
        } else {
            // Entries a crash left before instants were stored as numbers carry GRDB's date text.
            try await db.execute(
                """
                UPDATE \(dialect.quote(auditOutbox)) SET at = (julianday(at) - 2440587.5) * 86400.0
                WHERE typeof(at) = 'text'
                """, [])
        }
    }

    /// The service's own tables and indexes in `dialect`, in order; `index` names the index a statement creates.
    static func serviceTables(_ dialect: SQLDialect) -> [(sql: String, index: String?)] {
        let postgres = dialect == .postgres
        // The column types of each engine: SQLite's INTEGER PRIMARY KEY is the row id, as `$removed.seq` needs.
        let (text, real, integer, int32, bytes) =
            postgres
            ? ("text", "double precision", "bigint", "integer", "bytea")
            : ("TEXT", "REAL", "INTEGER", "INTEGER", "BLOB")
        var statements: [(String, String?)] = [
            (
                """
                CREATE TABLE IF NOT EXISTS \(dialect.quote(auditOutbox)) (
                    key \(text) PRIMARY KEY, at \(real) NOT NULL, actor \(text), action \(text) NOT NULL, subject \(text),
                    address \(text), detail \(text)\(postgres ? ", ordinal bigint GENERATED BY DEFAULT AS IDENTITY" : ""))
                """, nil
            ),
            (
                #"CREATE TABLE IF NOT EXISTS "$sequence" (id \#(int32) PRIMARY KEY CHECK (id = 1), value \#(integer) NOT NULL, horizon \#(integer) NOT NULL)"#,
                nil
            ),
            (#"INSERT INTO "$sequence" (id, value, horizon) VALUES (1, 0, 0) ON CONFLICT (id) DO NOTHING"#, nil),
            (
                #"CREATE TABLE IF NOT EXISTS "$removed" (seq \#(integer) PRIMARY KEY, entitySet \#(text) NOT NULL, keyJSON \#(text) NOT NULL, removedAt \#(real) NOT NULL)"#,
                nil
            ),
            (#"CREATE INDEX IF NOT EXISTS "$removedSet" ON "$removed" (entitySet, seq)"#, "$removedSet"),
            (#"CREATE INDEX IF NOT EXISTS "$removedAt" ON "$removed" (removedAt)"#, "$removedAt"),
            (
                // Keyed by scope (the signing author and device, or the signed-in user) and request id; kept for
                // ever, their stored answers only for the retention window.
                """
                CREATE TABLE IF NOT EXISTS "$repeatability" (
                    scope \(text) NOT NULL, requestID \(text) NOT NULL, device \(text), fingerprint \(text) NOT NULL,
                    status \(int32) NOT NULL, etag \(text), headers \(text), body \(text), createdAt \(real) NOT NULL,
                    PRIMARY KEY (scope, requestID))
                """, nil
            ),
            // Every change drops the answers past the window: without this index, each prune scans the table.
            (
                #"CREATE INDEX IF NOT EXISTS "$repeatabilityAnswered" ON "$repeatability" (createdAt) WHERE headers IS NOT NULL"#,
                "$repeatabilityAnswered"
            ),
            // A queued change moved onto a version its device made is checked against the ETags made there.
            (
                #"CREATE INDEX IF NOT EXISTS "$repeatabilityDevice" ON "$repeatability" (device, etag) WHERE device IS NOT NULL"#,
                "$repeatabilityDevice"
            ),
        ]
        if postgres {
            // Media entities' bytes (``MediaStore``): blobs by SHA-256, their parts, and uploads in progress. SQLite
            // keeps them in files.
            statements += [
                (
                    #"CREATE TABLE IF NOT EXISTS "$mediaBlob" (hash text PRIMARY KEY, size bigint NOT NULL, touchedAt double precision NOT NULL)"#,
                    nil
                ),
                (
                    #"CREATE TABLE IF NOT EXISTS "$mediaPart" (blob text NOT NULL, part integer NOT NULL, bytes bytea NOT NULL, PRIMARY KEY (blob, part))"#,
                    nil
                ),
                (
                    #"CREATE TABLE IF NOT EXISTS "$mediaUpload" (blob text PRIMARY KEY, startedAt double precision NOT NULL)"#,
                    nil
                ),
            ]
        }
        statements += [
            // Resumable uploads in progress (``ResumableUploadStore``) and the parts they received.
            (
                """
                CREATE TABLE IF NOT EXISTS "$resumable" (
                    id \(text) PRIMARY KEY, owner \(text) NOT NULL, requestID \(text) NOT NULL, request \(text) NOT NULL,
                    length \(integer) NOT NULL, received \(integer) NOT NULL, parts \(int32) NOT NULL, media \(text),
                    createdAt \(real) NOT NULL, touchedAt \(real) NOT NULL, UNIQUE (owner, requestID))
                """, nil
            ),
            (
                #"CREATE TABLE IF NOT EXISTS "$resumablePart" (upload \#(text) NOT NULL, part \#(int32) NOT NULL, bytes \#(bytes) NOT NULL, PRIMARY KEY (upload, part))"#,
                nil
            ),
            // Which bytes each stream property (`Edm.Stream`) holds (``DataService/changeStream``).
            (
                """
                CREATE TABLE IF NOT EXISTS "$stream" (
                    entitySet \(text) NOT NULL, entity \(text) NOT NULL, property \(text) NOT NULL, sha256 \(text) NOT NULL,
                    contentType \(text) NOT NULL, size \(integer) NOT NULL, owner \(text) NOT NULL,
                    PRIMARY KEY (entitySet, entity, property))
                """, nil
            ),
            (#"CREATE INDEX IF NOT EXISTS "$streamOwner" ON "$stream" (owner)"#, "$streamOwner"),
        ]
        return statements
    }

    /// Columns the service's own tables gained after they first shipped, with the definition that fills the rows
    /// already there: `$stream.owner` (whose quota a stream counts against; a stream stored before it counts against
    /// nobody's).
    static func addedServiceColumns(_ dialect: SQLDialect) -> [(table: String, column: String, definition: String)] {
        [("$stream", "owner", dialect == .postgres ? "text NOT NULL DEFAULT ''" : "TEXT NOT NULL DEFAULT ''")]
    }

    /// A data file from before scopes (request ids were global, records deleted after the window) has
    /// `$repeatability` without `scope`: its records move to a scoped table under the scope `''`. Only SQLite data
    /// can be that old.
    static func moveUnscopedRepeatability(_ db: any SQLConnection) async throws {
        let columns = try await columns(of: "$repeatability", in: db)
        guard !columns.isEmpty, !columns.contains("scope") else { return }
        try await db.execute(#"ALTER TABLE "$repeatability" RENAME TO "$repeatabilityUnscoped""#, [])
        for index in ["$repeatabilityAnswered", "$repeatabilityDevice"] {
            try await db.execute("DROP INDEX IF EXISTS \(db.dialect.quote(index))", [])
        }
        guard let create = serviceTables(db.dialect).first(where: { $0.sql.contains(#""$repeatability" ("#) }) else {
            return
        }
        try await db.execute(create.sql, [])
        try await db.execute(
            """
            INSERT INTO "$repeatability" (scope, requestID, fingerprint, status, headers, body, createdAt)
            SELECT '', requestID, fingerprint, status, headers, body, createdAt FROM "$repeatabilityUnscoped"
            """, [])
        try await db.execute(#"DROP TABLE "$repeatabilityUnscoped""#, [])
    }

    /// The longest name PostgreSQL keeps whole (`NAMEDATALEN` − 1); it cuts longer ones short.
    static let postgresNameBytes = 63

    /// Refuses a model whose names PostgreSQL would cut short: a table's own index and trigger names (the set's
    /// name and up to 8 bytes, `$changes`) and columns. A cut name is found missing at the next start and made
    /// again ("already exists"), or two indexes end up under one name.
    ///
    /// - Throws: ``ServerSetupError`` naming the set or property and the limit.
    static func checkPostgresNames(_ model: ServiceModel) throws(ServerSetupError) {
        let longestSuffix = "$changes".utf8.count
        for set in model.entitySets where set.name.utf8.count + longestSuffix > postgresNameBytes {
            throw ServerSetupError(
                "The entity set '\(set.name)' has a name of \(set.name.utf8.count) bytes; on PostgreSQL an entity set's name has at most \(postgresNameBytes - longestSuffix) (PostgreSQL keeps \(postgresNameBytes) bytes of a name, and the set's index names add 8)."
            )
        }
        for type in model.entityTypes {
            for property in type.properties where property.name.utf8.count > postgresNameBytes {
                throw ServerSetupError(
                    "The property '\(type.name)/\(property.name.prefix(80))' has a name of \(property.name.utf8.count) bytes; PostgreSQL keeps \(postgresNameBytes)."
                )
            }
        }
    }

    /// The names of `table`'s columns; empty when there is no such table.
    static func columns(of table: String, in db: any SQLConnection) async throws -> Set<String> {
        switch db.dialect {
        case .postgres:
            Set(
                try await db.fetchAll(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?",
                    table
                ).compactMap { $0[0].text })
        case .sqlite:
            Set(try await db.fetchAll("SELECT name FROM pragma_table_info(?)", table).compactMap { $0[0].text })
        }
    }

    /// Whether the index `name` exists.
    static func indexExists(_ name: String, in db: any SQLConnection) async throws -> Bool {
        let sql =
            switch db.dialect {
            case .postgres: "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?"
            case .sqlite: "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?"
            }
        return try await db.fetchOne(sql, name) != nil
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
}
