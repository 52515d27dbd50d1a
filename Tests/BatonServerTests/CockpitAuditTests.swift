import BatonSQL
import BatonTesting
import Foundation
import Testing

@testable import BatonServer

/// The cockpit's audit view and download, without a browser: how an uploaded change is attributed, how the CSV
/// is escaped, and which filters are refused.
@Suite struct CockpitAuditTests {
    func row(actor: String, action: String, detail: String, subject: String = "PreflightChecks(1)") -> AuditRow {
        AuditRow(
            row: SQLRow(
                columns: ["id", "at", "actor", "action", "subject", "address", "detail"],
                values: [
                    .integer(7), .real(1_795_000_000), .text(actor), .text(action), .text(subject), .null,
                    .text(detail),
                ]))
    }

    @Test func uploadsOnSomeoneElsesBehalfAreMarked() {
        let own = row(actor: "alice", action: "entity-created", detail: "uploaded by alice")
        #expect(own.checkedBy == "alice" && own.uploadedBy == "alice" && !own.onBehalf)
        let behalf = row(actor: "alice", action: "entity-updated", detail: "uploaded by bob")
        #expect(behalf.checkedBy == "alice" && behalf.uploadedBy == "bob" && behalf.onBehalf)
        let other = row(actor: "admin", action: "user-added", detail: "uploaded by bob")
        #expect(other.checkedBy == nil && other.uploadedBy == nil && !other.onBehalf)
    }

    @Test func theCSVQuotesAndDisarmsFormulas() {
        let csv = AuditRow.csv([
            row(actor: "=HYPERLINK(\"http://x\")", action: "sign-in", detail: "a, \"quoted\"\nline", subject: "-2+3")
        ])
        let lines = csv.components(separatedBy: "\r\n")
        #expect(lines[0] == "id,at,actor,action,subject,address,detail,checked_by,uploaded_by,on_behalf,repeats")
        #expect(lines[1].hasPrefix("7,2026-11-18T"))
        #expect(csv.contains(#""'=HYPERLINK(""http://x"")""#))
        #expect(csv.contains(",'-2+3,"))
        #expect(csv.contains(#""a, ""quoted""\#nline""#))
    }

    @Test func badFiltersAreRefusedWithAReason() {
        func problem(_ query: [(String, String)]) -> String? {
            AuditFilter(query.map { (Substring($0.0), Substring($0.1)) }).problem
        }
        #expect(problem([]) == nil)
        #expect(problem([("from", "2026-11-01"), ("to", "2026-11-30"), ("user", "alice")]) == nil)
        #expect(problem([("from", "2026-13-40")])?.contains("must be a date") == true)
        #expect(problem([("to", "2026-02-30")])?.contains("must be a date") == true)
        #expect(problem([("from", "2026-11-30"), ("to", "2026-11-01")]) == "'From' is after 'to'.")
        #expect(problem([("user", String(repeating: "u", count: 129))])?.contains("at most 128") == true)
        // One `Character`, 3,001 scalars: the bound counts what reaches the database and the page.
        let marks = "t" + String(repeating: "\u{301}", count: 3_000)
        #expect(problem([("device", marks)])?.contains("at most 128") == true)
        #expect(problem([("before", "-4")]) == "The page position is not valid.")
        let filter = AuditFilter([("user", "alice"), ("before", "99"), ("to", "2026-11-30")])
        let (sql, arguments) = filter.query(limit: 51)
        #expect(sql.contains("actor = ?") && sql.contains("id < ?") && sql.contains("at < ?"))
        #expect(arguments.last == .integer(51) && arguments.first == .text("alice"))
    }

    /// The device filter reads the subject index, which holds every entry but the entity changes (each of those
    /// took a random page of it, written out at every commit of a batch): the filter finds what it found before,
    /// and an entity change whose subject happens to read like a device is not among it.
    @Test(arguments: StorageBackend.allCases) func theDeviceFilterReadsAnIndexWithoutTheEntityChanges(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let at = Date(timeIntervalSince1970: 1_795_000_000)
        func entry(_ action: String, _ subject: String) -> AuditEntry {
            AuditEntry(at: at, actor: "alice", action: action, subject: subject, address: nil, detail: nil)
        }
        try await server.server.audit.record(contentsOf: [
            entry("device-registered", "tablet-7"), entry("entity-updated", "tablet-7"),
            entry("entity-created", "PreflightChecks(1)"), entry("store-key-fetched", "tablet-7"),
            entry("device-registered", "tablet-8"),
        ])
        let (sql, arguments) = AuditFilter([("device", "tablet-7")]).query(limit: 10)
        let storage = server.server.database.storage
        let actions = try await storage.read { db in try await db.fetchAll(sql, arguments) }.map { $0["action"].text }
        #expect(actions == ["store-key-fetched", "device-registered"])
        guard backend == .sqlite else { return }
        let plan = try await storage.read { db in
            try await db.fetchAll("EXPLAIN QUERY PLAN " + sql, arguments).compactMap { $0["detail"].text }
        }
        #expect(plan.contains { $0.contains("INDEX auditSubjectOfDevices") }, "\(plan)")
        // ANALYZE's first figure for an index is how many entries it holds: the two entity changes are not there.
        let stat = try await storage.write { db in
            try await db.execute("ANALYZE audit", [])
            return try await db.fetchOne("SELECT stat FROM sqlite_stat1 WHERE idx = 'auditSubjectOfDevices'")?[0].text
        }
        let all = try await storage.read { db in try await db.fetchOne("SELECT count(*) FROM audit")?[0].integer }
        #expect(stat?.split(separator: " ").first == "\(try #require(all) - 2)", "\(stat ?? "no statistics")")
    }
}
