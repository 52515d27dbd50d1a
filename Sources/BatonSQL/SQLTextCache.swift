import BatonOData
import Synchronization

/// The SQL text of statements kept per shape: a read of one entity by its key (the entity set, the key's properties
/// and the types of their values, `$select`, the extra columns), or an update of one entity by its key (the entity
/// set and the columns it sets). A key read is the commonest request and an update the commonest change, and their
/// text depends on nothing else — the values are bound — so each is translated once per shape rather than once per
/// request.
///
/// The text is the translator's own: the first statement of a shape runs the full translation
/// (``SQLTranslator/select(from:options:extraColumns:range:after:)`` or
/// ``SQLTranslator/update(_:key:values:systemValues:)``) and keeps its SQL only when its arguments are exactly the ones
/// this cache binds; otherwise it keeps nothing and every statement of that shape is translated in full. One cache
/// serves translators of one model (the shape names the dialect); the data service keeps one for reads and one for
/// updates.
public final class SQLTextCache: Sendable {
    private let queries = Mutex<(all: [String: String], chosen: Int)>(([:], 0))

    /// The most shapes a client chose that are kept — a read's `$select`, an update's columns; past it, a new one is
    /// translated every time and not kept. The shapes of reads without a `$select` are the server's own — one per
    /// entity set, key type and extra columns — and are kept whatever clients ask, so no account's `$select` lists can
    /// take their place (as with the prepared statements on PostgreSQL, docs/SECURITY.md).
    public static let capacity = 512

    /// Creates an empty cache.
    public init() {}

    /// How many shapes are kept.
    public var count: Int { queries.withLock { $0.all.count } }

    func sql(for shape: String) -> String? { queries.withLock { $0.all[shape] } }

    func keep(_ sql: String, for shape: String, chosen: Bool) {
        queries.withLock { queries in
            guard queries.all[shape] == nil else { return }
            if chosen {
                guard queries.chosen < Self.capacity else { return }
                queries.chosen += 1
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
    /// A shape with a `select` is a client's choice and counts against ``SQLTextCache/capacity``, unless
    /// `serversOwn` says the server chose it (its own `select` lists, one per entity set): so no account's `$select`
    /// lists can take their place.
    ///
    /// - Throws: ``BatonSQLError`` as ``select(from:options:extraColumns:range:after:)``.
    public func select(
        from entitySet: String, key: [KeyValue], select: [String]? = nil, extraColumns: [String] = [],
        cache: SQLTextCache, serversOwn: Bool = false
    ) throws(BatonSQLError) -> SQLQuery {
        let (_, type) = try resolve(entitySet)
        // The full translation's options, made only when it runs: the key's conditions are four allocations a read.
        func options() -> QueryOptions {
            var options = QueryOptions()
            options.select = select
            options.filter = ODataExpression.conjunction(ODataExpression.keyConditions(key, of: type))
            return options
        }
        // The arguments, bound as the translation binds the conditions' literals — the key's parts that name a
        // property, in their order — and the shape.
        var builder = SQLBuilder(dialect: dialect)
        var shape = shapeStart("select", entitySet)
        for part in key where type.property(named: part.name) != nil {
            guard let literalType = part.value.literalType else {
                // A null key matches with `IS`, not `=`: not a shape this cache keeps.
                return try self.select(from: entitySet, options: options(), extraColumns: extraColumns)
            }
            _ = bindLiteral(part.value, builder: &builder)
            // Appended piece by piece: `+` made a string for each intermediate.
            shape.append("\u{0}")
            shape.append(part.name)
            shape.append("\u{1}")
            shape.append(literalType.rawValue)
        }
        // The translation keeps the model's order of the selected properties and ignores repeats: so does the shape.
        shape.append("\u{0}\u{2}")
        shape.append(select.map { Set($0).sorted().joined(separator: "\u{1}") } ?? "\u{3}")
        shape.append("\u{0}\u{2}")
        for (position, column) in extraColumns.enumerated() {
            if position > 0 { shape.append("\u{1}") }
            shape.append(column)
        }
        if let sql = cache.sql(for: shape) { return SQLQuery(sql: sql, arguments: builder.arguments) }
        let query = try self.select(from: entitySet, options: options(), extraColumns: extraColumns)
        if query.arguments == builder.arguments {
            cache.keep(query.sql, for: shape, chosen: select != nil && !serversOwn)
        }
        return query
    }
}

extension SQLTranslator {
    /// `UPDATE` the entity with `key`, setting the given properties — the same SQL and arguments as
    /// ``update(_:key:values:systemValues:)`` — with its text from `cache` after the first update of its shape (the
    /// entity set, the properties set and the system columns). A shape's properties are a client's choice, so every
    /// update shape counts against ``SQLTextCache/capacity``.
    ///
    /// - Throws: ``BatonSQLError`` as ``update(_:key:values:systemValues:)``.
    public func update(
        _ entitySet: String, key: [KeyValue], values: [String: PrimitiveValue], systemValues: [(String, SQLValue)],
        cache: SQLTextCache
    ) throws(BatonSQLError) -> SQLQuery {
        let (_, type) = try resolve(entitySet)
        // The arguments in the translation's order: the properties set in the model's order, the system columns, then
        // the key's parts in the key's order. Anything the translation would refuse goes to it.
        var arguments: [SQLValue] = []
        arguments.reserveCapacity(values.count + systemValues.count + key.count)
        var shape = shapeStart("update", entitySet)
        shape.append("\u{0}")
        for property in type.properties {
            guard let value = values[property.name] else { continue }
            arguments.append(dialect.encode(value, as: property.type))
            shape.append(property.name)
            shape.append("\u{1}")
        }
        shape.append("\u{0}")
        for (column, value) in systemValues {
            arguments.append(value)
            shape.append(column)
            shape.append("\u{1}")
        }
        let keyProperties = type.keyProperties
        guard arguments.count == values.count + systemValues.count, key.count == keyProperties.count else {
            return try update(entitySet, key: key, values: values, systemValues: systemValues)
        }
        for property in keyProperties {
            guard let part = key.first(where: { $0.name == property.name }) else {
                return try update(entitySet, key: key, values: values, systemValues: systemValues)
            }
            arguments.append(dialect.encode(part.value, as: property.type))
        }
        if let sql = cache.sql(for: shape) { return SQLQuery(sql: sql, arguments: arguments) }
        let query = try update(entitySet, key: key, values: values, systemValues: systemValues)
        if query.arguments == arguments { cache.keep(query.sql, for: shape, chosen: true) }
        return query
    }
}

extension SQLTranslator {
    /// The start of every shape ``SQLTextCache`` keeps: the statement's kind, the dialect and the entity set, so that
    /// no two kinds of statement, nor two dialects, ever share a shape — even in one cache.
    func shapeStart(_ kind: String, _ entitySet: String) -> String {
        // One buffer for the whole shape: most fit in it, so a read's shape is one allocation.
        var shape = ""
        shape.reserveCapacity(128)
        shape.append(kind)
        shape.append(dialect == .sqlite ? "\u{0}sqlite\u{0}" : "\u{0}postgres\u{0}")
        shape.append(entitySet)
        return shape
    }
}
