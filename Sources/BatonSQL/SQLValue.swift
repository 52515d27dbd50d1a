/// A value bound to a SQL statement parameter. Values are always bound, never spliced into SQL text.
public enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)
    case blob([UInt8])
}

/// A parameterised SQL statement: text with placeholders, and the values for them in order.
public struct SQLQuery: Sendable, Hashable, CustomStringConvertible {
    /// The statement text; placeholders are numbered, `?1, ?2, …` (SQLite) or `$1, $2, …` (PostgreSQL), and
    /// a placeholder may appear more than once.
    public var sql: String
    /// The values for the placeholders, in order.
    public var arguments: [SQLValue]

    /// Creates a statement.
    public init(sql: String, arguments: [SQLValue] = []) {
        self.sql = sql
        self.arguments = arguments
    }

    /// The SQL text only: argument values are user data and stay out of descriptions and logs.
    public var description: String { sql }
}
