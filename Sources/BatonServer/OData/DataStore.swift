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
            try storage.pool.write { db in try GRDBConnection.run(db) { try await Self.migrate($0, model: model) } }
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
            try await storage.migrate { db in try await Self.migrate(db, model: model) }
        } catch let error as ServerSetupError {
            throw error
        } catch {
            throw ServerSetupError(
                "Cannot create or migrate the entity tables in \(storage.location.database): \(error)")
        }
    }

    /// Closes every connection to the data database.
    func close() {
        storage.close()
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
    ///
    /// `isolation`: ``WriteIsolation``; ``WriteIsolation/rowChecked`` only for changes whose every check is about the
    /// rows they change (``DataService/isolation(of:urls:)``).
    func write<T: Sendable>(
        isolation: WriteIsolation = .serializable, _ body: @escaping @Sendable (any SQLConnection) async throws -> T
    ) async throws -> T {
        try await storage.write(isolation: isolation) { db in
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
