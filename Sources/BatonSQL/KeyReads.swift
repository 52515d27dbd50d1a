import BatonOData
import Synchronization

/// The SQL text of the reads of one entity by its key, kept per shape: the entity set, the key's properties and the
/// types of their values, `$select`, and the extra columns. A key read is the commonest request, and its text depends
/// on nothing else — the key's values are bound — so it is translated once per shape rather than once per request.
///
/// The text is the translator's own: the first read of a shape runs ``SQLTranslator/select(from:options:extraColumns:range:after:)``
/// and keeps its SQL only when its arguments are exactly the key's values bound as that translation binds them;
/// otherwise it keeps nothing and every read of that shape is translated in full. One cache serves translators of one
/// model (the shape names the dialect).
public final class KeyReadCache: Sendable {
    private let queries = Mutex<(all: [String: String], selecting: Int)>(([:], 0))

    /// The most shapes with a `$select` kept (a client chooses those); past it, a new one is translated every time and
    /// not kept. The shapes without one are the server's own — one per entity set, key type and extra columns — and
    /// are kept whatever clients ask, so no account's `$select` lists can take their place (as with the prepared
    /// statements on PostgreSQL, docs/SECURITY.md).
    public static let capacity = 512

    /// Creates an empty cache.
    public init() {}

    /// How many shapes are kept.
    public var count: Int { queries.withLock { $0.all.count } }

    func sql(for shape: String) -> String? { queries.withLock { $0.all[shape] } }

    func keep(_ sql: String, for shape: String, selecting: Bool) {
        queries.withLock { queries in
            guard queries.all[shape] == nil else { return }
            if selecting {
                guard queries.selecting < Self.capacity else { return }
                queries.selecting += 1
            }
            queries.all[shape] = sql
        }
    }
}

extension SQLTranslator {
    /// The `select` of the entity of `entitySet` whose key is `key` — the same SQL and arguments as
    /// ``select(from:options:extraColumns:range:after:)`` given the key's conditions as `$filter` and `select` as
    /// `$select` — with its text from `cache` after the first read of its shape.
    ///
    /// - Throws: ``BatonSQLError`` as ``select(from:options:extraColumns:range:after:)``.
    public func select(
        from entitySet: String, key: [KeyValue], select: [String]? = nil, extraColumns: [String] = [],
        cache: KeyReadCache
    ) throws(BatonSQLError) -> SQLQuery {
        let (_, type) = try resolve(entitySet)
        let conditions = ODataExpression.keyConditions(key, of: type)
        var options = QueryOptions()
        options.select = select
        options.filter = ODataExpression.conjunction(conditions)
        // The arguments, bound as the translation binds the conditions' literals (in their order); and the shape.
        var builder = SQLBuilder(dialect: dialect)
        var shape = (dialect == .sqlite ? "sqlite\u{0}" : "postgres\u{0}") + entitySet
        for case .comparison(_, .property(let path), .literal(let literal)) in conditions {
            guard let literalType = literal.literalType else {
                // A null key matches with `IS`, not `=`: not a shape this cache keeps.
                return try self.select(from: entitySet, options: options, extraColumns: extraColumns)
            }
            _ = bindLiteral(literal, builder: &builder)
            shape += "\u{0}" + path.property + "\u{1}" + literalType.rawValue
        }
        // The translation keeps the model's order of the selected properties and ignores repeats: so does the shape.
        shape += "\u{0}\u{2}" + (select.map { Set($0).sorted().joined(separator: "\u{1}") } ?? "\u{3}")
        shape += "\u{0}\u{2}" + extraColumns.joined(separator: "\u{1}")
        if let sql = cache.sql(for: shape) { return SQLQuery(sql: sql, arguments: builder.arguments) }
        let query = try self.select(from: entitySet, options: options, extraColumns: extraColumns)
        if query.arguments == builder.arguments { cache.keep(query.sql, for: shape, selecting: select != nil) }
        return query
    }
}
