import BatonOData
import BatonSQL
import BatonSQLGRDB
import Crypto
import Foundation
import GRDB
import Logging

/// Moves a server from a SQLite data directory to PostgreSQL (`baton-server copy`): every table of both
/// databases — users, tokens, the sign-in throttle, settings, devices and their keys, sealed store keys, backups,
/// the audit log, the token-signing keys, the entity data with its sequence, tombstones, repeatable-request
/// records and audit outbox — in one PostgreSQL transaction, then reads every row back and compares.
///
/// The target must be empty (a database `baton-server migrate` made, or a new one): nothing is merged, and on any
/// failure nothing is written. Sealed values (store keys, token-signing keys, backups) are copied as they are, so
/// the PostgreSQL instances need the master key the data directory used. Delta links, ETags and tokens issued
/// before the move keep working after it.
public enum DataCopy {
    /// What was copied: rows per table, in copy order.
    public struct Report: Sendable {
        public var tables: [(name: String, rows: Int)]
        public var rows: Int { tables.reduce(0) { $0 + $1.rows } }
    }

    /// The server's tables, in an order that satisfies their references.
    static let serverTables = [
        "users", "refreshTokens", "authorizationCodes", "revokedAccessTokens", "settings", "devices",
        "deviceRegistrations", "signingKeys", "audit", "discardedChanges", "signInFailures", "signInKnown",
        "tokenSigningKeys", "cockpitSessions", "deviceTokenFamilies", "deviceAuthorizations", "deviceProofs",
        "usageEvents",
        "deviceLogs", "identityProviders", "scimTokens", "openIDStates",
    ]
    /// The data store's own tables (the entity tables come from the model).
    static let dataTables = [
        DataStore.auditOutbox, "$removed", "$repeatability", "$sequence", "$stream", "$resumable", "$resumablePart",
    ]
    /// Tables whose `id` PostgreSQL numbers itself: their counters move past the copied ids.
    static let identityTables = ["audit", "discardedChanges", "deviceLogs"]

