import BatonOData
import BatonSQL
import BatonTestSupport
import BatonTesting
import Foundation
import Testing

@testable import BatonServer

/// The entity tables' one migration (`DataStore.migrate`) on both engines: it runs at every start and changes
/// nothing the second time, adds what a newer model or a newer server needs, refuses what would break existing
/// rows, and moves data from before repeatable-request scopes.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct EntityMigrationTests {
    /// Every table with its columns and types, and every index, of the data database.
    static func schema(_ db: any SQLConnection) async throws -> [String] {
        let rows: [SQLRow]
        switch db.dialect {
        case .postgres:
            rows =
                try await db.fetchAll(
                    "SELECT table_name || '.' || column_name || ' ' || data_type FROM information_schema.columns WHERE table_schema = current_schema()",
                    [])
                + db.fetchAll(
                    "SELECT 'index ' || indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = current_schema()",
                    [])
        case .sqlite:
            rows =
                try await db.fetchAll(
                    "SELECT m.name || '.' || p.name || ' ' || p.type FROM sqlite_master AS m, pragma_table_info(m.name) AS p WHERE m.type = 'table'",
                    [])
                + db.fetchAll(
                    "SELECT 'index ' || name || ': ' || coalesce(sql, '') FROM sqlite_master WHERE type = 'index'", [])
        }
        return rows.compactMap { $0[0].text }.sorted()
    }

    /// A server on `backend`, its data store, and the schema the store starts with.
    static func opened(_ backend: StorageBackend) async throws -> (TestServer, DataStore, [String]) {
        let server = try await TestServer(backend: backend)
        let store = server.server.data.store
        do {
            return (server, store, try await store.storage.write { db in try await Self.schema(db) })
        } catch {
            server.remove()
            throw error
        }
    }

    /// Migrates `store` to `model` in one write and returns the schema it leaves.
    static func migrated(_ store: DataStore, to model: ServiceModel) async throws -> [String] {
        try await store.storage.write { db in
            try await DataStore.migrate(db, model: model)
            return try await Self.schema(db)
        }
    }

    /// The model with one more property on `PreflightCheck`.
    static func model(_ model: ServiceModel, adding property: Property) -> ServiceModel {
        var model = model
        if let index = model.entityTypes.firstIndex(where: { $0.name == "PreflightCheck" }) {
            model.entityTypes[index].properties.append(property)
        }
        return model
    }

    @Test(arguments: StorageBackend.allCases) func aSecondRunChangesNothingAndANewPropertyBecomesAColumn(
        backend: StorageBackend
    ) async throws {
        let (server, store, before) = try await Self.opened(backend)
        defer { server.remove() }
        #expect(before.contains { $0.hasPrefix("PreflightChecks.$origin ") })
        #expect(before.contains { $0.hasPrefix("index PreflightChecks$changes") })
        #expect(before.contains { $0.hasPrefix("index $repeatabilityAnswered") })
        #expect(before.contains { $0.hasPrefix("$removed.seq ") })
        #expect(before.contains { $0.hasPrefix("$mediaBlob.") } == (backend == .postgres))
        let again = try await Self.migrated(store, to: store.model)
        #expect(again == before)

        let remark = Property(name: "SecondRemark", type: .string, isNullable: true)
        let after = try await Self.migrated(store, to: Self.model(store.model, adding: remark))
        #expect(
            Set(after).subtracting(before).map { $0.components(separatedBy: " ")[0] } == [
                "PreflightChecks.SecondRemark"
            ])

        // A non-nullable property cannot be added to rows that exist: the migration refuses it, names it, and
        // leaves the schema as it was.
        let required = Property(name: "Required", type: .int32, isNullable: false)
        await #expect {
            try await store.storage.write { db in
                try await DataStore.migrate(db, model: Self.model(store.model, adding: required))
            }
        } throws: { "\($0)".contains("non-nullable property 'PreflightChecks/Required'") }
        #expect(try await store.storage.write { db in try await Self.schema(db) } == after)
    }

    /// PostgreSQL keeps 63 bytes of a name: a set whose index names would be cut, or a longer property, is refused
    /// with the limit before anything is created (on SQLite both are fine).
    @Test(arguments: StorageBackend.allCases) func namesPostgreSQLWouldCutShortAreRefused(backend: StorageBackend)
        async throws
    {
        let (server, store, before) = try await Self.opened(backend)
        defer { server.remove() }
        var longSet = store.model
        longSet.entitySets.append(EntitySet(name: String(repeating: "S", count: 56), entityType: "Aircraft"))
        let longProperty = Self.model(
            store.model, adding: Property(name: String(repeating: "p", count: 64), type: .string))
        for (model, words) in [(longSet, "at most 55"), (longProperty, "PostgreSQL keeps 63")] {
            if backend == .postgres {
                await #expect {
                    try await store.storage.write { db in try await DataStore.migrate(db, model: model) }
                } throws: { "\($0)".contains(words) }
                #expect(try await store.storage.write { db in try await Self.schema(db) } == before)
            } else {
                try await store.storage.write { db in try await DataStore.migrate(db, model: model) }
            }
        }
        // Just short enough: made, and a second start finds it whole.
        var fitting = store.model
        fitting.entitySets.append(EntitySet(name: String(repeating: "S", count: 55), entityType: "Aircraft"))
        let first = try await Self.migrated(store, to: fitting)
        let second = try await Self.migrated(store, to: fitting)
        #expect(first == second && first.count > before.count)
    }

    /// A table from before a system column gets the column back, with its index.
    @Test(arguments: StorageBackend.allCases) func aMissingSystemColumnAndIndexAreAdded(backend: StorageBackend)
        async throws
    {
        let (server, store, before) = try await Self.opened(backend)
        defer { server.remove() }
        let dropped = try await store.storage.write { db in
            try await db.execute(#"DROP INDEX "Aircraft$changes""#, [])
            try await db.execute(#"ALTER TABLE "Aircraft" DROP COLUMN "$origin""#, [])
            return try await Self.schema(db)
        }
        #expect(!dropped.contains { $0.hasPrefix("Aircraft.$origin ") })
        let after = try await Self.migrated(store, to: store.model)
        #expect(after == before)
    }

    /// A data directory whose `$stream` is from before owners (as 4b69810 made it, on either engine) gets the column,
    /// its rows kept with no owner, and the owner index: the server starts instead of failing on the index.
    @Test(arguments: StorageBackend.allCases) func aStreamTableFromBeforeOwnersGetsTheColumn(backend: StorageBackend)
        async throws
    {
        let (server, store, before) = try await Self.opened(backend)
        defer { server.remove() }
        let (text, integer) = backend == .postgres ? ("text", "bigint") : ("TEXT", "INTEGER")
        try await store.storage.write { db in
            try await db.execute(#"DROP TABLE "$stream""#, [])
            try await db.execute(
                """
                CREATE TABLE "$stream" (
                    entitySet \(text) NOT NULL, entity \(text) NOT NULL, property \(text) NOT NULL, sha256 \(text) NOT NULL,
                    contentType \(text) NOT NULL, size \(integer) NOT NULL, PRIMARY KEY (entitySet, entity, property))
                """, [])
            try await db.execute(
                #"INSERT INTO "$stream" VALUES ('Inspections', 'Inspections(1)', 'Photo', 'abc', 'image/jpeg', 12)"#, []
            )
        }
        let (after, rows) = try await store.storage.write { db in
            try await DataStore.migrate(db, model: store.model)
            let rows = try await db.fetchAll(#"SELECT entity, size, owner FROM "$stream""#, [])
            return (try await Self.schema(db), rows.map(\.values))
        }
        #expect(after == before)
        #expect(rows == [[.text("Inspections(1)"), .integer(12), .text("")]])
    }

    /// A SQLite data file from before scopes: `$repeatability` keyed by request id alone. Its records move to the
    /// scoped table under the scope '' (answered as before), with the indexes.
    @Test func repeatableRequestsFromBeforeScopesAreMoved() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        let store = server.server.data.store
        let before = try await store.storage.write { db in try await Self.schema(db) }
        try await store.storage.write { db in
            try await db.execute(#"DROP TABLE "$repeatability""#, [])
            try await db.execute(
                """
                CREATE TABLE "$repeatability" (requestID TEXT PRIMARY KEY, fingerprint TEXT NOT NULL,
                    status INTEGER NOT NULL, headers TEXT, body TEXT, createdAt REAL NOT NULL)
                """, [])
            try await db.execute(
                #"INSERT INTO "$repeatability" VALUES ('old-1', 'f1', 201, '[]', '{}', 5), ('old-2', 'f2', 204, NULL, NULL, 6)"#,
                [])
        }
        let (after, rows) = try await store.storage.write { db in
            try await DataStore.migrate(db, model: store.model)
            let rows = try await db.fetchAll(
                #"SELECT scope, requestID, fingerprint, status, body FROM "$repeatability" ORDER BY requestID"#, [])
            return (try await Self.schema(db), rows.map { $0.values })
        }
        #expect(after == before)
        #expect(
            rows == [
                [.text(""), .text("old-1"), .text("f1"), .integer(201), .text("{}")],
                [.text(""), .text("old-2"), .text("f2"), .integer(204), .null],
            ])
    }
}
