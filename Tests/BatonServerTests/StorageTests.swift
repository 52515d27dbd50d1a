import BatonOData
import BatonSQL
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import GRDB
import HTTPTypes
import HummingbirdTesting
import Logging
import NIOPosix
import PostgresNIO
import Synchronization
import Testing

@testable import BatonServer

/// The storage seam on both engines: values and placeholders, transactions, serializable writes, token-signing
/// keys sealed in the database, and what several instances on one PostgreSQL database share.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct StorageTests {
    @Test(arguments: StorageBackend.allCases) func valuesRoundTripAndQuotedQuestionMarksStayText(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let storage = server.server.database.storage
        let values: [SQLValue] = [
            .null, .integer(.max), .integer(.min), .real(-1.5e300), .text("Grüße, 'quoted' \"too\" ?"),
            .blob([0, 255, 1, 128]),
        ]
        let back = try await storage.write { db -> SQLRow? in
            try await db.execute(
                "CREATE TABLE roundTrip (a bigint, b bigint, c bigint, d double precision, e text, f bytea, g text)", []
            )
            try await db.execute("INSERT INTO roundTrip VALUES (?, ?, ?, ?, ?, ?, 'is ? a placeholder')", values)
            return try await db.fetchOne("SELECT a, b, c, d, e, f, g FROM roundTrip WHERE e = ?", values[4])
        }
        let row = try #require(back)
        #expect(Array(row.values.prefix(6)) == values)
        #expect(row["g"] == .text("is ? a placeholder"))
    }

    /// A row's column is found by name with ASCII letters' case ignored, byte for byte: no Unicode folding (a Kelvin
    /// sign is not a K, `ß` is not `SS`), and every pair of ASCII bytes as ASCII folds them (PostgreSQL hands back
    /// unquoted names lower-cased, SQLite as written).
    @Test func aColumnIsFoundByNameWithASCIICaseIgnoredOnly() throws {
        for a in 0..<128 {
            for b in 0..<128 {
                let x = String(UnicodeScalar(UInt8(a)))
                let y = String(UnicodeScalar(UInt8(b)))
                #expect(HeaderScanner.sameName(x, y) == (x.lowercased() == y.lowercased()), "\(a) \(b)")
            }
        }
        let row = SQLRow(
            columns: ["value", "Horizon", "\u{212A}ey", "straße"],
            values: [.integer(1), .integer(2), .integer(3), .integer(4)])
        #expect(row["VALUE"].integer == 1 && row["value"].integer == 1 && row["horizon"].integer == 2)
        #expect(row["Key"] == .null && row["\u{212A}ey"].integer == 3)
        #expect(row["STRASSE"] == .null && row["STRAßE"].integer == 4 && row["values"] == .null && row["valu"] == .null)
    }

    /// SQLite's statements are bound straight through its C interface: an empty text or blob is not NULL, a NUL
    /// inside text is kept, a wrong count of arguments is an error (not a crash), and a read statement whose step
    /// failed (reused from the statement cache) and a write that broke a constraint both run again afterwards.
    @Test func sqliteBindsEveryValueAsGivenAndReusesAStatementThatFailed() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        let storage = server.server.database.storage
        let values: [SQLValue] = [.text(""), .blob([]), .text("a\u{0}b"), .null, .text("é\u{301}<")]
        let row = try await storage.write { db -> SQLRow? in
            try await db.execute("CREATE TABLE bound (a text, b blob, c text, d text, e text UNIQUE NOT NULL)", [])
            try await db.execute("INSERT INTO bound VALUES (?, ?, ?, ?, ?)", values)
            return try await db.fetchOne(
                "SELECT a, b, c, d, e, typeof(a), typeof(b), length(CAST(c AS blob)) FROM bound WHERE c = ?",
                SQLValue.text("a\u{0}b"))
        }
        let found = try #require(row)
        #expect(Array(found.values.prefix(5)) == values)
        #expect(Array(found.values.suffix(3)) == [.text("text"), .text("blob"), .integer(3)])
        // A text that only starts like the stored one does not find it (a NUL would end a C string there).
        #expect(
            try await storage.readStatement { db in try await db.fetchOne("SELECT e FROM bound WHERE c = ?", "a")?[0] }
                == nil)
        await #expect(throws: StorageError.self) {
            try await storage.readStatement { db in try await db.fetchOne("SELECT e FROM bound WHERE c = ?", 1, 2) }
        }
        await #expect(throws: StorageError.self) {
            try await storage.write { db in try await db.execute("INSERT INTO bound (e) VALUES (?)", []) }
        }
        let parse = "SELECT json_extract(?, '$.n')"
        for _ in 0..<3 {
            await #expect(throws: StorageError.self) {
                try await storage.readStatement { db in try await db.fetchOne(parse, "not json") }
            }
            let read = try await storage.readStatement { db in try await db.fetchOne(parse, #"{"n":7}"#)?[0] }
            #expect(read == .integer(7))
        }
        for _ in 0..<3 {
            await #expect(throws: StorageError.self) {
                try await storage.write { db in
                    try await db.execute("INSERT INTO bound (e) VALUES (?)", values[4])
                }
            }
        }
        try await storage.write { db in try await db.execute("INSERT INTO bound (e) VALUES (?)", "another") }
        let count = try await storage.readStatement { db in try await db.fetchOne("SELECT count(*) FROM bound")?[0] }
        #expect(count == .integer(2))
    }

    /// A single-statement read answers the same on both engines (on PostgreSQL by replaying its body with the
    /// answers sent asynchronously): several statements in order, and a statement's error where the body asked.
    @Test(arguments: StorageBackend.allCases) func singleStatementReadsAnswerTheirStatementsInOrder(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let storage = server.server.database.storage
        try await storage.write { db in
            _ = try await db.execute("CREATE TABLE replayed (n bigint PRIMARY KEY, t text)", [])
            for n in 1...3 { _ = try await db.execute("INSERT INTO replayed VALUES (?, ?)", n, "row \(n)") }
        }
        let read = try await storage.readStatement { db in
            let first = try await db.fetchOne("SELECT t FROM replayed WHERE n = ?", 1)?["t"].text
            let count = try await db.fetchOne("SELECT count(*) FROM replayed WHERE n > ?", 1)?[0].integer
            var texts: [String] = []
            try await db.forEachRow("SELECT t FROM replayed ORDER BY n", []) { cursor in
                texts.append(cursor.value(at: 0).text ?? "")
                return true
            }
            return "\(first ?? "-") \(count ?? -1) \(texts.joined(separator: ","))"
        }
        #expect(read == "row 1 2 row 1,row 2,row 3")
        // The statement's error reaches the body where it asked, and the body decides.
        let caught = try await storage.readStatement { db -> String in
            do {
                _ = try await db.fetchAll("SELECT nothing FROM nowhere", [])
                return "no error"
            } catch let error as StorageError {
                return "caught \(error.kind)"
            }
        }
        #expect(caught == "caught other")
        // Reads whose bodies throw after their statement end their transactions: every connection of the pool
        // goes back clean, and writes after them commit.
        struct Refused: Error {}
        for _ in 0..<40 {
            await #expect(throws: Refused.self) {
                try await storage.read { db -> Int in
                    _ = try await db.fetchAll("SELECT n FROM replayed", [])
                    throw Refused()
                }
            }
        }
        for n in 4...8 {
            try await storage.write { db in _ = try await db.execute("INSERT INTO replayed VALUES (?, 'later')", n) }
        }
        #expect(
            try await storage.read { db in try await db.fetchOne("SELECT count(*) FROM replayed")?[0].integer } == 8)
    }

    /// A single-statement read whose statement fails (on PostgreSQL, its preparation: postgres-nio keeps that
    /// error for the connection) works once the statement can run; every connection of the pool stays usable.
    @Test(arguments: StorageBackend.allCases) func aStatementThatFailedRunsOnceItCan(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let storage = server.server.database.storage
        let statement = "SELECT t FROM appears_later WHERE n = ?"
        for _ in 0..<8 {
            let failed = try await storage.readStatement { db -> String in
                do {
                    return try await db.fetchOne(statement, 1)?["t"].text ?? "no row"
                } catch let error as StorageError {
                    return "\(error.kind)"
                }
            }
            #expect(failed == "other")
        }
        try await storage.write { db in
            _ = try await db.execute("CREATE TABLE appears_later (n bigint PRIMARY KEY, t text)", [])
            _ = try await db.execute("INSERT INTO appears_later VALUES (?, ?)", 1, "here")
        }
        // More reads than the pool has connections, so every connection that saw the failure answers again.
        for _ in 0..<12 {
            let read = try await storage.readStatement { db in try await db.fetchOne(statement, 1)?["t"].text }
            #expect(read == "here")
        }
    }

    /// Each distinct single-statement read is prepared under a slot of its own (``PreparedStatements``): many of
    /// them, run in turns on every connection, each answer their own statement.
    @Test func manyPreparedStatementsEachAnswerTheirOwn() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let storage = server.server.database.storage
        for round in 0..<3 {
            for factor in 1...70 {
                let product = try await storage.readStatement { db in
                    try await db.fetchOne("SELECT CAST(? AS bigint) * \(factor) AS product", round + 2)?[0].integer
                }
                #expect(product == Int64((round + 2) * factor))
            }
        }
    }

    /// The statements a client's `$filter` shapes run unprepared: any account's few hundred of them leave the
    /// prepared-statement slots to the server's own reads (before, they took all 256 for the life of the process).
    @Test func aClientsFilterShapesTakeNoPreparedStatementSlot() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let alice = try await client.signIn("alice").access
            for op in ["add", "mul"] {
                for terms in 1...(PreparedStatements.slots / 2 + 10) {
                    let filter = "FuelKg" + String(repeating: "%20\(op)%201", count: terms) + "%20gt%200"
                    let reply = try await client.odata(.get, "PreflightChecks?$filter=\(filter)", token: alice)
                    #expect(reply.status == .ok, "\(reply.text)")
                }
            }
            // A statement of the server's own shape still gets a slot.
            let own = "SELECT CAST(? AS bigint) AS own_\(UUID().uuidString.prefix(8).lowercased())"
            #expect(PreparedStatements.slot(of: own, [.integer(1)]) != nil)
            let key = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(1)))", token: alice)
            #expect(key.status == .notFound)
        }
    }

    /// A write's new statement shape takes a prepared-statement slot only while half of them are free: an account's
    /// changes naming ever other columns cannot take the reads' half. A shape that has a slot keeps it.
    @Test func aWritesNewShapesTakeOnlyHalfTheSlots() {
        let fresh = "SELECT CAST(? AS bigint) AS write_\(UUID().uuidString.prefix(8).lowercased())"
        #expect(PreparedStatements.writesLimit == PreparedStatements.slots / 2)
        #expect(PreparedStatements.slot(of: fresh, [.integer(1)], limit: 0) == nil)
        let slot = PreparedStatements.slot(of: fresh, [.integer(1)])
        #expect(slot != nil)
        #expect(PreparedStatements.slot(of: fresh, [.integer(1)], limit: 0) == slot)
    }

    /// A write of entities takes values of the sequence from its row once and writes the last one back before
    /// its commit: a batch of ten changes updates the row twice, not ten times. Every change still has a value of
    /// its own, above every earlier one, and the row holds the last after the commit, so the next write goes on
    /// above it.
    @Test func aBatchTakesTheSequenceOnceAndWritesItBackOnce() async throws {
        try await Fixtures.world { server, client, alice, _ in
            let pool = try #require(server.server.data.store.pool)
            let updates = try await WriterStatements(pool) { $0.contains(#"UPDATE "$sequence""#) }
            func sequences(of reply: ODataReply) -> [Int64] {
                (reply.json["responses"] as? [[String: Any]] ?? []).compactMap { response in
                    let headers = (response["headers"] as? [String: Any] ?? [:]).map { ($0.key.lowercased(), $0.value) }
                    let etag = Dictionary(headers) { first, _ in first }["etag"] as? String ?? ""
                    return Int64(etag.filter(\.isNumber))
                }
            }
            let requests = (0..<10).map { n in
                #"{"id":"\#(n)","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(900 + n)))}"#
            }.joined(separator: ",")
            let before = updates.seen
            let reply = try await client.odata(.post, "$batch", token: alice, body: #"{"requests":[\#(requests)]}"#)
            #expect(reply.status == .ok, "\(reply.text)")
            #expect(updates.seen - before == 2)
            let taken = sequences(of: reply)
            #expect(taken.count == 10 && Set(taken).count == 10 && taken == taken.sorted(), "\(taken)")
            let row = try await pool.read { try Int64.fetchOne($0, sql: #"SELECT value FROM "$sequence""#) }
            #expect(row == taken.last)
            let next = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(920)))
            #expect(next.etag.map { Int64($0.filter(\.isNumber)) } == row.map { $0 + 1 })
        }
    }

    /// The audit entries the log has recorded leave the outbox with the next change in one statement, not one a
    /// key: after a batch of 100 creates, the next change runs a single delete on the outbox, which then holds that
    /// change's entry alone.
    @Test func theNextChangeDeletesARecordedBatchsEntriesInOneStatement() async throws {
        try await Fixtures.world { server, client, alice, _ in
            let pool = try #require(server.server.data.store.pool)
            let deletes = try await WriterStatements(pool) {
                $0.hasPrefix(#"DELETE FROM "\#(DataStore.auditOutbox)""#)
            }
            let requests = (0..<100).map { n in
                #"{"id":"\#(n)","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(1000 + n)))}"#
            }.joined(separator: ",")
            let batch = try await client.odata(.post, "$batch", token: alice, body: #"{"requests":[\#(requests)]}"#)
            #expect(batch.status == .ok, "\(batch.text)")
            let before = deletes.seen
            let next = try await client.odata(
                .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(1100)))
            #expect(next.status == .created)
            #expect(deletes.seen - before == 1)
            let left = try await pool.read { db in
                try Int.fetchOne(db, sql: #"SELECT count(*) FROM "\#(DataStore.auditOutbox)""#)
            }
            #expect(left == 1)
        }
    }

    /// A run of changes reads the entities they change in one statement, not one each: 100 `PATCH`es of
    /// `PreflightChecks` run one `SELECT` of it before their updates, and none by key (SQLite's writer, traced).
    @Test func aRunsChangesReadTheirEntitiesInOneStatement() async throws {
        try await Fixtures.world { server, client, alice, _ in
            let creates = (0..<100).map { n in
                #"{"id":"\#(n)","atomicityGroup":"g","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(n)))}"#
            }.joined(separator: ",")
            #expect(
                try await ServerBatchTests.jsonBatch(client, token: alice, creates).allSatisfy {
                    $0["status"] as? Int == 201
                })
            let pool = try #require(server.server.data.store.pool)
            let reads = try await WriterStatements(pool) {
                $0.hasPrefix("SELECT") && $0.contains(#"FROM "PreflightChecks""#)
            }
            let patches = (0..<100).map { n in
                #"{"id":"\#(n)","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(n)))","headers":{"If-Match":"*"},"body":{"Remarks":"r\#(n)"}}"#
            }.joined(separator: ",")
            let answers = try await ServerBatchTests.jsonBatch(client, token: alice, patches)
            #expect(answers.count == 100)
            #expect(answers.allSatisfy { $0["status"] as? Int == 204 })
            #expect(reads.seen == 1)
            let last = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(99)))", token: alice)
            #expect(last.json["Remarks"] as? String == "r99")
        }
    }

    /// A stored row the read ahead cannot read (a file changed by hand) fails only the change of that entity: the
    /// run's other changes read their own and apply.
    @Test func aRowTheReadAheadCannotReadFailsOnlyItsOwnChange() async throws {
        try await Fixtures.world { server, client, alice, _ in
            for n in 1...3 {
                let created = try await client.odata(
                    .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(n)))
                #expect(created.status == .created)
            }
            let pool = try #require(server.server.data.store.pool)
            try await pool.write { db in
                try db.execute(
                    sql: #"UPDATE "PreflightChecks" SET "Status" = X'00' WHERE "ID" = ?"#, arguments: [Fixtures.id(2)])
            }
            let patches = (1...3).map { n in
                #"{"id":"\#(n)","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(n)))","headers":{"If-Match":"*"},"body":{"Remarks":"r\#(n)"}}"#
            }.joined(separator: ",")
            let answers = try await ServerBatchTests.jsonBatch(client, token: alice, patches)
            let statuses = answers.map { $0["status"] as? Int ?? 0 }
            #expect(statuses.count == 3)
            #expect(statuses.first == 204 && statuses.last == 204, "\(statuses)")
            #expect(statuses.dropFirst().first.map { $0 >= 400 } == true, "\(statuses)")
            let third = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(3)))", token: alice)
            #expect(third.json["Remarks"] as? String == "r3")
        }
    }

    /// A read-ahead entity's name is equal only to the same bytes: not to a prefix, a longer run or one byte
    /// changed, and two keys of a set whose literals differ only in Unicode normalisation are two names.
    @Test func entityNamesAreEqualOnlyForTheSameBytes() {
        typealias Name = PreconditionRows.Name
        #expect(Name(bytes: [1, 2, 3]) == Name(bytes: [1, 2, 3]))
        #expect(Name(bytes: [1, 2, 3]) != Name(bytes: [1, 2, 4]))
        #expect(Name(bytes: [1, 2, 3]) != Name(bytes: [1, 2]))
        #expect(Name(bytes: [1, 2]) != Name(bytes: [1, 2, 0]))
        let composed = PreconditionRows.name(set: "Aircraft", key: [KeyValue(name: "ID", value: .string("\u{E9}"))])
        let decomposed = PreconditionRows.name(
            set: "Aircraft", key: [KeyValue(name: "ID", value: .string("e\u{301}"))])
        #expect(composed != decomposed)
        #expect(Set([composed, decomposed, composed]).count == 2)
        let guid = UUID()
        #expect(
            PreconditionRows.name(set: "Checks", key: [KeyValue(name: "ID", value: .guid(guid))])
                == PreconditionRows.name(set: "Checks", key: [KeyValue(name: "ID", value: .guid(guid))]))
    }

    /// A set keyed by a type with more than one literal for a value (one instant at two offsets) is never read
    /// ahead: a change through one literal misses the entity read under the other, which a later change would take
    /// as it was before the first — and pass an ETag the first made stale.
    @Test func aKeyWithTwoLiteralsForOneValueIsNotReadAhead() async throws {
        let model = try ServiceModel(
            csdlJSON: """
                {"$Version": "4.01", "$EntityContainer": "N.C", "N": {
                  "Note": {"$Kind": "EntityType", "$Key": ["At"], "At": {"$Type": "Edm.DateTimeOffset"},
                    "Text": {"$Nullable": true}},
                  "C": {"$Kind": "EntityContainer", "Notes": {"$Collection": true, "$Type": "N.Note"}}}}
                """)
        try await Fixtures.supervisor(on: model) { _, client, sam in
            var etag = ""
            for at in ["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"] {
                let created = try await client.odata(.post, "Notes", token: sam, body: #"{"At":"\#(at)"}"#)
                #expect(created.status == .created, "\(created.text)")
                if etag.isEmpty { etag = ServerBatchTests.ifMatch(created.etag) }
            }
            let answers = try await ServerBatchTests.jsonBatch(
                client, token: sam,
                #"""
                {"id":"1","method":"PATCH","url":"Notes(2026-01-01T01:00:00%2B01:00)","headers":{"If-Match":"*"},"body":{"Text":"a"}},
                {"id":"2","method":"PATCH","url":"Notes(2026-01-01T00:00:00Z)","headers":{"If-Match":"\#(etag)"},"body":{"Text":"b"}},
                {"id":"3","method":"PATCH","url":"Notes(2026-01-02T00:00:00Z)","headers":{"If-Match":"*"},"body":{"Text":"c"}}
                """#)
            #expect(answers.map { $0["status"] as? Int } == [204, 412, 204])
            let first = try await client.odata(.get, "Notes(2026-01-01T00:00:00Z)", token: sam)
            #expect(first.json["Text"] as? String == "a")
        }
    }

    /// The first value taken inside a savepoint that then rolls back (a failed change of a batch) is taken from
    /// the row again by no one: the values go on in memory and the row ends at the last one handed out.
    @Test func aFirstValueTakenInARolledBackSavepointLeavesTheRowAtTheLastHandedOut() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        let pool = try #require(server.server.data.store.pool)
        let handedOut = try await pool.write { db -> Int64 in
            try GRDBConnection.run(db) { base in
                let connection = SequencedConnection(base)
                try await connection.inSavepoint {
                    _ = try await connection.next()
                    return false
                }
                let kept = try await connection.next()
                try await connection.writeBack()
                return kept
            }
        }
        let row = try await pool.read { try Int64.fetchOne($0, sql: #"SELECT value FROM "$sequence""#) }
        #expect(row == handedOut)
    }

    /// The PostgreSQL storage of a server started on PostgreSQL.
    static func postgres(_ server: TestServer) throws -> PostgresStorage {
        guard case .postgres(let storage) = server.server.data.store.storage else {
            throw TestFailure("PostgreSQL expected")
        }
        return storage
    }

    /// A writer that waits too long for a row another writer holds fails as busy (503), not as a server error,
    /// and before the statement deadline gives up on a session PostgreSQL would keep waiting; a session whose
    /// client went away is noticed while it runs.
    @Test func aWriterWaitingTooLongForARowFailsAsUnavailable() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let storage = try Self.postgres(server)
        let settings = try await storage.readStatement { db in
            try await db.fetchOne(
                "SELECT current_setting('lock_timeout'), current_setting('client_connection_check_interval')")
        }
        #expect(settings?[0].text == PostgresStorage.lockTimeout)
        #expect(settings?[0].text == "15s")
        // Below the statement deadline: the lock wait ends first, with PostgreSQL's own error.
        let lockSeconds = Int64(PostgresStorage.lockTimeout.dropLast()) ?? .max
        #expect(lockSeconds * 1_000_000_000 < PostgresSQLConnection.statementDeadline.nanoseconds)
        #expect(settings?[1].text == "5s")
        let row = #"UPDATE "$sequence" SET horizon = horizon WHERE id = 1"#
        let gate = Gate()
        defer { gate.open() }
        let holder = Task {
            try await storage.write { db in
                try await db.execute(row)
                try await gate.hold(pausing: { try await db.execute("SELECT pg_sleep(0.02)") })
            }
        }
        try await gate.entered()
        await #expect {
            try await storage.write { db in
                try await db.execute("SET LOCAL lock_timeout = '100ms'")
                try await db.execute(row)
            }
        } throws: { ($0 as? StorageError)?.kind == .unavailable }
        gate.open()
        try await holder.value
    }

    /// Values of the sequence are taken only inside `DataStore.write`: on SQLite, taken on a plain write's
    /// connection they could commit out of order and a delta reader would miss them. Such a write fails and takes
    /// nothing. On SQLite the values go on one by one; on PostgreSQL each write takes a block of its own.
    @Test(arguments: StorageBackend.allCases) func theSequenceIsTakenOnlyInsideAWriteOfEntities(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let store = server.server.data.store
        let value = { @Sendable in
            try await store.storage.read { db in try await db.fetchOne(#"SELECT value FROM "$sequence""#)?[0].integer }
        }
        let before = try await value()
        let error = await #expect(throws: StorageError.self) {
            try await store.storage.write { db in try await DataStore.nextSequence(db) }
        }
        #expect(error?.kind == .other)
        #expect(error?.description.contains("outside DataStore.write") == true)
        #expect(try await value() == before)
        let first = try await store.write { db in try await DataStore.nextSequence(db) }
        let second = try await store.write { db in
            [try await DataStore.nextSequence(db), try await DataStore.nextSequence(db)]
        }
        switch backend {
        case .sqlite:
            #expect(first == (before ?? 0) + 1)
            #expect(second == [first + 1, first + 2])
        case .postgres:
            #expect(second == [first + DataStore.sequenceBlock, first + DataStore.sequenceBlock + 1])
        }
    }

    /// An instance not yet upgraded, still taking the sequence row in turn, is refused once the database has the
    /// sequence object: its values would also be handed out by the new blocks (the same ETag twice, a tombstone's
    /// key taken, a delta link missing changes). The error names what to do.
    @Test func anOlderInstancesWriterIsRefusedOnceWritersTakeBlocks() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let storage = server.server.data.store.storage
        let error = await #expect(throws: StorageError.self) {
            try await storage.write { db in
                try await db.execute(#"LOCK TABLE "$sequence" IN EXCLUSIVE MODE"#)
                try await db.execute(#"UPDATE "$sequence" SET value = value + 1 WHERE id = 1"#)
            }
        }
        #expect(error?.description.contains("upgrade every older instance") == true, "\(String(describing: error))")
        // The horizon (not the value) still moves: the newer writers' tombstone purge.
        try await storage.write { db in try await db.execute(#"UPDATE "$sequence" SET horizon = horizon WHERE id = 1"#)
        }
    }

    /// A request waiting for one of PostgreSQL's connections (all held busy) is answered at once when its caller
    /// goes away — its access never runs — or when the storage closes, instead of at its 5 s deadline.
    @Test func aWaitingAccessEndsWithItsCallerOrTheStorage() async throws {
        let location = try #require(try await StorageBackend.postgres.freshDatabase())
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let storage = try await PostgresStorage(location: location, connections: 1, logger: quiet)
        defer { storage.close() }
        let busy = Task { try await storage.read { db in try await db.execute("SELECT pg_sleep(1.5)") } }
        try await eventually { storage.pools[0].leases.load(ordering: .relaxed) == 1 }
        try await Task.sleep(for: .milliseconds(100))
        // Cancelled while it waits: answered at once, and its access never runs.
        let ran = Atomic<Bool>(false)
        let cancelled = Task {
            try await storage.read { _ in ran.store(true, ordering: .relaxed) }
        }
        try await eventually { storage.pools[0].queued == 1 }
        cancelled.cancel()
        let stopped = await #expect(throws: (any Error).self) { try await cancelled.value }
        // Not the deadline's answer ("No connection to PostgreSQL within 5 s").
        #expect(stopped.map { "\($0)" }?.contains("within") == false, "\(String(describing: stopped))")
        // Closed while one waits: answered at once as unavailable.
        let queued = Task { try await storage.read { db in try await db.execute("SELECT 1") } }
        try await eventually { storage.pools[0].queued >= 1 }
        storage.close()
        let error = await #expect(throws: StorageError.self) { try await queued.value }
        #expect(error?.kind == .unavailable)
        #expect(error?.description.contains("closed") == true, "\(String(describing: error))")
        _ = try? await busy.value
        let bodyRan = ran.load(ordering: .relaxed)
        #expect(!bodyRan)
    }

    /// Writers of entities do not wait for one another on PostgreSQL: with one write of entities held open (one
    /// account holder's slow batch, or a writer of another instance), more writers than the pool's connections
    /// each take their values of the sequence and commit meanwhile, and a read answers. (Before, every writer of
    /// every instance took the sequence row in turn: these waited for the one held open.)
    @Test func writersOfEntitiesDoNotWaitForOneAnother() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let store = server.server.data.store
        let gate = Gate()
        defer { gate.open() }
        let holderDone = Atomic<Bool>(false)
        let holder = Task {
            let taken = try await store.write { db in
                let taken = try await DataStore.nextSequence(db)
                try await gate.hold(pausing: { try await db.execute("SELECT pg_sleep(0.02)") })
                return taken
            }
            holderDone.store(true, ordering: .relaxed)
            return taken
        }
        try await gate.entered()
        var taken: [Int64] = []
        for _ in 0..<6 { taken.append(try await store.write { db in try await DataStore.nextSequence(db) }) }
        let read = try await store.storage.read { db in try await db.fetchOne("SELECT 1")?[0].integer }
        #expect(read == 1)
        let notWaited = !holderDone.load(ordering: .relaxed)
        #expect(notWaited, "the writers waited for the one held open")
        gate.open()
        taken.append(try await holder.value)
        // Each transaction took a block of its own: no value twice.
        #expect(Set(taken).count == taken.count, "\(taken)")
    }

    /// Writers that read and change the same row at once collide, at either isolation (``WriteIsolation``; at
    /// `REPEATABLE READ` a row changed since the writer's snapshot fails its update): PostgreSQL refuses all but
    /// one, and the storage runs the refused ones again (with their prepared statements) until each has applied
    /// once — no change lost, none applied twice, and the retries counted.
    @Test(arguments: [WriteIsolation.serializable, .rowChecked])
    func collidingWritersAreRetriedUntilEachAppliedOnce(isolation: WriteIsolation) async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let storage = try Self.postgres(server)
        try await storage.write { db in
            try await db.execute("CREATE TABLE counter (id int PRIMARY KEY, value int NOT NULL)")
            try await db.execute("INSERT INTO counter VALUES (1, 0)")
        }
        let before = storage.conflictsRetried
        let writers = 12
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<writers {
                group.addTask {
                    try await storage.write(isolation: isolation) { db in
                        let value = try await db.fetchOne("SELECT value FROM counter WHERE id = 1")?[0].integer ?? -1
                        // Long enough between the read and the write for the others to read the same value.
                        _ = try await db.fetchAll("SELECT pg_sleep(0.02)")
                        try await db.perform("UPDATE counter SET value = ? WHERE id = 1", [.integer(value + 1)])
                    }
                }
            }
            try await group.waitForAll()
        }
        let value = try await storage.read { db in try await db.fetchOne("SELECT value FROM counter WHERE id = 1") }
        #expect(value?[0].integer == Int64(writers))
        #expect(storage.conflictsRetried > before, "no writer collided: the test proves nothing")
    }

    /// Writers of disjoint rows whose keys are neighbours in the key's index, each reading its rows by key and then
    /// changing an indexed column too (as every change of an entity changes its indexed marks, so no update is
    /// HOT). At `SERIALIZABLE` PostgreSQL refuses one writer of each pair — the reads lock the index's page, the
    /// updates insert into it — though no two touch one row; ``WriteIsolation/rowChecked`` (`REPEATABLE READ`)
    /// refuses none. Either way every change applies once.
    @Test(arguments: [WriteIsolation.serializable, .rowChecked])
    func disjointWritersOfNeighbouringKeys(isolation: WriteIsolation) async throws {
        let location = try #require(try await StorageBackend.postgres.freshDatabase())
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        let storage = try await PostgresStorage(location: location, connections: 4, logger: quiet)
        defer { storage.close() }
        try await storage.write { db in
            try await db.execute("CREATE TABLE marked (id int PRIMARY KEY, mark bigint NOT NULL, value int NOT NULL)")
            try await db.execute("CREATE INDEX marked_mark ON marked (mark)")
            try await db.execute("INSERT INTO marked SELECT n, n, 0 FROM generate_series(1, 400) AS n")
        }
        let before = storage.conflictsRetried
        let rounds = 6
        for round in 0..<rounds {
            // Both writers have read their rows before either changes one (on their first attempt).
            let read = Tally()
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<2 {
                    let keys = [Int64(round * 4 + writer * 2 + 1), Int64(round * 4 + writer * 2 + 2)]
                    let attempts = Tally()
                    group.addTask {
                        try await storage.write(isolation: isolation) { db in
                            for key in keys {
                                _ = try await db.fetchOne("SELECT value FROM marked WHERE id = ?", key)
                            }
                            if attempts.count.add(1, ordering: .relaxed).newValue == 1 {
                                read.count.add(1, ordering: .relaxed)
                                try await eventually(within: .seconds(10)) { read.count.load(ordering: .relaxed) >= 2 }
                            }
                            for key in keys {
                                try await db.perform(
                                    "UPDATE marked SET mark = mark + 100000, value = value + 1 WHERE id = ?",
                                    [.integer(key)])
                            }
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        let counts = try await storage.read { db in
            try await db.fetchOne(
                "SELECT count(*) FILTER (WHERE value = 1), count(*) FILTER (WHERE value > 1) FROM marked")
        }
        #expect(counts?[0].integer == Int64(rounds * 4), "each change applied once")
        #expect(counts?[1].integer == 0, "no change applied twice")
        let retried = storage.conflictsRetried - before
        switch isolation {
        case .serializable: #expect(retried > 0, "no writer was refused: the test proves nothing")
        case .rowChecked: #expect(retried == 0, "writers of disjoint rows refused each other \(retried) times")
        }
    }

    /// A `$batch` of reads only never runs in a writing transaction (reads cannot be in atomicity groups): its
    /// reads answer while a writer holds its transaction open.
    @Test func aBatchOfReadsDoesNotWaitForAWriter() async throws {
        try await Fixtures.world(backend: .postgres) { server, client, alice, _ in
            let id = try await client.createCheck(41, token: alice)
            let store = server.server.data.store
            let gate = Gate()
            defer { gate.open() }
            let holderDone = Atomic<Bool>(false)
            let holder = Task {
                try await store.write { db in
                    try await gate.hold(pausing: { try await db.execute("SELECT pg_sleep(0.02)") })
                }
                holderDone.store(true, ordering: .relaxed)
            }
            try await gate.entered()
            let reads = (0..<3).map { n in #"{"id":"\#(n)","method":"GET","url":"PreflightChecks(\#(id))"}"# }
            let reply = try await client.odata(
                .post, "$batch", token: alice, body: #"{"requests":[\#(reads.joined(separator: ","))]}"#)
            let answeredFirst = !holderDone.load(ordering: .relaxed)
            #expect(answeredFirst)
            gate.open()
            let statuses = (reply.json["responses"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? Int }
            #expect(statuses == [200, 200, 200], "\(reply.text)")
            try await holder.value
        }
    }

    /// The reads of a `$batch` that also writes run outside its writing transaction: one account holder's batch of
    /// one change and many slow reads cannot hold the rows its change took while the reads run. Here the batch's
    /// read waits for a lock another session holds on its table; a writer must commit meanwhile, and the batch
    /// must then answer both requests.
    @Test func aBatchsReadsDoNotHoldItsWritingTransaction() async throws {
        try await Fixtures.world(backend: .postgres) { server, client, alice, _ in
            let store = server.server.data.store
            // Another session holds the table the batch reads until the test lets go.
            let gate = Gate()
            defer { gate.open() }
            let holder = Task {
                try await store.storage.write { db in
                    try await db.execute(#"LOCK TABLE "Flights" IN ACCESS EXCLUSIVE MODE"#)
                    try await gate.hold(pausing: { try await db.execute("SELECT pg_sleep(0.02)") })
                }
            }
            let held = #"mode = 'AccessExclusiveLock' AND granted AND relation = '"Flights"'::regclass"#
            try await Self.waitFor(store, held)
            let batch = Task {
                try await client.odata(
                    .post, "$batch", token: alice,
                    body:
                        #"{"requests":[{"id":"1","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(1)))},{"id":"2","method":"GET","url":"Flights"}]}"#
                )
            }
            // The batch's read now waits for the table; a writer gets the turn meanwhile (before the fix it waited
            // for the batch, and failed after the lock timeout).
            let waiting = #"NOT granted AND relation = '"Flights"'::regclass"#
            try await Self.waitFor(store, waiting)
            _ = try await store.write { db in try await db.execute("SELECT 1") }
            #expect(try await Self.locks(store, waiting) == 1, "the batch's read no longer waits")
            gate.open()
            let reply = try await batch.value
            let statuses = (reply.json["responses"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? Int }
            #expect(statuses == [201, 200], "\(reply.text)")
            try await holder.value
        }
    }

    /// Waits until a lock of `pg_locks` matches `condition` (at most 30 s).
    static func waitFor(_ store: DataStore, _ condition: String) async throws {
        try await eventually { try await locks(store, condition) > 0 }
    }

    /// How many locks of `pg_locks` match `condition`.
    static func locks(_ store: DataStore, _ condition: String) async throws -> Int64 {
        try await store.storage.read { db in
            try await db.fetchOne("SELECT count(*) FROM pg_locks WHERE \(condition)")?[0].integer ?? 0
        }
    }

    /// Each event loop leases connections of its own pool, so a request's statements go out and come back on the
    /// loop the request runs on. With one pool for all loops a statement woke the connection's loop, the answer
    /// resumed the request there and the response woke the request's loop again (perf: a `SELECT 1` cost 130 µs
    /// of the server's CPU). The pools' shares add up to the connections asked for, never more.
    @Test func eachEventLoopLeasesConnectionsOfItsOwnAndTheSharesAddUp() async throws {
        let location = try #require(try await StorageBackend.postgres.freshDatabase())
        let loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
        var quiet = Logger(label: "test")
        quiet.logLevel = .critical
        for connections in [1, 3, 8, 9] {
            let storage = try await PostgresStorage(location: location, connections: connections, logger: quiet)
            defer { storage.close() }
            // As many loops as give each pool four connections at least.
            #expect(storage.pools.count == min(loops.count, max(1, connections / 4)))
            #expect(storage.pools.map(\.share).reduce(0, +) == connections)
            #expect(Set(storage.pools.map { ObjectIdentifier($0.loop) }).count == storage.pools.count)
            for pool in storage.pools {
                let chosen = try await pool.loop.submit { (0..<3).map { _ in ObjectIdentifier(storage.pool()) } }.get()
                #expect(chosen == Array(repeating: ObjectIdentifier(pool), count: 3))
            }
            // A loop whose pool is busy (every connection leased or waited for) leases from another with free
            // connections, as do callers off the loops: it does not wait out the lease deadline beside idle ones.
            if storage.pools.count > 1 {
                let busy = storage.pools[0]
                busy.leases.add(busy.share, ordering: .relaxed)
                let elsewhere = try await busy.loop.submit { ObjectIdentifier(storage.pool()) }.get()
                #expect(elsewhere != ObjectIdentifier(busy))
                #expect(ObjectIdentifier(storage.pool()) != ObjectIdentifier(busy))
                busy.leases.subtract(busy.share, ordering: .relaxed)
            }
            // The holders of each pool keep its share open from the start, never more than `connections` in all, also
            // under more reads at once than that: counted by PostgreSQL, through a connection of the test's own.
            let probe = try await PostgresConnection.connect(
                configuration: try PostgresStorage.directConfiguration(location), id: 1, logger: quiet)
            func open() async throws -> Int64 {
                let rows = try await probe.query(
                    """
                    SELECT count(*) FROM pg_stat_activity
                    WHERE application_name = 'baton-server' AND datname = current_database()
                    """, logger: quiet
                ).collect()
                return try rows.first?.decode(Int64.self) ?? -1
            }
            try await eventually { try await open() == Int64(connections) }
            let load = (0..<(connections * 2)).map { _ in
                Task { try await storage.read { db in try await db.execute("SELECT pg_sleep(0.3)") } }
            }
            var most: Int64 = 0
            for _ in 0..<8 {
                most = max(most, try await open())
                try await Task.sleep(for: .milliseconds(50))
            }
            for task in load { _ = try await task.value }
            try await probe.close()
            #expect(most == Int64(connections), "connections: \(connections)")
        }
    }

    /// A value Baton cannot read (an instant of `infinity`, written by hand) fails its read as an error of the
    /// data, never as the database being away (a 503 would have clients and the balancer retry for ever) and
    /// never as a crash.
    @Test func aValueThatCannotBeReadIsAnErrorNotAnOutage() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let storage = server.server.database.storage
        try await storage.write { db in
            _ = try await db.execute("CREATE TABLE odd (n bigint PRIMARY KEY, at timestamptz, day date)", [])
            _ = try await db.execute("INSERT INTO odd VALUES (1, 'infinity', '-infinity'), (2, now(), 'infinity')", [])
        }
        for n in [1, 2] {
            for statement in ["SELECT at FROM odd WHERE n = ?", "SELECT day FROM odd WHERE n = ?"]
            where !(n == 2 && statement.contains("at FROM")) {
                do {
                    let value = try await storage.readStatement { db in try await db.fetchOne(statement, n)?[0] }
                    Issue.record("\(statement) with n = \(n) read \(String(describing: value))")
                } catch let error as StorageError {
                    #expect(error.kind == .other, "\(error)")
                }
            }
        }
        // The instance still answers.
        #expect(
            try await storage.readStatement { db in try await db.fetchOne("SELECT n FROM odd WHERE n = ?", 2)?[0] }
                == .integer(2))
    }

    /// PostgreSQL numerics are read from their binary form as canonical text: PostgreSQL's own text without the
    /// scale's trailing zeros, and `Decimal`'s description wherever `Decimal` holds the value exactly.
    @Test func numericsReadAsTheirCanonicalText() async throws {
        let server = try await TestServer(backend: .postgres)
        defer { server.remove() }
        let storage = server.server.database.storage
        var values = [
            "0", "-0", "0.000", "1", "-1", "10000", "9999", "100000000", "0.0001", "0.00001", "-0.00001", "1.50",
            "100.000", "1e20", "1.5e-20", "123456789.123456789", "12345.6789", "-98765.4321", "0.1", "10.01",
            "99999999999999999999999999999999999999", "50000.5",
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let digits = String(
                (0..<Int.random(in: 1...30, using: &generator)).map { _ in
                    Character(String(Int.random(in: 0...9, using: &generator)))
                })
            let point = Int.random(in: 0...digits.count, using: &generator)
            let sign = Bool.random(using: &generator) ? "-" : ""
            values.append(sign + digits.prefix(point) + (point < digits.count ? "." + digits.dropFirst(point) : ""))
        }
        let inserted = values
        try await storage.write { db in
            _ = try await db.execute("CREATE TABLE numerics (n bigint PRIMARY KEY, v numeric)", [])
            for (n, value) in inserted.enumerated() {
                _ = try await db.execute(
                    "INSERT INTO numerics VALUES (?, CAST(? AS numeric))", n, value.isEmpty ? "0" : value)
            }
        }
        let rows = try await storage.read { db in
            try await db.fetchAll("SELECT v, v::text FROM numerics ORDER BY n", [])
        }
        #expect(rows.count == values.count)
        for row in rows {
            var expected = row[1].text ?? ""
            if expected.contains(".") {
                while expected.hasSuffix("0") { expected.removeLast() }
                if expected.hasSuffix(".") { expected.removeLast() }
            }
            if expected == "-0" { expected = "0" }
            #expect(row[0].text == expected, "PostgreSQL wrote \(row[1].text ?? "-")")
            if let decimal = Decimal(string: expected), expected.filter(\.isNumber).count <= 30 {
                #expect(row[0].text == "\(decimal)")
            }
        }
    }

    @Test(arguments: StorageBackend.allCases) func aWriteThatThrowsLeavesNothingAndUniqueKeysAreTold(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let storage = server.server.database.storage
        struct Stop: Error {}
        await #expect(throws: Stop.self) {
            try await storage.write { db in
                try await db.execute("INSERT INTO settings (id, document) VALUES (1, '{}')")
                throw Stop()
            }
        }
        #expect(try await storage.read { db in try await db.fetchAll("SELECT id FROM settings").count } == 0)
        try await server.addUser("alice")
        await #expect {
            try await server.addUser("alice")
        } throws: { ($0 as? ServerError)?.status == .conflict }
        let error = await #expect(throws: StorageError.self) {
            try await storage.write { db in
                try await db.execute(
                    "INSERT INTO users (name, displayName, role, passwordHash, createdAt) VALUES ('alice', 'A', 'admin', 'x', 0)"
                )
            }
        }
        #expect(error?.kind == .uniqueViolation)
        // An engine's message about a refused value never carries the value (user data) into an error.
        if backend == .postgres {
            let refused = await #expect(throws: StorageError.self) {
                try await storage.read { db in try await db.fetchAll("SELECT CAST(? AS integer)", "secret-value-42") }
            }
            #expect(refused?.description.hasPrefix("PostgreSQL error 22P02") == true, "\(String(describing: refused))")
            #expect(refused?.description.contains("secret-value-42") == false)
        }
    }

    /// Writes are serializable on both engines: concurrent read-then-write transactions lose no update (on
    /// PostgreSQL the engine refuses the losers' commits and the storage runs them again).
    @Test(arguments: StorageBackend.allCases) func concurrentReadThenWriteTransactionsLoseNoUpdate(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let storage = server.server.database.storage
        try await storage.write { db in try await db.execute("INSERT INTO settings (id, document) VALUES (1, '0')") }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<15 {
                        try await storage.write { db in
                            let value =
                                Int(try await db.fetchOne("SELECT document FROM settings")?[0].text ?? "") ?? -1000
                            try await db.execute("UPDATE settings SET document = ? WHERE id = 1", String(value + 1))
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(
            try await storage.read { db in try await db.fetchOne("SELECT document FROM settings")?[0].text } == "60")
    }

    /// A commit the server answered survives a power loss, not only a crash of the process: a device deletes a
    /// change from its queue once the server has answered for it. GRDB opens a pool in WAL mode with
    /// `synchronous = NORMAL`, where a commit reaches the disk only at the next checkpoint.
    @Test func theServerFlushesEachCommitBeforeItAnswers() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        for pool in [server.server.database.pool, server.server.data.store.pool] {
            let level = try await #require(pool).writeWithoutTransaction { db in
                try Int.fetchOne(db, sql: "PRAGMA synchronous")
            }
            #expect(level == 2, "PRAGMA synchronous is \(level ?? -1), not FULL (2)")
        }
    }

    /// `baton-server serve` and an admin command started together on a new data directory each find no master
    /// key: both must end up with the one on disk. One that kept the key it made itself would seal store keys
    /// nothing can open after its exit.
    @Test func processesCreatingTheMasterKeyAtOnceAllUseTheOneOnDisk() async throws {
        for _ in 0..<40 {
            let url = FileManager.default.temporaryDirectory.appendingPathComponent("baton-keys-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: url) }
            let directory = try DataDirectory(url)
            let keys = try await withThrowingTaskGroup(of: Data.self) { group in
                for _ in 0..<8 {
                    group.addTask { try directory.masterKey().withUnsafeBytes { Data($0) } }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let onDisk = try Data(contentsOf: url.appendingPathComponent("keys/master.key"))
            #expect(onDisk.count == 32)
            #expect(keys.allSatisfy { $0 == onDisk }, "\(Set(keys).count) different keys")
            let leftovers = try FileManager.default.contentsOfDirectory(atPath: url.appendingPathComponent("keys").path)
            #expect(leftovers == ["master.key"])
        }
    }

    /// A master-key file that is there but cannot be read (a dangling link to an unmounted secret, a file
    /// restored as another owner) is an error that says so: neither a new key (sealing what nothing can open
    /// after a restart) nor an endless retry.
    @Test func aMasterKeyFileThatCannotBeReadIsAnError() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("baton-keys-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: url) }
        let directory = try DataDirectory(url)
        try FileManager.default.createSymbolicLink(
            atPath: url.appendingPathComponent("keys/master.key").path, withDestinationPath: "/nonexistent/master.key")
        let error = #expect(throws: ServerSetupError.self) { try directory.masterKey() }
        #expect(error?.description.contains("cannot be read") == true, "\(error?.description ?? "")")
    }

    /// On PostgreSQL the flush is the cluster's setting: a server started on a cluster that does not flush its
    /// commits (the tests' throw-away cluster runs with `fsync=off`) says so in its log, naming the setting.
    @Test func aClusterThatDoesNotFlushItsCommitsIsTold() async throws {
        let log = OperationsTests.CapturedLog()
        let server = try await TestServer(backend: .postgres, logger: log.logger)
        defer { server.remove() }
        let warnings = log.objects.filter { $0["level"] as? String == "warning" }
        #expect(
            warnings.contains { ($0["message"] as? String)?.contains("fsync=off") == true },
            "\(warnings)")
        // Each setting that loses answered changes is named; a cluster set for production gets no warning.
        let all = BatonServer.unflushedCommitWarnings(fsync: "off", synchronousCommit: "off", fullPageWrites: "off")
        #expect(all.count == 3)
        for setting in ["fsync=off", "synchronous_commit=off", "full_page_writes=off"] {
            #expect(all.contains { $0.contains(setting) }, "\(setting)")
        }
        #expect(
            BatonServer.unflushedCommitWarnings(fsync: "on", synchronousCommit: "local", fullPageWrites: "on").isEmpty)
    }

    @Test(arguments: StorageBackend.allCases) func aRotatedKeySignsNewTokensAndThePreviousStillVerifies(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let first = try await client.signIn("alice")
            let firstKey = try #require(TokenService.strictES256KeyID(first.access))
            let rotated = try await server.server.rotateSigningKey(actor: "test")
            #expect(rotated != firstKey)
            // The instance looks for a new key once a minute.
            server.clock.advance(by: 61)
            let second = try await client.signIn("alice")
            #expect(TokenService.strictES256KeyID(second.access) == rotated)
            let jwks = try await client.execute(uri: "/oauth/jwks", method: .get) {
                TestClient.Response.object($0.body)
            }
            let listed = (jwks["keys"] as? [[String: Any]])?.compactMap { $0["kid"] as? String }
            #expect(listed == [rotated, firstKey])
            #expect(try await client.get("/me", token: first.access).0 == .ok)
            #expect(try await client.get("/me", token: second.access).0 == .ok)
            // A second rotation deletes the first key: its tokens stop at the next look (a minute at most).
            try await server.server.rotateSigningKey(actor: "test")
            server.clock.advance(by: 61)
            #expect(try await client.get("/me", token: first.access).0 == .unauthorized)
            #expect(try await client.get("/me", token: second.access).0 == .ok)
        }
        let audit = try await server.server.audit.entries().filter { $0.action == "signing-key-rotated" }
        #expect(audit.count == 2)
    }

    /// What a person types as their name on a failed sign-in (often a password typed into the wrong field) never
    /// reaches the database: the throttle's counters are keyed by HMACs.
    @Test(arguments: StorageBackend.allCases) func theThrottleStoresNoTypedNames(backend: StorageBackend) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        try await server.test { client in
            let (status, _) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "Hunter2-MyPassword"),
                ("password", "whatever-it-is"),
            ])
            #expect(status == .badRequest)
        }
        let keys = try await server.server.database.storage.read { db in
            try await db.fetchAll("SELECT key FROM signInFailures").compactMap { $0[0].text }
        }
        #expect(keys.count == 3)
        #expect(keys.allSatisfy { !$0.lowercased().contains("hunter2") && !$0.contains("127.0.0.1") })
    }

    /// The keys are in the database only sealed: neither the private key nor its PEM is there in plaintext.
    @Test(arguments: StorageBackend.allCases) func signingKeysAreSealedInTheDatabase(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let rows = try await server.server.database.storage.read { db in
            try await db.fetchAll("SELECT id, sealedKey FROM tokenSigningKeys")
        }
        let row = try #require(rows.first)
        let sealed = try #require(row["sealedKey"].bytes)
        // AES-GCM: 12-byte nonce, 32-byte key, 16-byte tag — and it opens only with the master key.
        #expect(sealed.count == 60)
        let file = server.masterKeyFile ?? server.directory.appendingPathComponent("keys/master.key")
        let master = SymmetricKey(data: try Data(contentsOf: file))
        #expect(throws: (any Error).self) {
            try AES.GCM.open(AES.GCM.SealedBox(combined: sealed), using: SymmetricKey(size: .bits256))
        }
        let opened = try AES.GCM.open(
            AES.GCM.SealedBox(combined: sealed), using: master,
            authenticating: Data(SigningKeys.context(row["id"].text ?? "").utf8))
        #expect(opened.count == 32)
    }

    /// A data directory from before keys lived in the database keeps its key: tokens it signed stay valid, and
    /// the plaintext key file is gone once the database holds it (and only then).
    @Test func aSigningKeyFileMovesIntoTheDatabase() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-legacy-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let keys = directory.appendingPathComponent("keys")
        try FileManager.default.createDirectory(at: keys, withIntermediateDirectories: true)
        let legacy = P256.Signing.PrivateKey()
        try legacy.pemRepresentation.write(
            to: keys.appendingPathComponent("signing-key.pem"), atomically: true, encoding: .utf8)
        let server = try await TestServer(configure: { $0.dataDirectory = directory })
        defer { server.server.close() }
        try await server.addUser("alice")
        let token = try await server.test { client in try await client.signIn("alice").access }
        #expect(TokenService.strictES256KeyID(token) == DeviceRegistry.keyID(legacy.publicKey))
        #expect(!FileManager.default.fileExists(atPath: keys.appendingPathComponent("signing-key.pem").path))
        // A key file the database does not take (it holds a key already) is not deleted: it would be lost.
        let other = P256.Signing.PrivateKey()
        try other.pemRepresentation.write(
            to: keys.appendingPathComponent("signing-key.pem"), atomically: true, encoding: .utf8)
        let again = try await TestServer(configure: { $0.dataDirectory = directory })
        defer { again.server.close() }
        let later = try await again.test { client in try await client.signIn("alice").access }
        #expect(TokenService.strictES256KeyID(later) == DeviceRegistry.keyID(legacy.publicKey))
        #expect(FileManager.default.fileExists(atPath: keys.appendingPathComponent("signing-key.pem").path))
    }
}

/// A count that concurrent tasks share.
private final class Tally: Sendable {
    let count = Atomic<Int>(0)
}

/// Several instances on one PostgreSQL database behave as one server.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct TwoInstanceStorageTests {
    /// A second in-process instance on the first one's database and master key.
    static func second(of first: TestServer) async throws -> TestServer {
        try await TestServer(configure: {
            $0.database = first.server.configuration.database
            $0.databaseConnections = 4
            $0.masterKeyFile = first.server.configuration.masterKeyFile
            $0.dataService.maximumConcurrentChangesPerUser = Self.changesPerUser
        })
    }

    /// The tests of two instances send one user's changes from many tasks at once: they exercise the storage, not
    /// the limit of one user's changes (``SecurityTests/oneUserCannotQueueMoreChangesThanTheLimit(backend:)``).
    static let changesPerUser = 64

    @Test func tokensRefreshReuseAndTheThrottleAreSharedByInstances() async throws {
        let a = try await TestServer(backend: .postgres)
        defer { a.remove() }
        let b = try await Self.second(of: a)
        defer { b.remove() }
        try await a.addUser("alice")
        try await a.test { atA in
            try await b.test { atB in
                let tokens = try await atA.signIn("alice")
                #expect(try await atB.get("/me", token: tokens.access).0 == .ok)
                // Rotate the refresh token at A, then present the used one at B: the whole family is revoked.
                let (refreshed, body) = try await atA.token([
                    ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", tokens.refresh),
                ])
                #expect(refreshed == .ok)
                let (reused, _) = try await atB.token([
                    ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", tokens.refresh),
                ])
                #expect(reused == .badRequest)
                let newAccess = try #require(body["access_token"] as? String)
                #expect(try await atA.get("/me", token: newAccess).0 == .unauthorized)
                // A user disabled on one instance stops at once on the other.
                let fresh = try await atB.signIn("alice").access
                try await b.server.users.disable("alice")
                #expect(try await atA.get("/me", token: fresh).0 == .unauthorized)
                // Five failures at A and the sixth at B is slowed down: the counters are in the database.
                let wrong = [
                    ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                    ("password", "guess-guess-1"),
                ]
                for _ in 0..<5 { #expect(try await atA.token(wrong).0 == .badRequest) }
                #expect(try await atB.token(wrong).0 == .tooManyRequests)
            }
        }
    }

    @Test func aKeyRotatedOnOneInstanceVerifiesOnTheOther() async throws {
        let a = try await TestServer(backend: .postgres)
        defer { a.remove() }
        let b = try await Self.second(of: a)
        defer { b.remove() }
        try await a.addUser("alice")
        let rotated = try await a.server.rotateSigningKey(actor: "test")
        a.clock.advance(by: 61)
        // Less than B's minute between looks, enough that A's token is not from B's future.
        b.clock.advance(by: 30)
        try await a.test { atA in
            try await b.test { atB in
                let token = try await atA.signIn("alice").access
                #expect(TokenService.strictES256KeyID(token) == rotated)
                // B has not looked yet; the unknown key id makes it look (at most four times a second).
                try await Task.sleep(for: .milliseconds(300))
                #expect(try await atB.get("/me", token: token).0 == .ok)
            }
        }
    }

    @Test func badDatabaseSetupsFailInOneLineAndWriteNothing() async throws {
        let good = try await SharedPostgres.freshDatabase()
        let cluster = try await SharedPostgres.shared()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-bad-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let keyFile = directory.appendingPathComponent("master.key")
        try Data(repeating: 7, count: 32).write(to: keyFile)
        func failure(_ configure: (inout BatonServerConfiguration) -> Void) async -> String {
            var configuration = BatonServerConfiguration()
            configuration.dataDirectory = directory.appendingPathComponent("data")
            configuration.database = good
            configuration.databaseConnections = 4
            configuration.masterKeyFile = keyFile
            configure(&configuration)
            do {
                let server = try await BatonServer(configuration: configuration, logger: Logger(label: "quiet"))
                server.close()
                return "started"
            } catch {
                return "\(error)"
            }
        }
        let noKey = await failure { $0.masterKeyFile = nil }
        #expect(noKey.contains("--master-key-file"), "\(noKey)")
        let missingKey = await failure { $0.masterKeyFile = directory.appendingPathComponent("nope.key") }
        #expect(missingKey.contains("head -c 32 /dev/urandom"), "\(missingKey)")
        var refused = good
        refused.port = try PostgresCluster.freePort()
        let notThere = await failure { $0.database = refused }
        #expect(notThere.contains("Cannot reach PostgreSQL at 127.0.0.1:\(refused.port)"), "\(notThere)")
        var wrongPassword = good
        wrongPassword.password = "not-the-password"
        let password = await failure { $0.database = wrongPassword }
        #expect(password.contains("wrong password or user"), "\(password)")
        #expect(!password.contains("not-the-password"))
        var unknown = good
        unknown.database = "no_such_database"
        let missing = await failure { $0.database = unknown }
        #expect(missing.contains("has no database 'no_such_database'"), "\(missing)")
        for message in [noKey, missingKey, notThere, password, missing] { #expect(!message.contains("\n")) }
        // Nothing was written: the good database has no tables yet.
        let tables = try await offThePool {
            try cluster.psql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", database: good.database)
        }
        #expect(tables == "0\n")
        // It starts with the right setup; then a wrong master key is refused, as is a newer schema.
        #expect(await failure { _ in } == "started")
        try Data(repeating: 8, count: 32).write(to: keyFile)
        let wrongKey = await failure { _ in }
        #expect(wrongKey.contains("master key does not open"), "\(wrongKey)")
        try Data(repeating: 7, count: 32).write(to: keyFile)
        _ = try await offThePool {
            try cluster.psql(
                "INSERT INTO baton_migrations (name, appliedAt) VALUES ('v99', 0)", database: good.database)
        }
        let newer = await failure { _ in }
        #expect(newer.contains("newer baton-server"), "\(newer)")
        // A start that failed closed what it had opened: no connection of baton-server stays on the database.
        var left = ""
        for _ in 0..<50 {
            left = try await offThePool {
                try cluster.psql(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = '\(good.database)' AND application_name = 'baton-server'",
                    database: good.database)
            }
            if left == "0\n" { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(left == "0\n", "connections that failed starts left open: \(left)")
    }

    /// Sam (supervisor) and alice, one aircraft, on two instances of one database; `body` gets both clients
    /// and alice's token (valid on both).
    static func twoInstances(
        _ body:
            @Sendable (TestServer, TestServer, any TestClientProtocol, any TestClientProtocol, String) async throws
            -> Void
    ) async throws {
        let a = try await TestServer(backend: .postgres) {
            $0.dataService.maximumConcurrentChangesPerUser = Self.changesPerUser
        }
        defer { a.remove() }
        let b = try await Self.second(of: a)
        defer { b.remove() }
        try await a.addUser("alice")
        try await a.server.users.add(
            name: "sam", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        try await a.test { atA in
            try await b.test { atB in
                let sam = try await atA.signIn("sam").access
                #expect(try await atB.odata(.post, "Aircraft", token: sam, body: Fixtures.aircraft).status == .created)
                let alice = try await atB.signIn("alice").access
                try await body(a, b, atA, atB, alice)
            }
        }
    }

    /// Follows delta links from `link`, a page at a time (`page` gets the round and the link), until one more
    /// whole pass after `finished()` says every write has committed; counts how often each entity id came.
    static func readDeltas(
        from link: String, finished: () -> Bool,
        page: (Int, String) async throws -> (values: [[String: Any]], next: String?, delta: String?)
    ) async throws -> (seen: [String: Int], rounds: Int) {
        var link = link
        var seen: [String: Int] = [:]
        var round = 0
        var lastPass = false
        while true {
            let answer = try await page(round, link)
            round += 1
            for value in answer.values { if let id = value["ID"] as? String { seen[id, default: 0] += 1 } }
            if let next = answer.next {
                link = next
                continue
            }
            link = try #require(answer.delta)
            if lastPass { break }
            lastPass = finished()
        }
        return (seen, round)
    }

    /// Writers on both instances commit at once while a reader follows delta links, alternating instances:
    /// every change appears in exactly one delta page. (A delta link carries the snapshot of its read; the next
    /// page returns the changes whose transaction that snapshot did not see and the new one does.)
    @Test func everyChangeFromEitherInstanceReachesTheDeltaReaderExactlyOnce() async throws {
        try await Self.twoInstances { _, _, atA, atB, alice in
            let start = try await atA.odata(
                .get, "PreflightChecks", token: alice, headers: [("Prefer", "odata.track-changes")])
            let link = try #require(start.json["@odata.deltaLink"] as? String)
            let done = Mutex(false)
            let ids = (0..<4).flatMap { writer in (0..<12).map { Fixtures.id(1_000 * (writer + 1) + $0) } }
            async let writing: Void = {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in 0..<4 {
                        group.addTask {
                            let client = writer % 2 == 0 ? atA : atB
                            for id in ids[(writer * 12)..<((writer + 1) * 12)] {
                                let reply = try await client.odata(
                                    .post, "PreflightChecks", token: alice, body: Fixtures.check(id))
                                #expect(reply.status == .created, "\(reply.text)")
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                done.withLock { $0 = true }
            }()
            let (seen, round) = try await Self.readDeltas(from: link, finished: { done.withLock { $0 } }) {
                round, link in
                let page = try await (round % 2 == 0 ? atA : atB).odata(
                    .get, String(link.dropFirst("http://127.0.0.1:8080/odata/".count)), token: alice)
                #expect(page.status == .ok, "\(page.text)")
                return (
                    page.values, page.json["@odata.nextLink"] as? String, page.json["@odata.deltaLink"] as? String
                )
            }
            try await writing
            #expect(Set(seen.keys) == Set(ids))
            #expect(seen.values.allSatisfy { $0 == 1 }, "\(seen.filter { $0.value != 1 })")
            #expect(round > 2)
        }
    }

    /// Makes the commit of a check whose remark is `delay SECONDS` wait that long, in PostgreSQL itself: a deferred
    /// constraint trigger sleeps at COMMIT, while its transaction is still open.
    static func delayCommits(of server: TestServer) async throws {
        try await server.server.data.store.storage.write { db in
            try await db.execute(
                """
                CREATE FUNCTION test_delay_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW."Remarks" LIKE 'delay %' THEN PERFORM pg_sleep(substr(NEW."Remarks", 7)::float8); END IF;
                    RETURN NULL;
                END $$
                """)
            try await db.execute(
                #"CREATE CONSTRAINT TRIGGER test_delay_commit AFTER INSERT ON "PreflightChecks" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_delay_commit()"#
            )
        }
    }

    /// Returns once a session of `server`'s database sleeps in `pg_sleep` (a commit held by ``delayCommits(of:)``).
    static func waitForASleepingCommit(_ server: TestServer) async throws {
        try await eventually {
            try await server.server.data.store.storage.read { db in
                try await db.fetchOne("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'")?[0]
                    .integer ?? 0
            } > 0
        }
    }

    /// A repeatable request retried at the other instance while its first attempt is still committing (writers of
    /// entities no longer wait for one another): the retry's insert waits for the first's key, PostgreSQL refuses
    /// it as a serialization failure (the first committed after the retry's snapshot), and the retry runs again and
    /// answers the first's result — not a 409 for the key.
    @Test func aRetryArrivingWhileTheFirstAttemptCommitsAnswersItsResult() async throws {
        try await Self.twoInstances { a, _, atA, atB, alice in
            try await Self.delayCommits(of: a)
            let headers = [
                ("Repeatability-Request-ID", "retry-while-committing"),
                ("Repeatability-First-Sent", Repeatability.formatIMFFixdate(a.clock.current.withLock { $0 })),
            ]
            let body = Fixtures.check(Fixtures.id(8), extra: #","Remarks":"delay 1""#)
            let first = Task {
                try await atA.odata(.post, "PreflightChecks", token: alice, headers: headers, body: body)
            }
            try await Self.waitForASleepingCommit(a)
            let retry = try await atB.odata(.post, "PreflightChecks", token: alice, headers: headers, body: body)
            let answered = try await first.value
            for answer in [answered, retry] {
                #expect(answer.status == .created, "\(answer.text)")
                #expect(answer.headers[.repeatabilityResultForTests] == "accepted")
                #expect(answer.headers[.eTag] == answered.headers[.eTag])
            }
            #expect(try await atB.odata(.get, "PreflightChecks/$count", token: alice).text == "1")
        }
    }

    /// Eight writers on two instances with their commits delayed at will and so reordered (a deferred trigger
    /// sleeps at COMMIT for a check whose remark asks for it), while a reader follows delta links alternating
    /// instances: no writer waits for another's commit — a change that took its sequence values after a slow one
    /// commits first and reaches the reader first — and every change reaches the reader exactly once, the late
    /// commits too. (With one turn for all writers, values committed in order and the fast writer waited.)
    @Test func lateCommitsOfEightWritersOnTwoInstancesReachTheDeltaReaderOnce() async throws {
        try await Self.twoInstances { a, _, atA, atB, alice in
            try await Self.delayCommits(of: a)
            func check(_ id: String, delay: Double) -> String {
                Fixtures.check(id, extra: delay > 0 ? #","Remarks":"delay \#(delay)""# : "")
            }
            func delta(_ link: String, at client: any TestClientProtocol) async throws -> ODataReply {
                let page = try await client.odata(
                    .get, String(link.dropFirst("http://127.0.0.1:8080/odata/".count)), token: alice)
                #expect(page.status == .ok, "\(page.text)")
                return page
            }
            let start = try await atA.odata(
                .get, "PreflightChecks", token: alice, headers: [("Prefer", "odata.track-changes")])
            var link = try #require(start.json["@odata.deltaLink"] as? String)
            // A slow writer on one instance holds its commit; a writer on the other takes its values after it and
            // commits meanwhile.
            let slowID = Fixtures.id(5_000)
            let fastID = Fixtures.id(5_001)
            let slowDone = Atomic<Bool>(false)
            let slow = Task {
                let reply = try await atA.odata(.post, "PreflightChecks", token: alice, body: check(slowID, delay: 2))
                slowDone.store(true, ordering: .relaxed)
                return reply
            }
            try await Self.waitForASleepingCommit(a)
            let fast = try await atB.odata(.post, "PreflightChecks", token: alice, body: check(fastID, delay: 0))
            #expect(fast.status == .created, "\(fast.text)")
            let fastFirst = !slowDone.load(ordering: .relaxed)
            #expect(fastFirst, "the fast writer waited for the slow one's commit")
            let between = try await delta(link, at: atB)
            let early = Set(between.values.compactMap { $0["ID"] as? String })
            #expect(early == [fastID])
            link = try #require(between.json["@odata.deltaLink"] as? String)
            #expect(try await slow.value.status == .created)
            // Then eight writers, four on each instance, each commit delayed by a different while.
            let ids = (0..<8).flatMap { writer in (0..<5).map { Fixtures.id(6_000 + 100 * writer + $0) } }
            let done = Mutex(false)
            async let writing: Void = {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for writer in 0..<8 {
                        group.addTask {
                            let client = writer % 2 == 0 ? atA : atB
                            for (n, id) in ids[(writer * 5)..<((writer + 1) * 5)].enumerated() {
                                let delay = Double((writer * 7 + n * 3) % 5) / 10
                                let reply = try await client.odata(
                                    .post, "PreflightChecks", token: alice, body: check(id, delay: delay))
                                #expect(reply.status == .created, "\(reply.text)")
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                done.withLock { $0 = true }
            }()
            let (seen, _) = try await Self.readDeltas(from: link, finished: { done.withLock { $0 } }) { round, link in
                let page = try await delta(link, at: round % 2 == 0 ? atA : atB)
                return (
                    page.values, page.json["@odata.nextLink"] as? String, page.json["@odata.deltaLink"] as? String
                )
            }
            try await writing
            #expect(Set(seen.keys) == Set(ids + [slowID]))
            #expect(seen.values.allSatisfy { $0 == 1 }, "\(seen.filter { $0.value != 1 })")
        }
    }

    /// The same repeatable request at both instances at once, then again: applied once, every answer the
    /// first's.
    @Test func aRetryThatReachesTheOtherInstanceAppliesOnce() async throws {
        try await Self.twoInstances { a, _, atA, atB, alice in
            let headers = [
                ("Repeatability-Request-ID", "retry-1"),
                ("Repeatability-First-Sent", Repeatability.formatIMFFixdate(a.clock.current.withLock { $0 })),
            ]
            let body = Fixtures.check(Fixtures.id(7))
            async let first = atA.odata(.post, "PreflightChecks", token: alice, headers: headers, body: body)
            async let second = atB.odata(.post, "PreflightChecks", token: alice, headers: headers, body: body)
            let answers = try await [first, second]
            let third = try await atA.odata(.post, "PreflightChecks", token: alice, headers: headers, body: body)
            for answer in answers + [third] {
                #expect(answer.status == .created, "\(answer.text)")
                #expect(answer.headers[.eTag] == answers[0].headers[.eTag])
                #expect(answer.headers[.repeatabilityResultForTests] == "accepted")
            }
            #expect(try await atB.odata(.get, "PreflightChecks/$count", token: alice).text == "1")
            // ETags mean the same on both: B's version is current at A, and stale after A's change.
            let read = try await atB.odata(.get, "PreflightChecks(\(Fixtures.id(7)))", token: alice)
            let etag = try #require(read.headers[.eTag])
            let patched = try await atA.odata(
                .patch, "PreflightChecks(\(Fixtures.id(7)))", token: alice, headers: [("If-Match", etag)],
                body: #"{"Remarks":"checked twice"}"#)
            #expect(patched.status == .ok || patched.status == .noContent, "\(patched.text)")
            let stale = try await atB.odata(
                .patch, "PreflightChecks(\(Fixtures.id(7)))", token: alice, headers: [("If-Match", etag)],
                body: #"{"Remarks":"lost update"}"#)
            #expect(stale.status == .preconditionFailed)
        }
    }

    /// The same repeatable creation sent eight times at once to one instance: applied once, and every copy answered
    /// with its answer (201 and its ETag) — none meets the entity the first created (409). Changes of entities run at
    /// `REPEATABLE READ` on PostgreSQL (``WriteIsolation/rowChecked``); the id is claimed before the change, so the
    /// copies wait for the first's claim and then find its answer.
    @Test(arguments: StorageBackend.allCases) func copiesOfARepeatableCreationSentAtOnceApplyOnce(
        backend: StorageBackend
    ) async throws {
        try await Fixtures.world(backend: backend) { server, client, alice, _ in
            for round in 1...3 {
                let headers = [
                    ("Repeatability-Request-ID", "at-once-\(round)"),
                    ("Repeatability-First-Sent", Repeatability.formatIMFFixdate(server.clock.current.withLock { $0 })),
                ]
                let body = Fixtures.check(Fixtures.id(100 + round))
                let answers = try await withThrowingTaskGroup(of: ODataReply.self) { group in
                    for _ in 0..<8 {
                        group.addTask {
                            try await client.odata(.post, "PreflightChecks", token: alice, headers: headers, body: body)
                        }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                for answer in answers {
                    #expect(answer.status == .created, "\(answer.text)")
                    #expect(answer.headers[.eTag] == answers[0].headers[.eTag])
                    #expect(answer.headers[.repeatabilityResultForTests] == "accepted")
                }
            }
            #expect(try await client.odata(.get, "PreflightChecks/$count", token: alice).text == "3")
        }
    }

    /// On PostgreSQL a `$batch` of changes of entities by key runs at `REPEATABLE READ` (``WriteIsolation/rowChecked``),
    /// their ETags read ahead in one statement: two users' batches of disjoint checks whose keys are neighbours, sent
    /// at once round after round, never make the storage run a write again, and every change applies once, with
    /// its ETag checked (a stale one still fails).
    @Test func batchesOfDisjointNeighbouringChecksDoNotRefuseEachOther() async throws {
        try await Fixtures.world(backend: .postgres) { server, client, alice, sam in
            let perBatch = 20
            func creations(_ numbers: ClosedRange<Int>) -> String {
                numbers.map { n in
                    #"{"id":"\#(n)","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(n)))}"#
                }.joined(separator: ",")
            }
            func patches(_ numbers: ClosedRange<Int>, round: Int) -> String {
                numbers.map { n in
                    #"{"id":"\#(n)","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(n)))","headers":{"If-Match":"*"},"body":{"Remarks":"round \#(round)"}}"#
                }.joined(separator: ",")
            }
            let aliceOwn = 1...perBatch
            let samOwn = (perBatch + 1)...(2 * perBatch)
            let created =
                try await ServerBatchTests.jsonBatch(client, token: alice, creations(aliceOwn))
                + ServerBatchTests.jsonBatch(client, token: sam, creations(samOwn))
            #expect(created.allSatisfy { $0["status"] as? Int == 201 })
            let before = server.server.writesRetried
            let rounds = 6
            for round in 1...rounds {
                async let first = ServerBatchTests.jsonBatch(client, token: alice, patches(aliceOwn, round: round))
                async let second = ServerBatchTests.jsonBatch(client, token: sam, patches(samOwn, round: round))
                let answers = try await first + second
                #expect(answers.count == 2 * perBatch)
                #expect(answers.allSatisfy { $0["status"] as? Int == 204 }, "\(answers.map { $0["status"] ?? "" })")
            }
            #expect(server.server.writesRetried == before, "writes ran again: \(server.server.writesRetried - before)")
            let changed = try await client.odata(
                .get, "PreflightChecks/$count?$filter=Remarks eq 'round \(rounds)'", token: sam)
            #expect(changed.text == "\(2 * perBatch)")
            // Read ahead, each ETag is still checked: a stale one fails its change alone.
            let read = try await client.odata(.get, "PreflightChecks(\(Fixtures.id(1)))", token: alice)
            let etag = try #require(read.headers[.eTag])
            _ = try await ServerBatchTests.jsonBatch(client, token: alice, patches(1...2, round: rounds + 1))
            let stale = try await ServerBatchTests.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(1)))","headers":{"If-Match":\#(JSONValue.string(etag).serialized)},"body":{"Remarks":"lost"}},
                {"id":"2","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(2)))","headers":{"If-Match":"*"},"body":{"Remarks":"kept"}}
                """#)
            #expect(stale.map { $0["status"] as? Int } == [412, 204])
        }
    }

    /// The interleaving `REPEATABLE READ` must get right: another writer commits a new version of a check after a
    /// change read its ETag (read ahead, in a `$batch`; alone, for a single request) and before the change writes
    /// it. The change's update waits for the other writer's row, PostgreSQL refuses it once that commits (the row
    /// changed since its snapshot), and the storage runs it again: it reads the new ETag and answers 412. At
    /// `READ COMMITTED` the update would have gone through on the stale ETag and lost the other writer's change.
    @Test func aVersionCommittedBetweenAChangesReadAndItsWriteFailsTheChange() async throws {
        try await Fixtures.world(backend: .postgres) { server, client, alice, _ in
            let store = server.server.data.store
            let first = try await client.createCheck(1, token: alice)
            let second = try await client.createCheck(2, token: alice)
            /// Holds a new version of `id` uncommitted until `send` is waiting for its row, then commits it.
            func interleave(_ id: String, _ send: @escaping @Sendable () async throws -> [Int]) async throws -> [Int] {
                let gate = Gate()
                defer { gate.open() }
                let holder = Task {
                    try await store.write { db in
                        let sequence = try await DataStore.nextSequence(db)
                        try await db.execute(
                            #"UPDATE "PreflightChecks" SET "Remarks" = 'changed meanwhile', "$seq" = ? WHERE "ID" = ?::uuid"#,
                            sequence, id)
                        try await gate.hold(pausing: { try await db.execute("SELECT pg_sleep(0.02)") })
                    }
                }
                try await gate.entered()
                let sent = Task { try await send() }
                try await eventually {
                    try await store.storage.read { db in
                        try await db.fetchOne("SELECT count(*) FROM pg_locks WHERE NOT granted")?[0].integer ?? 0
                    } > 0
                }
                gate.open()
                try await holder.value
                return try await sent.value
            }
            var read: [String] = []
            for id in [first, second] {
                read.append(
                    try #require(try await client.odata(.get, "PreflightChecks(\(id))", token: alice).headers[.eTag]))
            }
            let etags = read
            let before = server.server.writesRetried
            let batch = try await interleave(first) {
                try await ServerBatchTests.jsonBatch(
                    client, token: alice,
                    #"""
                    {"id":"1","method":"PATCH","url":"PreflightChecks(\#(first))","headers":{"If-Match":\#(JSONValue.string(etags[0]).serialized)},"body":{"Remarks":"stale"}},
                    {"id":"2","method":"PATCH","url":"PreflightChecks(\#(second))","headers":{"If-Match":\#(JSONValue.string(etags[1]).serialized)},"body":{"Remarks":"current"}}
                    """#
                ).map { $0["status"] as? Int ?? 0 }
            }
            #expect(batch == [412, 204])
            let single = try await interleave(second) {
                let current = try #require(
                    try await client.odata(.get, "PreflightChecks(\(second))", token: alice).headers[.eTag])
                return [
                    try await client.odata(
                        .patch, "PreflightChecks(\(second))", token: alice, headers: [("If-Match", current)],
                        body: #"{"Remarks":"stale"}"#
                    ).status.code
                ]
            }
            #expect(single == [412])
            #expect(server.server.writesRetried - before >= 2, "the changes were not refused and run again")
            for id in [first, second] {
                let read = try await client.odata(.get, "PreflightChecks(\(id))", token: alice)
                #expect(read.json["Remarks"] as? String == "changed meanwhile")
            }
        }
    }

    /// Stored answers past their window are dropped by one change of an instance, not by each (``Chores``): two
    /// users' batches of repeatable changes sent at once, each time the day after older answers expired, do not
    /// both drop the same answers and refuse each other (before, each change dropped them: the second batch to
    /// reach them waited for the first's and ran again).
    @Test func batchesAtOnceDoNotBothDropTheExpiredAnswers() async throws {
        try await Fixtures.world(backend: .postgres) { server, client, _, _ in
            _ = try await server.addUser("bob")
            let users = ["alice", "bob"]
            let perBatch = 10
            var numbers: [String: ClosedRange<Int>] = [:]
            for (index, user) in users.enumerated() {
                numbers[user] = (index * perBatch + 1)...((index + 1) * perBatch)
                let token = try await client.signIn(user).access
                let created = try await ServerBatchTests.jsonBatch(
                    client, token: token,
                    numbers[user, default: 0...0].map { n in
                        #"{"id":"\#(n)","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(n)))}"#
                    }.joined(separator: ","))
                #expect(created.allSatisfy { $0["status"] as? Int == 201 })
            }
            let before = server.server.writesRetried
            for round in 1...4 {
                // The answers of the round before are past the window now.
                server.clock.advance(by: 8 * 86_400)
                let firstSent = Repeatability.formatIMFFixdate(server.clock.current.withLock { $0 })
                func patches(_ user: String) -> String {
                    numbers[user, default: 0...0].map { n in
                        #"{"id":"\#(n)","method":"PATCH","url":"PreflightChecks(\#(Fixtures.id(n)))","headers":{"If-Match":"*","Repeatability-Request-ID":"\#(user)-\#(round)-\#(n)","Repeatability-First-Sent":"\#(firstSent)"},"body":{"Remarks":"round \#(round)"}}"#
                    }.joined(separator: ",")
                }
                let alice = try await client.signIn("alice").access
                let bob = try await client.signIn("bob").access
                let (aliceBody, bobBody) = (patches("alice"), patches("bob"))
                async let first = ServerBatchTests.jsonBatch(client, token: alice, aliceBody)
                async let second = ServerBatchTests.jsonBatch(client, token: bob, bobBody)
                let answers = try await first + second
                #expect(answers.count == users.count * perBatch)
                #expect(answers.allSatisfy { $0["status"] as? Int == 204 }, "\(answers.map { $0["status"] ?? "" })")
            }
            #expect(server.server.writesRetried == before, "writes ran again: \(server.server.writesRetried - before)")
            // The answers of all rounds but the last were dropped; the requests are still known.
            let kept = try await server.server.data.store.storage.read { db in
                try await db.fetchOne(
                    #"SELECT count(*) FILTER (WHERE headers IS NOT NULL), count(*) FROM "$repeatability""#)
            }
            #expect(kept?[0].integer == Int64(users.count * perBatch))
            #expect(kept?[1].integer == Int64(4 * users.count * perBatch))
        }
    }

    /// A clean-up is due on an instance once per tenth of its window, at most a minute apart, and again whenever
    /// the clock went back.
    @Test func aChoreIsDueOncePerTenthOfItsWindow() {
        let chores = Chores()
        let start = Date(timeIntervalSince1970: 1_000_000)
        #expect(chores.isDue(.answers, window: 7 * 86_400, at: start))
        #expect(!chores.isDue(.answers, window: 7 * 86_400, at: start.addingTimeInterval(59)))
        #expect(chores.isDue(.tombstones, window: 7 * 86_400, at: start.addingTimeInterval(59)))
        #expect(chores.isDue(.answers, window: 7 * 86_400, at: start.addingTimeInterval(60)))
        #expect(chores.isDue(.answers, window: 7 * 86_400, at: start))
        // A window of a second: due every tenth of it.
        #expect(chores.isDue(.tombstones, window: 1, at: start.addingTimeInterval(59.1)))
        #expect(!chores.isDue(.tombstones, window: 1, at: start.addingTimeInterval(59.15)))
        #expect(chores.isDue(.tombstones, window: 1, at: start.addingTimeInterval(59.2)))
    }

    /// On PostgreSQL a `$batch` run sends its updates of entities together, one statement a set and shape
    /// (``SequencedConnection/deferUpdate(_:_:translator:)``): each change still answers the ETag its entity then has,
    /// and when the database refuses one row (a trigger here refuses one value) the run goes again with each update
    /// on its own, so that change alone fails and the others apply.
    @Test func updatesSentTogetherAnswerTheirOwnETagsAndFailAlone() async throws {
        try await Fixtures.world(backend: .postgres) { server, client, alice, _ in
            var ids: [String] = []
            for n in 1...4 { ids.append(try await client.createCheck(n, token: alice)) }
            func patches(_ remarks: [String], group: Bool = false) -> String {
                zip(ids, remarks).enumerated().map { index, pair in
                    #"{"id":"\#(index + 1)",\#(group ? #""atomicityGroup":"g","# : "")"method":"PATCH","url":"PreflightChecks(\#(pair.0))","headers":{"If-Match":"*"},"body":{"Remarks":"\#(pair.1)"}}"#
                }.joined(separator: ",")
            }
            func etag(_ response: [String: Any]) -> String? {
                Dictionary(
                    (response["headers"] as? [String: Any] ?? [:]).map { ($0.key.lowercased(), $0.value) }
                ) { first, _ in first }["etag"] as? String
            }
            // Each UPDATE statement on the checks leaves a row here.
            let storage = server.server.data.store.storage
            try await storage.write { db in
                try await db.execute("CREATE TABLE update_statements (at timestamptz NOT NULL)")
                try await db.execute(
                    #"""
                    CREATE FUNCTION count_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                        INSERT INTO update_statements VALUES (now()); RETURN NULL; END $$
                    """#)
                try await db.execute(
                    #"CREATE TRIGGER count_update AFTER UPDATE ON "PreflightChecks" FOR EACH STATEMENT EXECUTE FUNCTION count_update()"#
                )
            }
            let together = try await ServerBatchTests.jsonBatch(
                client, token: alice, patches(["one", "two", "three", "four"]))
            #expect(together.map { $0["status"] as? Int } == [204, 204, 204, 204])
            let statements = try await storage.read { db in
                try await db.fetchOne("SELECT count(*) FROM update_statements")?[0].integer
            }
            #expect(statements == 1, "the four updates went out in \(statements ?? 0) statements")
            for (id, response) in zip(ids, together) {
                let read = try await client.odata(.get, "PreflightChecks(\(id))", token: alice)
                #expect(read.headers[.eTag] == etag(response), "\(id)")
            }
            try await storage.write { db in
                try await db.execute(
                    #"""
                    CREATE FUNCTION refuse_remarks() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                        IF NEW."Remarks" = 'refuse me' THEN RAISE EXCEPTION 'refused' USING ERRCODE = 'check_violation';
                        END IF; RETURN NEW; END $$
                    """#)
                try await db.execute(
                    #"CREATE TRIGGER refuse_remarks BEFORE UPDATE ON "PreflightChecks" FOR EACH ROW EXECUTE FUNCTION refuse_remarks()"#
                )
            }
            let refused = try await ServerBatchTests.jsonBatch(
                client, token: alice, patches(["first", "refuse me", "third", "fourth"]))
            #expect(refused.map { $0["status"] as? Int } == [204, 400, 204, 204])
            var remarks: [String] = []
            for id in ids {
                let read = try await client.odata(.get, "PreflightChecks(\(id))", token: alice)
                remarks.append(read.json["Remarks"] as? String ?? "")
            }
            #expect(remarks == ["first", "two", "third", "fourth"])
            // An atomicity group's updates go out together too; a row refused fails the group, naming the change
            // whose row it was, and changes nothing.
            let grouped = try await ServerBatchTests.jsonBatch(
                client, token: alice, patches(["g1", "g2", "g3", "g4"], group: true))
            #expect(grouped.map { $0["status"] as? Int } == [204, 204, 204, 204])
            let afterGroup = try await storage.read { db in
                try await db.fetchOne("SELECT count(*) FROM update_statements")?[0].integer
            }
            // Since the first run: the refused run's three changes applied, each by itself, and the group's one.
            let grew: Int64 = (afterGroup ?? 0) - (statements ?? 0)
            #expect(grew == 3 + 1)
            let refusedGroup = try await ServerBatchTests.jsonBatch(
                client, token: alice, patches(["h1", "refuse me", "h3", "h4"], group: true))
            #expect(refusedGroup.map { $0["status"] as? Int } == [424, 400, 424, 424])
            remarks = []
            for id in ids {
                let read = try await client.odata(.get, "PreflightChecks(\(id))", token: alice)
                remarks.append(read.json["Remarks"] as? String ?? "")
            }
            #expect(remarks == ["g1", "g2", "g3", "g4"])
            // A creation between updates sends the updates before it first, so that each statement sees the ones
            // before it: the first two together, then the creation, then the last alone.
            let mixed = try await ServerBatchTests.jsonBatch(
                client, token: alice,
                #"""
                {"id":"1","method":"PATCH","url":"PreflightChecks(\#(ids[0]))","headers":{"If-Match":"*"},"body":{"Remarks":"m1"}},
                {"id":"2","method":"PATCH","url":"PreflightChecks(\#(ids[1]))","headers":{"If-Match":"*"},"body":{"Remarks":"m2"}},
                {"id":"3","method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(9)))},
                {"id":"4","method":"PATCH","url":"PreflightChecks(\#(ids[2]))","headers":{"If-Match":"*"},"body":{"Remarks":"m3"}}
                """#)
            #expect(mixed.map { $0["status"] as? Int } == [204, 204, 201, 204])
            let afterMixed = try await storage.read { db in
                try await db.fetchOne("SELECT count(*) FROM update_statements")?[0].integer
            }
            let grewMixed: Int64 = (afterMixed ?? 0) - (afterGroup ?? 0)
            #expect(grewMixed == 2)
            for (id, response) in zip(ids.prefix(2) + [ids[2]], [mixed[0], mixed[1], mixed[3]]) {
                let read = try await client.odata(.get, "PreflightChecks(\(id))", token: alice)
                #expect(read.headers[.eTag] == etag(response), "\(id)")
            }
            remarks = []
            for id in ids {
                let read = try await client.odata(.get, "PreflightChecks(\(id))", token: alice)
                remarks.append(read.json["Remarks"] as? String ?? "")
            }
            #expect(remarks == ["m1", "m2", "m3", "g4"])
        }
    }

    /// Two entity sets whose names are one name to Swift's `String` (`Café` composed, and `Cafe` with a combining
    /// acute) but two to the database, which compares names byte for byte: the server keys its caches of SQL text by
    /// name, and took one set's for the other's (a creation in the second set went into the first set's table, and
    /// answered 409 for a key taken there), and a run's updates of both would have gone out as one statement. A
    /// model file cannot declare both (its JSON refuses the second member as a duplicate), nor the model's
    /// initialiser; a model built in Swift could add the second set afterwards: the server refuses it as it starts.
    @Test func aModelChangedToHoldTwoSetsOfOneNameIsRefused() async throws {
        var model = try ServiceModel(
            csdlJSON: #"""
                {"$Version": "4.01", "$EntityContainer": "Uni.Container",
                 "Uni": {
                  "Note": {"$Kind": "EntityType", "$Key": ["ID"], "ID": {"$Type": "Edm.Int32"},
                    "Text": {"$Nullable": true}},
                  "Container": {"$Kind": "EntityContainer",
                    "Caf\u00e9": {"$Collection": true, "$Type": "Uni.Note"}}}}
                """#)
        model.entitySets.append(EntitySet(name: "Cafe\u{301}", entityType: "Uni.Note"))
        #expect(model.entitySets.count == 2)
        for backend in StorageBackend.allCases {
            let error = await #expect(throws: ServerSetupError.self) {
                let server = try await TestServer(backend: backend) { $0.dataService.model = model }
                server.remove()
            }
            #expect(error?.description.contains("declared twice") == true, "\(String(describing: error))")
        }
    }

    /// Which changes may run at `REPEATABLE READ` (``WriteIsolation/rowChecked``): creations in an entity set and
    /// updates or deletes of one entity by key, of sets without media or streams; anything else — a read, a
    /// navigation, a property, a photo, a stream, a `$n` not made yet — keeps the whole run `SERIALIZABLE`.
    @Test func onlyChangesOfEntitiesByKeyRunRowChecked() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        let service = server.server.data
        let streams = try ServiceModel(csdlJSON: StreamPropertyTests.model)
        let id = Fixtures.id(1)
        let cases: [(String, String, ServiceModel?, WriteIsolation)] = [
            ("POST", "PreflightChecks", nil, .rowChecked),
            ("PATCH", "PreflightChecks(\(id))", nil, .rowChecked),
            ("PUT", "PreflightChecks(\(id))", nil, .rowChecked),
            ("DELETE", "PreflightChecks(\(id))", nil, .rowChecked),
            ("PATCH", "Aircraft('D-AIBL')", nil, .rowChecked),
            ("GET", "PreflightChecks(\(id))", nil, .serializable),
            ("PATCH", "PreflightChecks", nil, .serializable),
            ("PATCH", "PreflightChecks(\(id))/Aircraft", nil, .serializable),
            ("PUT", "PreflightChecks(\(id))/Remarks", nil, .serializable),
            ("POST", "CheckPhotos", nil, .serializable),
            ("PATCH", "CheckPhotos(\(id))", nil, .serializable),
            ("POST", "Inspections", streams, .serializable),
            ("PATCH", "Inspections(\(id))", streams, .serializable),
            ("PUT", "Inspections(\(id))/Photo", streams, .serializable),
        ]
        for (method, text, model, expected) in cases {
            let url = try ODataURL(parsing: text, model: model ?? service.model)
            let found: WriteIsolation =
                DataService.isRowChecked(method: method, url: url, model: model ?? service.model)
                ? .rowChecked : .serializable
            #expect(found == expected, "\(method) \(text)")
        }
        // A run is row-checked only when every change of it is; a `$n` not made yet (no URL) keeps it serializable.
        let patch = BatchRequest(id: "1", method: "PATCH", url: "PreflightChecks(\(id))")
        let read = BatchRequest(id: "2", method: "GET", url: "PreflightChecks(\(id))")
        let later = BatchRequest(id: "3", method: "PATCH", url: "$9")
        let context = DataService.Context(
            user: "alice", role: .groundStaff, forwardedAddress: nil, remoteAddress: nil,
            serviceRoot: "http://127.0.0.1/odata/", version: .v401)
        func isolation(_ requests: [BatchRequest]) -> WriteIsolation {
            service.isolation(of: requests, urls: service.batchURLs(requests, locations: [:], context: context))
        }
        #expect(isolation([patch, patch]) == .rowChecked)
        #expect(isolation([patch, read]) == .serializable)
        #expect(isolation([patch, later]) == .serializable)
    }

    /// Audit entries an instance of an earlier version committed with its changes but never moved are moved,
    /// once, by the next instance that starts on the database.
    @Test func anotherInstanceMovesAKilledInstancesAuditEntriesOnce() async throws {
        let a = try await TestServer(backend: .postgres)
        defer { a.remove() }
        // What an instance of an earlier version left: there, a change's entries waited in the outbox after its
        // commit (now they go into the log in the change's transaction).
        try await a.server.data.store.storage.write { db in
            let entry = AuditOutboxTests.entry("left-by-a-crash")
            try await db.execute(
                #"INSERT INTO "$auditOutbox" (key, at, actor, action, subject, address, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"#,
                "earlier:1", entry.at, entry.actor, entry.action, entry.subject, entry.address, entry.detail)
        }
        for _ in 0..<2 {
            let next = try await Self.second(of: a)
            next.server.close()
        }
        let moved = try await a.server.audit.entries(limit: 1_000).filter { $0.action == "left-by-a-crash" }
        #expect(moved.count == 1)
        let left = try await a.server.data.store.storage.read { db in
            try await db.fetchAll(#"SELECT key FROM "$auditOutbox""#).count
        }
        #expect(left == 0)
    }

    /// Batches on both instances at once, with and without atomicity groups, all touch the one sequence row:
    /// they take their turn at it, every change applies once and no answer is an error.
    @Test func concurrentBatchesOnBothInstancesAllApply() async throws {
        try await Self.twoInstances { _, _, atA, atB, alice in
            try await withThrowingTaskGroup(of: [Int].self) { group in
                for batch in 0..<12 {
                    group.addTask {
                        let client = batch % 2 == 0 ? atA : atB
                        let group = batch % 3 == 0 ? #","atomicityGroup":"g""# : ""
                        let requests = (0..<5).map { n in
                            #"{"id":"\#(n)"\#(group),"method":"POST","url":"PreflightChecks","body":\#(Fixtures.check(Fixtures.id(100 * batch + n)))}"#
                        }.joined(separator: ",")
                        let reply = try await client.odata(
                            .post, "$batch", token: alice, body: #"{"requests":[\#(requests)]}"#)
                        #expect(reply.status == .ok, "\(reply.text)")
                        return (reply.json["responses"] as? [[String: Any]] ?? []).compactMap { $0["status"] as? Int }
                    }
                }
                for try await statuses in group { #expect(statuses == [201, 201, 201, 201, 201], "\(statuses)") }
            }
            #expect(try await atB.odata(.get, "PreflightChecks/$count", token: alice).text == "60")
        }
    }

    /// Writers on PostgreSQL of the same rows are serializable across instances: sixteen batches from both
    /// instances each update the same ten checks, all apply (a batch PostgreSQL refuses for a conflict runs
    /// again), and the batches applied one after another (every check ends with the remark of the same, last batch).
    @Test func concurrentWritersOfTheSameRowsOnBothInstancesAllApplyInSomeOrder() async throws {
        try await Self.twoInstances { a, b, atA, atB, alice in
            let ids = (0..<10).map { Fixtures.id(700 + $0) }
            for id in ids {
                #expect(
                    try await atA.odata(.post, "PreflightChecks", token: alice, body: Fixtures.check(id)).status
                        == .created)
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for batch in 0..<16 {
                    group.addTask {
                        let requests = ids.enumerated().map { n, id in
                            #"{"id":"\#(n)","atomicityGroup":"g","method":"PATCH","url":"PreflightChecks(\#(id))","headers":{"If-Match":"*"},"body":{"Remarks":"batch \#(batch)"}}"#
                        }.joined(separator: ",")
                        let reply = try await (batch % 2 == 0 ? atA : atB).odata(
                            .post, "$batch", token: alice, body: #"{"requests":[\#(requests)]}"#)
                        let statuses = (reply.json["responses"] as? [[String: Any]] ?? []).compactMap {
                            $0["status"] as? Int
                        }
                        #expect(statuses == Array(repeating: 204, count: 10), "\(reply.text)")
                    }
                }
                try await group.waitForAll()
            }
            var remarks: Set<String> = []
            for id in ids {
                let check = try await atB.odata(.get, "PreflightChecks(\(id))", token: alice)
                remarks.insert(check.json["Remarks"] as? String ?? "none")
            }
            #expect(remarks.count == 1, "\(remarks)")
        }
    }

    /// Instances that start together on an empty database migrate it once; none fails.
    @Test func instancesStartingTogetherMigrateOnce() async throws {
        let database = try await SharedPostgres.freshDatabase()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-together-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let keyFile = directory.appendingPathComponent("master.key")
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: keyFile)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for n in 0..<3 {
                group.addTask {
                    var configuration = BatonServerConfiguration()
                    configuration.dataDirectory = directory.appendingPathComponent("data-\(n)")
                    configuration.database = database
                    configuration.databaseConnections = 4
                    configuration.masterKeyFile = keyFile
                    configuration.bcryptCost = 4
                    let server = try await BatonServer(configuration: configuration, logger: Logger(label: "quiet"))
                    server.close()
                }
            }
            try await group.waitForAll()
        }
        let cluster = try await SharedPostgres.shared()
        let applied = try await offThePool {
            try cluster.psql("SELECT string_agg(name, ',') FROM baton_migrations", database: database.database)
        }
        #expect(applied == ServerDatabase.postgresMigrations.map(\.name).joined(separator: ",") + "\n")
    }

    /// Instances start, two at a time, beside one that keeps writing (a rolling restart): each starts and no
    /// write fails. (A start in the benchmark once deadlocked with writers while it locked their tables to check
    /// indexes that existed; this test did not reproduce that deadlock, but showed the starts waiting on the
    /// writers: 4.5 s for what now takes 1.9 s. Starts now lock nothing that exists, and a migration that
    /// loses a deadlock runs again.)
    @Test func instancesStartBesideOneThatWrites() async throws {
        try await Self.twoInstances { a, _, atA, _, alice in
            let stop = Done()
            async let writing: Int = {
                var n = 0
                while !stop.flag.withLock({ $0 }), !Task.isCancelled {
                    n += 1
                    let reply = try await atA.odata(
                        .post, "PreflightChecks", token: alice, body: Fixtures.check(Fixtures.id(50_000 + n)))
                    #expect(reply.status == .created, "\(reply.text)")
                }
                return n
            }()
            for _ in 0..<3 {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for _ in 0..<2 {
                        group.addTask {
                            let started = try await Self.second(of: a)
                            started.remove()
                        }
                    }
                    try await group.waitForAll()
                }
            }
            stop.flag.withLock { $0 = true }
            #expect(try await writing > 0)
        }
    }
}

/// Which statements of a PostgreSQL write run prepared: reads and changes of rows, by their first word in any case
/// after spaces; never `WITH` (it may change rows, whose count a prepared statement does not give), transaction
/// control, settings, locks or schema changes.
@Suite struct PreparedKindTests {
    @Test func readsAndChangesArePreparedAndNothingElse() {
        let expected: [(String, PostgresSQLConnection.PreparedKind?)] = [
            ("SELECT 1", .read), ("  \n\tselect * FROM t", .read), ("WITH x AS (SELECT 1) SELECT * FROM x", nil),
            ("WITH moved AS (UPDATE t SET a = 1 RETURNING a) SELECT count(*) FROM moved", nil),
            ("INSERT INTO t VALUES (?)", .change), ("update t SET a = ?", .change), ("Delete FROM t", .change),
            ("INSERT INTO t VALUES (?) RETURNING id", .change), ("BEGIN ISOLATION LEVEL SERIALIZABLE", nil),
            ("COMMIT", nil), ("SET LOCAL lock_timeout = 0", nil), ("LOCK TABLE t", nil),
            ("CREATE TABLE t (a int)", nil),
            ("SAVEPOINT baton", nil), ("", nil), ("selectx", nil), ("sel\u{301}ect 1", nil), ("(SELECT 1)", nil),
        ]
        for (sql, kind) in expected {
            #expect(PostgresSQLConnection.preparedKind(sql) == kind, "\(sql)")
        }
    }
}

/// Counts, from its creation on, the statements a pool's writer runs whose SQL matches.
final class WriterStatements: Sendable {
    private let count = Mutex(0)

    var seen: Int { count.withLock { $0 } }

    init(_ pool: DatabasePool, matching matches: @escaping @Sendable (String) -> Bool) async throws {
        try await pool.writeWithoutTransaction { db in
            db.trace { [self] event in
                if matches("\(event)") { count.withLock { $0 += 1 } }
            }
        }
    }
}