    /// Copies the data directory of `source` (SQLite) into the empty PostgreSQL database at `target`.
    ///
    /// - Parameters:
    ///   - source: the SQLite server's configuration (data directory, master-key file, model); it is opened as
    ///     `serve` would (migrated, its master key checked) and left unchanged otherwise.
    ///   - target: the PostgreSQL database; migrated, then filled.
    ///   - logger: where the two servers' setup logs.
    /// - Returns: the rows copied, per table.
    /// - Throws: ``ServerSetupError`` with one line naming what to fix: the source cannot be opened, the target
    ///   is not reachable or not empty, a row does not copy, or a row read back differs.
    public static func copy(from source: BatonServerConfiguration, to target: PostgresLocation, logger: Logger)
        async throws -> Report
    {
        var source = source
        source.database = nil
        let directory = source.dataDirectory
        guard FileManager.default.fileExists(atPath: directory.appendingPathComponent("server.sqlite").path) else {
            throw ServerSetupError(
                "There is no Baton data directory at '\(directory.path)' (no server.sqlite); give the --data-dir the server used."
            )
        }
        // The master key must be the one the data directory used: none is made up here.
        _ = try DataDirectory.existingMasterKey(
            source.masterKeyFile ?? directory.appendingPathComponent("keys/master.key"))
        let model = try source.dataService.model ?? ServiceModel.aircraftChecks
        try refuseUnknownTables(in: directory, model: model)
        let server = try await BatonServer(configuration: source, logger: logger)
        defer { server.close() }
        guard let serverPool = server.database.pool, let dataPool = server.data.store.pool else {
            throw ServerSetupError("The source of a copy is a SQLite data directory.")
        }
        let storage = try await PostgresStorage(location: target, connections: 2, logger: logger)
        defer { storage.close() }
        _ = try await ServerDatabase(postgres: storage)
        _ = try await DataStore(postgres: storage, model: model)
        let tables =
            serverTables.map { Table.server($0) } + dataTables.map { Table.data($0) }
            + model.entitySets.map { Table.entity($0.name) }
        let report: Report
        do {
            // One transaction on PostgreSQL, one snapshot of each SQLite database (read a page at a time, as the
            // inserts are sent asynchronously); every table read back and compared before the commit, so a copy
            // that does not match leaves nothing behind.
            let sources = (server: try serverPool.makeSnapshot(), data: try dataPool.makeSnapshot())
            report = try await storage.bulkWrite { pg in
                try await refuseNonEmpty(pg, tables: tables)
                // The copy sets the sequence row's value (then the sequence object above it): the trigger that
                // refuses it to older writers is off for this transaction's statements.
                try await pg.execute(#"ALTER TABLE "$sequence" DISABLE TRIGGER "$sequenceFrozen""#)
                var copied: [(name: String, rows: Int)] = []
                for table in tables {
                    let source = table.isServer ? sources.server : sources.data
                    copied.append((table.name, try await copyRows(of: table, from: source, to: pg, model: model)))
                }
                // Photos' bytes: from files named by their SHA-256 to parts in the database, each checked on the way.
                copied.append(("media", try await copyMedia(from: directory.appendingPathComponent("media"), to: pg)))
                for name in identityTables {
                    try await pg.execute(
                        "SELECT setval(pg_get_serial_sequence('\(name.lowercased())', 'id'), coalesce(max(id), 0) + 1, false) FROM \(name)"
                    )
                }
                for table in tables {
                    let source = table.isServer ? sources.server : sources.data
                    let expected = try await source.read { db in
                        try GRDBConnection.run(db) { sqlite in try await digest(of: table, in: sqlite, model: model) }
                    }
                    let found = try await digest(of: table, in: pg, model: model)
                    guard expected == found else {
                        throw ServerSetupError(
                            "Nothing was copied: table \(table.name) reads back differently from PostgreSQL (\(found.rows) rows, expected \(expected.rows)); a value PostgreSQL stores with less precision (instants and times beyond microseconds, Edm.Single) does not copy exactly."
                        )
                    }
                }
                // PostgreSQL's writers take blocks of the sequence object above every value copied (delta tokens of
                // the SQLite server go on: ``Watermark/window``).
                try await pg.execute(
                    #"SELECT setval(?::regclass, greatest(value, 1)) FROM "$sequence" WHERE id = 1"#,
                    SQLDialect.postgres.quote(DataStore.sequenceObject))
                try await pg.execute(#"ALTER TABLE "$sequence" ENABLE TRIGGER "$sequenceFrozen""#)
                return Report(tables: copied)
            }
        } catch let error as ServerSetupError {
            throw error
        } catch {
            throw ServerSetupError("Nothing was copied: \(error)")
        }
        // The planner's statistics of the filled tables; the copy stands without them (autovacuum makes them).
        try? await storage.analyze(tables.map { $0.quoted(.postgres) })
        return report
    }

    /// Throws when the data directory holds tables this copy would leave behind: those of entity sets the model
    /// does not have (the copy was given another model than the server's), or any other unknown table. Reads
    /// the files without changing them.
    static func refuseUnknownTables(in directory: URL, model: ServiceModel) throws {
        var configuration = Configuration()
        configuration.readonly = true
        let known =
            Set(serverTables + dataTables + model.entitySets.map { $0.name }).union([
                "sqlite_sequence", "grdb_migrations",
            ])
        for file in ["server.sqlite", "data.sqlite"] {
            let path = directory.appendingPathComponent(file).path
            guard FileManager.default.fileExists(atPath: path) else { continue }
            let names: [String]
            do {
                names = try DatabaseQueue(path: path, configuration: configuration).read { db in
                    try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'")
                }
            } catch {
                throw ServerSetupError("Cannot read \(path): \(error)")
            }
            let unknown = names.filter { !known.contains($0) }.sorted()
            guard unknown.isEmpty else {
                throw ServerSetupError(
                    "The data directory holds tables the model does not know (\(unknown.prefix(5).joined(separator: ", "))); give the --model the server serves."
                )
            }
        }
    }

    /// Copies every blob of the SQLite media directory (`media/ab/<sha256>`) into `$mediaBlob` and `$mediaPart`,
    /// checking each against its name; returns how many.
    ///
    /// - Throws: ``ServerSetupError`` for a blob whose bytes do not hash to its name (nothing is copied then).
    static func copyMedia(from directory: URL, to pg: any SQLConnection) async throws -> Int {
        let manager = FileManager.default
        var count = 0
        for shard in ((try? manager.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
        where shard.utf8.count == 2 {
            let folder = directory.appendingPathComponent(shard, isDirectory: true)
            for name in ((try? manager.contentsOfDirectory(atPath: folder.path)) ?? []).sorted()
            where MediaStore.isHash(name) {
                var hasher = SHA256()
                var size = 0
                var index = 0
                for part in try FileParts(url: folder.appendingPathComponent(name)) {
                    hasher.update(data: part)
                    try await pg.execute(
                        #"INSERT INTO "$mediaPart" (blob, part, bytes) VALUES (?, ?, ?)"#, name, index,
                        SQLValue.blob(part))
                    size += part.count
                    index += 1
                }
                guard hasher.finalize().lowercaseHex == name else {
                    throw ServerSetupError(
                        "Nothing was copied: the photo media/\(shard)/\(name) does not match its SHA-256; restore it from a backup first."
                    )
                }
                try await pg.execute(
                    #"INSERT INTO "$mediaBlob" (hash, size, touchedAt) VALUES (?, ?, ?)"#, name, Int64(size),
                    Date().timeIntervalSince1970)
                count += 1
            }
        }
        return count
    }

    /// A table to copy, and how its names are spelt on each engine.
    enum Table {
        /// A server table: created unquoted on PostgreSQL, so its names are lower case there.
        case server(String)
        /// A data-store table (`$sequence`, …): a quoted name, unquoted columns.
        case data(String)
        /// An entity table: quoted names throughout, values typed by the model.
        case entity(String)

        var name: String {
            switch self {
            case .server(let name), .data(let name), .entity(let name): name
            }
        }
        var isServer: Bool {
            if case .server = self { return true }
            return false
        }
        func quoted(_ dialect: SQLDialect) -> String {
            switch self {
            case .server(let name): dialect == .postgres ? name.lowercased() : name
            case .data(let name), .entity(let name): dialect.quote(name)
            }
        }
        /// A column's name in `dialect`.
        func column(_ name: String, _ dialect: SQLDialect) -> String {
            switch self {
            case .server, .data: dialect == .postgres ? dialect.quote(name.lowercased()) : dialect.quote(name)
            case .entity: dialect.quote(name)
            }
        }
    }

    /// Throws unless every table of the target is empty (and its sequence unused).
    static func refuseNonEmpty(_ pg: any SQLConnection, tables: [Table]) async throws {
        var holding: [String] = []
        for table in tables {
            let sql =
                table.name == "$sequence"
                ? #"SELECT count(*) FROM "$sequence" WHERE value <> 0 OR horizon <> 0"#
                : "SELECT count(*) FROM \(table.quoted(.postgres))"
            let count = try await pg.fetchOne(sql)?[0].integer ?? 0
            if count > 0 { holding.append("\(table.name) (\(count))") }
        }
        guard holding.isEmpty else {
            throw ServerSetupError(
                "The target database already holds Baton data: \(holding.prefix(4).joined(separator: ", "))\(holding.count > 4 ? ", …" : ""); copy only into an empty database."
            )
        }
    }

    /// Inserts every row of `table` from a snapshot of SQLite into PostgreSQL; returns how many.
    static func copyRows(
        of table: Table, from source: DatabaseSnapshot, to pg: any SQLConnection, model: ServiceModel
    ) async throws -> Int {
        if table.name == "$sequence" {
            let row = try await source.read { db in
                try GRDBConnection.run(db) { sqlite in
                    try await sqlite.fetchOne(#"SELECT value, horizon FROM "$sequence" WHERE id = 1"#)
                }
            }
            guard let row else { return 0 }
            try await pg.execute(
                #"UPDATE "$sequence" SET value = ?, horizon = ? WHERE id = 1"#, row["value"], row["horizon"])
            return 1
        }
        var statement: String?
        var count = 0
        // The outbox keeps its order (PostgreSQL numbers the entries as they come). Other tables are read in the
        // order of their scan, which the snapshot keeps from page to page (entity tables: key order).
        let order = table.name == DataStore.auditOutbox ? " ORDER BY rowid" : ""
        let sql = "SELECT * FROM \(table.quoted(.sqlite))\(order) LIMIT ? OFFSET ?"
        while true {
            let offset = count
            let page = try await source.read { db in
                try GRDBConnection.run(db) { sqlite in
                    try await sqlite.fetchAll(sql, [.integer(Int64(pageSize)), .integer(Int64(offset))])
                }
            }
            for row in page {
                let (columns, values) = try pgValues(
                    of: table, cursor: PostgresSQLConnection.ValuesCursor(row: row), model: model)
                if statement == nil {
                    let names = columns.map { table.column($0.name, .postgres) }.joined(separator: ", ")
                    let placeholders = columns.map { $0.cast.isEmpty ? "?" : "?::\($0.cast)" }.joined(separator: ", ")
                    statement = "INSERT INTO \(table.quoted(.postgres)) (\(names)) VALUES (\(placeholders))"
                }
                try await pg.execute(statement ?? "", values)
                count += 1
            }
            if page.count < pageSize { return count }
        }
    }

    /// How many rows of a table are read from SQLite at a time.
    static let pageSize = 1_000

    /// A SQLite row's columns (name, PostgreSQL cast) and values as PostgreSQL takes them: entity values go
    /// through the model's types (a SQLite 0/1 becomes a boolean, a text a uuid or an instant).
    static func pgValues(of table: Table, cursor: any SQLCursor, model: ServiceModel) throws -> (
        [(name: String, cast: String)], [SQLValue]
    ) {
        let names = cursor.columnNames
        guard case .entity(let setName) = table else {
            return (names.map { ($0, "") }, names.indices.map(cursor.value(at:)))
        }
        guard let set = model.entitySets.first(where: { $0.name == setName }), let type = model.entityType(of: set)
        else { throw ServerSetupError("The model has no entity set \(setName).") }
        var columns: [(name: String, cast: String)] = []
        var values: [SQLValue] = []
        for (index, name) in names.enumerated() {
            let value = cursor.value(at: index)
            if let property = type.property(named: name) {
                let decoded = try SQLDialect.sqlite.decode(value, as: property.type, column: "\(setName)/\(name)")
                columns.append((name, SQLDialect.postgres.columnType(for: property.type)))
                values.append(SQLDialect.postgres.encode(decoded, as: property.type))
            } else {
                columns.append((name, ""))
                values.append(value)
            }
        }
        return (columns, values)
    }

    /// What a table holds, independent of engine and row order: the row count and a SHA-256 over the sorted
    /// hashes of its rows, each row in a canonical text (entity values decoded through the model).
    struct Digest: Equatable {
        var rows: Int
        var hash: Data
    }

    static func digest(of table: Table, in db: any SQLConnection, model: ServiceModel) async throws -> Digest {
        let dialect = db.dialect
        let type: EntityType? =
            if case .entity(let name) = table {
                model.entitySets.first { $0.name == name }.flatMap { model.entityType(of: $0) }
            } else { nil }
        var hashes: [Data] = []
        let columns: String
        if table.name == "$sequence" {
            columns = "value, horizon"
        } else if table.name == DataStore.auditOutbox {
            // PostgreSQL numbers its outbox entries in an extra column; the entries themselves must match.
            columns = ["key", "at", "actor", "action", "subject", "address", "detail"].map { table.column($0, dialect) }
                .joined(separator: ", ")
        } else {
            columns = "*"
        }
        try await db.forEachRow("SELECT \(columns) FROM \(table.quoted(dialect))", []) { cursor in
            var text = ""
            // By column name: the engines may order a table's columns differently.
            for (index, name) in cursor.columnNames.enumerated().sorted(by: { $0.1.lowercased() < $1.1.lowercased() }) {
                // PostgreSQL's own change tracking (the transactions of the copy) has no SQLite counterpart.
                if dialect == .postgres, DataStore.postgresOnlyColumns.contains(name) { continue }
                let value = cursor.value(at: index)
                text += name.lowercased() + "="
                if let property = type?.property(named: name) {
                    let decoded = try dialect.decode(value, as: property.type, column: name)
                    if case .dateTimeOffset(let instant) = decoded {
                        text += instant.sortableUTCText
                    } else {
                        text += decoded.urlLiteral
                    }
                } else {
                    text += canonical(value)
                }
                text += "\u{1F}"
            }
            hashes.append(Data(SHA256.hash(data: Data(text.utf8))))
            return true
        }
        var total = SHA256()
        for hash in hashes.sorted(by: { $0.lexicographicallyPrecedes($1) }) { total.update(data: hash) }
        return Digest(rows: hashes.count, hash: Data(total.finalize()))
    }

    /// A stored value as text that is the same on both engines (a whole number is one, however stored).
    static func canonical(_ value: SQLValue) -> String {
        switch value {
        case .null: "null"
        case .integer(let number): "n\(number)"
        case .real(let number) where number.rounded() == number && abs(number) < 9e15: "n\(Int64(number))"
        case .real(let number): "r\(number.bitPattern)"
        case .text(let text): "t" + text
        case .blob(let bytes): "b" + Data(bytes).base64EncodedString()
        }
    }
}
