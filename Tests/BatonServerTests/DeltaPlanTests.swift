import BatonOData
import BatonSQL
import BatonTestSupport
import Foundation
import GRDB
import Testing

@testable import BatonServer

/// A delta page's `select` is read in the order of the entity set's changes index, as SQLite plans it on the
/// server's own schema: ordered by the sequence alone (unique: every write takes the next value), so no page is
/// sorted again after it is read, and with every change of the range once.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DeltaPlanTests {
    @Test func aDeltaPageIsReadInTheChangesIndexsOrderWithoutASort() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        let data = server.server.data
        var options = QueryOptions()
        options.top = 101
        let query = try data.translator.select(
            from: "PreflightChecks", options: options, extraColumns: [DataStore.sequenceColumn],
            range: ColumnRange(column: DataStore.sequenceColumn, after: 0, through: 1_000))
        #expect(query.sql.hasSuffix(#"ORDER BY t0."$seq" ASC LIMIT ?3"#), "\(query.sql)")
        let pool = try #require(data.store.pool)
        let plan = try await pool.read { db in
            try Row.fetchAll(
                db, sql: "EXPLAIN QUERY PLAN " + query.sql,
                arguments: StatementArguments(
                    query.arguments.map { value -> (any DatabaseValueConvertible)? in
                        if case .integer(let number) = value { return number }
                        return nil
                    })
            ).map { $0["detail"] as String }
        }
        #expect(
            plan.contains {
                // SQLite quotes the index's name or not, by version.
                $0.contains("USING INDEX") && $0.contains("PreflightChecks$changes")
            }, "\(plan)")
        #expect(!plan.contains { $0.contains("TEMP B-TREE") }, "\(plan)")
        // A page without a range: read in key order.
        let page = try data.translator.select(from: "PreflightChecks", options: options)
        #expect(page.sql.hasSuffix(#"ORDER BY t0."ID" ASC LIMIT ?1"#), "\(page.sql)")
    }
}
