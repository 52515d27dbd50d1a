import BatonOData
import Foundation

/// A condition on an integer system column: `after < column <= through` (e.g. a change sequence).
public struct ColumnRange: Sendable, Hashable {
    /// The column, by exact name.
    public var column: String
    /// The exclusive lower bound.
    public var after: Int64
    /// The inclusive upper bound.
    public var through: Int64

    /// On PostgreSQL, the rows whose last change a transaction made that had not committed in one snapshot and
    /// had in another (see ``Snapshots``); `column` then only orders the rows and pages them (`after`).
    public var snapshots: Snapshots?

    /// Narrows the range to rows one client may hold (see ``Provenance``).
    public var provenance: Provenance?

    /// Creates a range condition.
    public init(
        column: String, after: Int64, through: Int64, snapshots: Snapshots? = nil, provenance: Provenance? = nil
    ) {
        self.column = column
        self.after = after
        self.through = through
        self.snapshots = snapshots
        self.provenance = provenance
    }

    /// A window between two PostgreSQL snapshots (`pg_snapshot` text): rows whose transaction id in `column`
    /// (an `xid8`) is not visible in `from` and is visible in `through`. Without `from`, the range's own bounds
    /// start the window (`column` > `after`), and `through` ends it.
    public struct Snapshots: Sendable, Hashable {
        public var column: String
        public var from: String?
        public var through: String

        /// Creates a window.
        public init(column: String, from: String?, through: String) {
            self.column = column
            self.from = from
            self.through = through
        }
    }

    /// Where rows came from: a row qualifies when it was created no later than `watermark` (its integer
    /// `createdColumn`) — on PostgreSQL, when its creating transaction (`createdColumn`, an `xid8`) is visible in
    /// the `snapshot` — or its text `originColumn` is null (unknown) or `origin`.
    public struct Provenance: Sendable, Hashable {
        public var createdColumn: String
        public var watermark: Int64
        public var snapshot: String?
        public var originColumn: String
        public var origin: String

        /// Creates a provenance condition.
        public init(
            createdColumn: String, watermark: Int64, snapshot: String? = nil, originColumn: String, origin: String
        ) {
            self.createdColumn = createdColumn
            self.watermark = watermark
            self.snapshot = snapshot
            self.originColumn = originColumn
            self.origin = origin
        }
    }
}

/// Collects bound arguments and hands out placeholders and table aliases.
struct SQLBuilder {
    let dialect: SQLDialect
    var arguments: [SQLValue] = []
    var aliasCount = 0

    init(dialect: SQLDialect) { self.dialect = dialect }

    mutating func bind(_ value: SQLValue, cast: String) -> String {
        arguments.append(value)
        // Numbered placeholders: a fragment that appears twice in the SQL (e.g. an argument of `endswith`)
        // refers to the same parameter both times.
        switch dialect {
        case .sqlite: return "?\(arguments.count)"
        case .postgres: return cast.isEmpty ? "$\(arguments.count)" : "$\(arguments.count)::\(cast)"
        }
    }

    mutating func nextAlias() -> String {
        aliasCount += 1
        return "n\(aliasCount)"
    }
}
