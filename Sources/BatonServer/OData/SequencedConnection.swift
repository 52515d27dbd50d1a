import BatonOData
import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB

/// The connection of a write of entities (``DataStore/write(_:)``): the first value of the sequence is taken
/// from its row, the next ones are counted on in memory, and the last is written back to the row before the
/// commit. A 100-change batch updated the row 100 times; now twice. Values taken in a savepoint that rolled
/// back are skipped (a gap, as a rolled-back row update never left one), never handed out twice. On PostgreSQL
/// the values come from a block of the sequence object instead (``DataStore/sequenceBlock``), with no row and no
/// write-back.
final class SequencedConnection: SQLConnection {
    let base: any SQLConnection
    /// The last value handed out, and the value the row holds as this transaction sees it.
    private var last: Int64?
    private var stored: Int64?
    /// On PostgreSQL, the last value of the block taken.
    private var blockEnd: Int64 = 0

    init(_ base: any SQLConnection) { self.base = base }

    var dialect: SQLDialect { base.dialect }

    @discardableResult
    func execute(_ sql: String, _ arguments: [SQLValue]) async throws -> Int {
        try await base.execute(sql, arguments)
    }

    func perform(_ sql: String, _ arguments: [SQLValue]) async throws {
        try await base.perform(sql, arguments)
    }

    func fetchAll(_ sql: String, _ arguments: [SQLValue]) async throws -> [SQLRow] {
        try await base.fetchAll(sql, arguments)
    }

    func forEachRow(
        _ sql: String, _ arguments: [SQLValue], _ body: (any SQLCursor) throws -> Bool
    ) async throws {
        try await base.forEachRow(sql, arguments, body)
    }

    /// A write-back inside a savepoint that rolls back is undone with it: the value is then written again.
    func inSavepoint(_ body: () async throws -> Bool) async throws {
        let storedBefore = stored
        var kept = false
        do {
            try await base.inSavepoint {
                kept = try await body()
                return kept
            }
        } catch {
            stored = storedBefore
            throw error
        }
        if !kept { stored = storedBefore }
    }

    /// The next value of the sequence: on SQLite from the row once, then in memory; on PostgreSQL from the block
    /// this transaction took, and a new block when it is spent.
    func next() async throws -> Int64 {
        if let last, base.dialect == .sqlite || last < blockEnd {
            self.last = last + 1
            return last + 1
        }
        let taken = try await DataStore.takeSequence(base)
        (last, stored) = (taken, taken)
        blockEnd = taken + DataStore.sequenceBlock - 1
        return taken
    }

    /// On SQLite, writes the last value handed out to the row, when it is ahead of it (PostgreSQL's sequence
    /// object keeps its own).
    func writeBack() async throws {
        guard base.dialect == .sqlite, let last, last != stored else { return }
        try await base.execute(#"UPDATE "$sequence" SET value = ? WHERE id = 1"#, [.integer(last)])
        stored = last
    }
}
