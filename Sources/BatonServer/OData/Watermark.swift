import BatonSQL
import Foundation

/// Where a reader of changes stands: what a delta link, and the skip token of a tracked read, carries.
///
/// - On SQLite, a value of the service-wide sequence: SQLite has one writer, so the sequence is taken in commit
///   order and "every change up to `n`" is exact.
/// - On PostgreSQL, a snapshot (`pg_current_snapshot()` of the read): which transactions had committed. Writers
///   take sequence values without waiting for one another (a sequence object, not a turn), so a value no longer
///   tells the commit order; the next delta returns the rows whose last change is not visible in the token's
///   snapshot (`pg_visible_in_snapshot`) and is visible in its own, so a transaction that commits late is still
///   seen, once.
enum Watermark: Hashable, Sendable {
    case sequence(Int64)
    case snapshot(Snapshot)

    /// A PostgreSQL snapshot: every transaction id below `xmin` had finished, none from `xmax` on had, and of
    /// those between, `inProgress` had not.
    struct Snapshot: Hashable, Sendable {
        var xmin: UInt64
        var xmax: UInt64
        var inProgress: [UInt64]

        /// The snapshot as PostgreSQL writes it (`pg_snapshot`'s text): `xmin:xmax:xip,xip`.
        var text: String { "\(xmin):\(xmax):" + inProgress.map(String.init).joined(separator: ",") }

        /// Reads PostgreSQL's text of a snapshot; `nil` for anything else.
        init?(text: String) {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count == 3 else { return nil }
            self.init(
                parts[0], parts[1],
                parts[2].isEmpty ? [] : parts[2].split(separator: ",", omittingEmptySubsequences: false))
        }

        init?(_ xmin: Substring, _ xmax: Substring, _ inProgress: [Substring]) {
            guard let low = Self.number(xmin), let high = Self.number(xmax), low <= high, inProgress.count <= 1_000
            else { return nil }
            var ids: [UInt64] = []
            // At most a thousand transactions in progress (PostgreSQL's list is bounded by its connections).
            for text in inProgress {
                // Sorted, distinct, within [xmin, xmax): as PostgreSQL itself checks a snapshot's text.
                guard let id = Self.number(text), (low..<high).contains(id), ids.last.map({ $0 < id }) ?? true else {
                    return nil
                }
                ids.append(id)
            }
            (self.xmin, self.xmax, self.inProgress) = (low, high, ids)
        }

        /// A transaction id or sequence value: ASCII digits only, at most 19, within a bigint.
        static func number(_ text: Substring) -> UInt64? {
            guard !text.isEmpty, text.utf8.count <= 19, text.utf8.allSatisfy({ (0x30...0x39).contains($0) }) else {
                return nil
            }
            return UInt64(text).flatMap { $0 <= UInt64(Int64.max) ? $0 : nil }
        }
    }

    /// The watermark in a token: the sequence value in decimal, or `x` and the snapshot with `-` and `_` for
    /// PostgreSQL's `:` and `,` (characters a URL and the tokens' own separators leave alone).
    var token: String {
        switch self {
        case .sequence(let value): String(value)
        case .snapshot(let snapshot):
            "x\(snapshot.xmin)-\(snapshot.xmax)"
                + (snapshot.inProgress.isEmpty ? "" : "-" + snapshot.inProgress.map(String.init).joined(separator: "_"))
        }
    }

    /// Reads a token's watermark; `nil` when it is not one this server writes.
    init?(token: Substring) {
        // By byte: a combining mark after the `x` makes no snapshot (a Character would hide it).
        if token.utf8.first == UInt8(ascii: "x") {
            let parts = Substring(token.utf8.dropFirst()).split(separator: "-", omittingEmptySubsequences: false)
            guard parts.count == 2 || parts.count == 3,
                let snapshot = Snapshot(
                    parts[0], parts[1],
                    parts.count == 3 ? parts[2].split(separator: "_", omittingEmptySubsequences: false) : [])
            else { return nil }
            self = .snapshot(snapshot)
        } else {
            guard let value = Snapshot.number(token) else { return nil }
            self = .sequence(Int64(value))
        }
    }

    /// Where the reader of `db` stands now: on SQLite the sequence's value, on PostgreSQL the snapshot of the
    /// read's transaction.
    static func current(_ db: any SQLConnection) async throws -> Watermark {
        switch db.dialect {
        case .sqlite: return .sequence(try await DataStore.sequenceState(db).value)
        case .postgres:
            guard let text = try await db.fetchOne("SELECT pg_current_snapshot()::text")?[0].text,
                let snapshot = Snapshot(text: text)
            else { throw StorageError(.other, "PostgreSQL answered no snapshot.") }
            return .snapshot(snapshot)
        }
    }

    /// ``current(_:)`` and ``DataStore/horizons(_:)`` together: on SQLite both are the one `$sequence` row, read
    /// once (a delta page read it twice).
    static func currentWithHorizons(_ db: any SQLConnection) async throws
        -> (now: Watermark, horizons: (sequence: Int64, transaction: Int64))
    {
        guard db.dialect == .sqlite else { return (try await current(db), try await DataStore.horizons(db)) }
        let state = try await DataStore.sequenceState(db)
        return (.sequence(state.value), (state.horizon, 0))
    }

    /// The window of changes after `self` up to `through`, for the SQL translator.
    func window(through: Watermark, after: Int64?) throws -> ColumnRange {
        switch (self, through) {
        case (.sequence(let from), .sequence(let through)):
            return ColumnRange(
                column: DataStore.sequenceColumn, after: max(from, after ?? from), through: through)
        case (.snapshot(let from), .snapshot(let through)):
            return ColumnRange(
                column: DataStore.sequenceColumn, after: after ?? .min, through: .max,
                snapshots: .init(column: DataStore.changeColumn, from: from.text, through: through.text))
        case (.sequence(let from), .snapshot(let through)):
            // A token from before PostgreSQL's writers took blocks (an instance that took turns, or the SQLite
            // server the data was copied from): values up to then were taken in commit order, and every block
            // since starts above them, so "after the value" is exact up to the new snapshot.
            return ColumnRange(
                column: DataStore.sequenceColumn, after: max(from, after ?? from), through: .max,
                snapshots: .init(column: DataStore.changeColumn, from: nil, through: through.text))
        default:
            throw ServerError.badRequest("The $deltatoken is not one this server issued.", target: "$deltatoken")
        }
    }
}
