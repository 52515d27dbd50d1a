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
    /// How updates of entities wait here to go out together (``deferUpdate(_:_:)``); `nil`: they do not.
    var merging: Merging?
    /// Whether a statement of updates sent together failed (its transaction must then go again without them).
    private(set) var sendFailed = false
    /// The updates waiting, in their order: per run of one entity set and shape, the rows, and what writes them.
    private var waiting: [(set: String, rows: [SQLTranslator.RowUpdate])] = []
    private var waitingWith: Merging?

    /// What writes the updates sent together: the service's translator, and the text cache of its updates (a lone
    /// update goes out as it did before merging, prepared, its text from the cache).
    struct Merging {
        let translator: SQLTranslator
        let cache: SQLTextCache
    }

    init(_ base: any SQLConnection) { self.base = base }

    var dialect: SQLDialect { base.dialect }

    @discardableResult
    func execute(_ sql: String, _ arguments: [SQLValue]) async throws -> Int {
        try await sendWaitingUpdates()
        return try await base.execute(sql, arguments)
    }

    func perform(_ sql: String, _ arguments: [SQLValue]) async throws {
        try await sendWaitingUpdates()
        try await base.perform(sql, arguments)
    }

    func fetchAll(_ sql: String, _ arguments: [SQLValue]) async throws -> [SQLRow] {
        try await sendWaitingUpdates()
        return try await base.fetchAll(sql, arguments)
    }

    func forEachRow(
        _ sql: String, _ arguments: [SQLValue], _ body: (any SQLCursor) throws -> Bool
    ) async throws {
        try await sendWaitingUpdates()
        try await base.forEachRow(sql, arguments, body)
    }

    /// Keeps an update of one entity to send with the next ones of its entity set and shape in one statement
    /// (``SQLTranslator/update(_:rows:)``), when ``merging`` (on PostgreSQL, in a `$batch` run's first pass and in an
    /// atomicity group, where each statement is a round trip: a hundred updates, one statement), and says whether
    /// it did. Any other statement of the connection, a savepoint, or ``sendWaitingUpdates()`` sends them first, so
    /// every statement sees the updates before it as if each had gone out at once; one update alone goes out as it
    /// did before merging, prepared. The caller answers the change before its row is written: a statement that then
    /// fails fails the run's first pass, which goes again with a savepoint a change and each update sent by itself
    /// (``DataService/runIndependently(_:reads:locations:failed:context:)``), or the group, which goes again with each
    /// update sent by itself.
    func deferUpdate(_ set: String, _ row: SQLTranslator.RowUpdate) -> Bool {
        guard let merging else { return false }
        waitingWith = merging
        // Set names by their bytes, as the model tells sets apart.
        if let last = waiting.last, last.set.hasSameBytes(as: set), let first = last.rows.first,
            Self.sameShape(first, row)
        {
            waiting[waiting.count - 1].rows.append(row)
        } else {
            waiting.append((set, [row]))
        }
        return true
    }

    /// Sends the updates waiting (``deferUpdate(_:_:)``), a statement per entity set and shape; each must change as
    /// many rows as it names entities.
    func sendWaitingUpdates() async throws {
        guard !waiting.isEmpty, let with = waitingWith else { return }
        let runs = waiting
        waiting = []
        do {
            try await send(runs, with: with)
        } catch {
            sendFailed = true
            throw error
        }
    }

    private func send(_ runs: [(set: String, rows: [SQLTranslator.RowUpdate])], with merging: Merging) async throws {
        let translator = merging.translator
        for (set, rows) in runs {
            if rows.count == 1, let row = rows.first {
                // A repeatable change's answer, written after its update, sends each update alone: as before merging.
                let update = try translator.update(
                    set, key: row.key, values: row.values, systemValues: row.systemValues, cache: merging.cache)
                try await base.perform(update.sql, update.arguments)
                continue
            }
            // PostgreSQL binds at most 65,535 values a statement: a run of more goes in several.
            let perRow = max(1, rows[0].key.count + rows[0].values.count + rows[0].systemValues.count)
            let rowsPerStatement = max(1, min(Self.rowsPerStatement, Self.valuesPerStatement / perRow))
            for start in stride(from: 0, to: rows.count, by: rowsPerStatement) {
                let chunk = Array(rows[start..<min(rows.count, start + rowsPerStatement)])
                let query = try translator.update(set, rows: chunk)
                let changed = try await base.execute(query.sql, query.arguments)
                guard changed == chunk.count else {
                    throw StorageError(
                        .other, "An update of \(chunk.count) entities of \(set) changed \(changed) rows.")
                }
            }
        }
    }

    /// The most entities one statement of ``sendWaitingUpdates()`` updates, and the most values it binds.
    static let rowsPerStatement = 1_000
    static let valuesPerStatement = 30_000

    /// Whether two rows set the same properties and system columns, and name their keys alike.
    static func sameShape(_ left: SQLTranslator.RowUpdate, _ right: SQLTranslator.RowUpdate) -> Bool {
        left.values.count == right.values.count && left.values.keys.allSatisfy { right.values[$0] != nil }
            && left.systemValues.elementsEqual(right.systemValues) { $0.0.hasSameBytes(as: $1.0) }
            && left.key.elementsEqual(right.key) { $0.name.hasSameBytes(as: $1.name) }
    }

    /// A write-back inside a savepoint that rolls back is undone with it: the value is then written again. Updates
    /// waiting from before go out before the savepoint; those kept inside it go out before it is released, and are
    /// dropped when it rolls back.
    func inSavepoint(_ body: () async throws -> Bool) async throws {
        try await sendWaitingUpdates()
        let storedBefore = stored
        var kept = false
        do {
            try await base.inSavepoint {
                kept = try await body()
                if kept { try await sendWaitingUpdates() }
                return kept
            }
        } catch {
            stored = storedBefore
            waiting = []
            throw error
        }
        if !kept {
            stored = storedBefore
            waiting = []
        }
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
        try await sendWaitingUpdates()
        guard base.dialect == .sqlite, let last, last != stored else { return }
        try await base.execute(#"UPDATE "$sequence" SET value = ? WHERE id = 1"#, [.integer(last)])
        stored = last
    }
}
