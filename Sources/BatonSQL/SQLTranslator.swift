import BatonOData
import Foundation

/// Translates parsed OData queries into parameterised SQL for one dialect.
///
/// Every literal becomes a bound parameter; only identifiers from the model (quoted) and fixed keywords
/// reach the SQL text. Null handling matches `ODataExpression.evaluate(now:resolve:)` (BatonOData): `eq`/`ne`
/// are null-safe, ordering comparisons with null are false, and `and`/`or`/`not` use SQL's three-valued
/// logic, which is OData's.
///
/// ```swift
/// let url = try ODataURL(parsing: "PreflightChecks?$filter=FuelKg gt 5000&$top=10", model: model)
/// let query = try SQLTranslator(model: model, dialect: .sqlite).select(from: "PreflightChecks", options: url.query)
/// ```
public struct SQLTranslator: Sendable {
    /// The model the queries are bound to.
    public var model: ServiceModel
    /// The dialect to write.
    public var dialect: SQLDialect
    /// The value `now()` stands for; inject it to make results reproducible. Defaults to the current time.
    public var now: ODataDateTimeOffset

    /// Creates a translator.
    public init(model: ServiceModel, dialect: SQLDialect, now: ODataDateTimeOffset = ODataDateTimeOffset(Date())) {
        self.model = model
        self.dialect = dialect
        self.now = now
    }

    /// `SELECT` the entities of `entitySet` that the options' `$filter` and `$search` keep, in `$orderby`
    /// order (then by key, so paging is stable), honouring `$top` and `$skip`. Selects `$select`'s
    /// properties plus the key, or every property, then `extraColumns` (system columns, by exact name).
    ///
    /// `after` continues a read in key order after the entity with that key (the last one served): unlike an
    /// offset, the position holds when entities before it are deleted or leave the filter between two pages. It
    /// needs key order, so it is refused with an `$orderby`.
    ///
    /// - Throws: ``BatonSQLError`` for an unknown entity set or a construct the translation does not support.
    public func select(
        from entitySet: String, options: QueryOptions, extraColumns: [String] = [], range: ColumnRange? = nil,
        after key: [PrimitiveValue]? = nil
    ) throws(BatonSQLError) -> SQLQuery {
        let (set, type) = try resolve(entitySet)
        var builder = SQLBuilder(dialect: dialect)
        var position: String?
        if let key {
            guard options.orderBy.isEmpty, range == nil, key.count == type.key.count else {
                throw BatonSQLError(.unsupported, "A key position continues only a read in key order")
            }
            var columns: [String] = []
            var values: [String] = []
            for (name, value) in zip(type.key, key) {
                guard let property = type.property(named: name), !value.isNull else {
                    throw BatonSQLError(.unsupported, "A key position needs a value for every key property")
                }
                columns.append("t0.\(dialect.quote(name))")
                values.append(bind(value, as: property, &builder))
            }
            position =
                columns.count == 1
                ? "\(columns[0]) > \(values[0])"
                : "(\(columns.joined(separator: ", "))) > (\(values.joined(separator: ", ")))"
        }
        var columns = type.properties.map { $0.name }
        if let select = options.select {
            columns = type.properties.map { $0.name }.filter { select.contains($0) || type.key.contains($0) }
        }
        columns += extraColumns
        var sql = "SELECT " + columns.map { "t0.\(dialect.quote($0))" }.joined(separator: ", ")
        sql += " FROM \(dialect.quote(set.name)) AS t0"
        sql += try whereClause(options, set: set, type: type, builder: &builder, range: range, position: position)
        var order: [String] = []
        for item in options.orderBy {
            var term = try value(item.expression, set: set, builder: &builder)
            term += item.descending ? " DESC" : " ASC"
            if dialect == .postgres { term += item.descending ? " NULLS LAST" : " NULLS FIRST" }
            order.append(term)
        }
        // A range is walked in its column's order (delta pages continue from the last value served). Its values
        // are unique — every write takes the next value of the service's sequence, and continuing after a value
        // relies on it — so the key would order nothing more: it only made SQLite sort each page again after reading
        // it in the index's order (a temporary B-tree, a twentieth of a delta page).
        if let range {
            order.append("t0.\(dialect.quote(range.column)) ASC")
        } else {
            for key in type.key { order.append("t0.\(dialect.quote(key)) ASC") }
        }
        sql += " ORDER BY " + order.joined(separator: ", ")
        if let top = options.top {
            sql += " LIMIT " + builder.bind(.integer(Int64(top)), cast: "bigint")
        } else if options.skip != nil, dialect == .sqlite {
            sql += " LIMIT -1"
        }
        if let skip = options.skip { sql += " OFFSET " + builder.bind(.integer(Int64(skip)), cast: "bigint") }
        return SQLQuery(sql: sql, arguments: builder.arguments)
    }

    /// `SELECT count(*)` of the entities the options' `$filter` and `$search` keep (ignoring paging).
    ///
    /// - Throws: ``BatonSQLError`` as `select(from:options:extraColumns:)`.
    public func count(from entitySet: String, options: QueryOptions) throws(BatonSQLError) -> SQLQuery {
        let (set, type) = try resolve(entitySet)
        var builder = SQLBuilder(dialect: dialect)
        var sql = "SELECT count(*) FROM \(dialect.quote(set.name)) AS t0"
        sql += try whereClause(options, set: set, type: type, builder: &builder)
        return SQLQuery(sql: sql, arguments: builder.arguments)
    }

    func resolve(_ name: String) throws(BatonSQLError) -> (EntitySet, EntityType) {
        guard let set = model.entitySet(named: name), let type = model.entityType(of: set) else {
            throw BatonSQLError(.unknownName, "Unknown entity set '\(name)'")
        }
        return (set, type)
    }

    func whereClause(
        _ options: QueryOptions, set: EntitySet, type: EntityType, builder: inout SQLBuilder, range: ColumnRange? = nil,
        position: String? = nil
    ) throws(BatonSQLError) -> String {
        var conditions: [String] = position.map { [$0] } ?? []
        if let range {
            let column = "t0.\(dialect.quote(range.column))"
            if let window = range.snapshots {
                let changed = "t0.\(dialect.quote(window.column))"
                var parts: [String] = []
                if let start = window.from {
                    let from = builder.bind(.text(start), cast: "pg_snapshot")
                    // Every id below the first snapshot's xmin is visible in it: the index on the column narrows
                    // the rows to the window's start.
                    parts += [
                        "\(changed) >= pg_snapshot_xmin(\(from))", "NOT pg_visible_in_snapshot(\(changed), \(from))",
                    ]
                }
                parts += [
                    "pg_visible_in_snapshot(\(changed), \(builder.bind(.text(window.through), cast: "pg_snapshot")))",
                    "\(column) > \(builder.bind(.integer(range.after), cast: "bigint"))",
                ]
                conditions.append("(" + parts.joined(separator: " AND ") + ")")
            } else {
                conditions.append(
                    "(\(column) > \(builder.bind(.integer(range.after), cast: "bigint")) AND \(column) <= \(builder.bind(.integer(range.through), cast: "bigint")))"
                )
            }
            if let provenance = range.provenance {
                let created = "t0.\(dialect.quote(provenance.createdColumn))"
                let origin = "t0.\(dialect.quote(provenance.originColumn))"
                let held =
                    if let snapshot = provenance.snapshot {
                        "pg_visible_in_snapshot(\(created), \(builder.bind(.text(snapshot), cast: "pg_snapshot")))"
                    } else {
                        "\(created) <= \(builder.bind(.integer(provenance.watermark), cast: "bigint"))"
                    }
                conditions.append(
                    "(\(held) OR \(origin) IS NULL OR \(origin) = \(builder.bind(.text(provenance.origin), cast: "text")))"
                )
            }
        }
        if let filter = options.filter { conditions.append(try value(filter, set: set, builder: &builder)) }
        if let search = options.search { conditions.append(searchCondition(search, type: type, builder: &builder)) }
        return conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
    }

    // MARK: $search

    func searchCondition(_ search: SearchExpression, type: EntityType, builder: inout SQLBuilder) -> String {
        switch search {
        case .term(let term):
            let columns = type.properties.filter { $0.type == .string }
            guard !columns.isEmpty else { return falseLiteral }
            let matches = columns.map { column -> String in
                let placeholder = builder.bind(.text(term), cast: "text")
                return dialect == .sqlite
                    ? "instr(lower(t0.\(dialect.quote(column.name))), lower(\(placeholder))) > 0"
                    : "strpos(lower(t0.\(dialect.quote(column.name))), lower(\(placeholder))) > 0"
            }
            return "COALESCE((\(matches.joined(separator: " OR "))), \(falseLiteral))"
        case .not(let inner): return "(NOT \(searchCondition(inner, type: type, builder: &builder)))"
        case .and, .or:
            // One flat list per chain of one operator, as for `$filter`'s `and`/`or`.
            let isAnd = if case .and = search { true } else { false }
            var operands: [SearchExpression] = []
            var node = search
            while true {
                switch node {
                case .and(let lhs, let rhs) where isAnd, .or(let lhs, let rhs) where !isAnd:
                    operands.append(rhs)
                    node = lhs
                    continue
                default: operands.append(node)
                }
                break
            }
            let parts = operands.reversed().map { searchCondition($0, type: type, builder: &builder) }
            return "(" + parts.joined(separator: isAnd ? " AND " : " OR ") + ")"
        }
    }

    var falseLiteral: String { dialect == .sqlite ? "0" : "false" }

    // MARK: Expressions

    /// Whether the SQL value of `expression` can be NULL.
    func canBeNull(_ expression: ODataExpression) -> Bool {
        switch expression {
        case .literal(let value): value.isNull
        case .property(let path): path.isNullable
        case .not(let operand), .negate(let operand): canBeNull(operand)
        case .comparison, .in: false
        case .logical(_, let lhs, let rhs): canBeNull(lhs) || canBeNull(rhs)
        case .arithmetic(let op, let lhs, let rhs):
            canBeNull(lhs) || canBeNull(rhs) || [.div, .divby, .mod].contains(op)
        case .function(let function, let arguments): function != .now && arguments.contains(where: canBeNull)
        }
    }

    /// The most SQL text one expression may translate to (`mod` and null-safe `in` repeat their operands, so
    /// the text can grow faster than the expression). Default: 64 KiB.
    public static let maximumExpressionLength = 64 * 1024
    /// The most bound parameters one query may use (far below SQLite's and PostgreSQL's own limits).
    public static let maximumParameters = 2_000

    /// The SQL for an expression's value. In SQLite, decimal values are compared and computed as `REAL`.
    ///
    /// - Throws: ``BatonSQLError`` (`limitExceeded`) when the SQL would exceed ``maximumExpressionLength`` or
    ///   ``maximumParameters``; checked at every level, so the text never grows past twice the limit.
    func value(_ expression: ODataExpression, set: EntitySet, builder: inout SQLBuilder) throws(BatonSQLError) -> String
    {
        let sql = try unboundedValue(expression, set: set, builder: &builder)
        guard sql.utf8.count <= Self.maximumExpressionLength, builder.arguments.count <= Self.maximumParameters else {
            throw BatonSQLError(
                .limitExceeded,
                "The query is too large to run: its SQL would exceed \(Self.maximumExpressionLength / 1024) KiB or \(Self.maximumParameters) parameters. Use fewer or simpler terms."
            )
        }
        return sql
    }

    func unboundedValue(_ expression: ODataExpression, set: EntitySet, builder: inout SQLBuilder)
        throws(BatonSQLError) -> String
    {
        switch expression {
        case .literal(let literal):
            return literal.isNull ? "NULL" : bindLiteral(literal, builder: &builder)
        case .property(let path):
            let column = try columnSQL(path, set: set, builder: &builder)
            if dialect == .sqlite, path.type == .decimal || path.type == .duration { return "CAST(\(column) AS REAL)" }
            return column
        case .not(let operand):
            return "(NOT \(try value(operand, set: set, builder: &builder)))"
        case .negate(let operand):
            return "(- \(try value(operand, set: set, builder: &builder)))"
        case .comparison(let op, let lhs, let rhs):
            let left = try value(lhs, set: set, builder: &builder)
            let right = try value(rhs, set: set, builder: &builder)
            let nullable = canBeNull(lhs) || canBeNull(rhs)
            switch op {
            case .eq where nullable:
                return dialect == .sqlite ? "(\(left) IS \(right))" : "(\(left) IS NOT DISTINCT FROM \(right))"
            case .ne where nullable:
                return dialect == .sqlite ? "(\(left) IS NOT \(right))" : "(\(left) IS DISTINCT FROM \(right))"
            default:
                let symbol =
                    switch op {
                    case .eq: "="
                    case .ne: "<>"
                    case .gt: ">"
                    case .ge: ">="
                    case .lt: "<"
                    case .le: "<="
                    }
                let comparison = "(\(left) \(symbol) \(right))"
                return nullable ? "COALESCE(\(comparison), \(falseLiteral))" : comparison
            }
        case .logical(let op, _, _):
            // A chain of one operator (`a or b or c`, parsed left-deep) becomes one flat SQL list: no recursion per
            // term here, and no bracket per term for SQLite's parser stack. Both operators are associative in SQL's
            // three-valued logic, which is OData's.
            var operands: [ODataExpression] = []
            var node = expression
            while case .logical(let nodeOp, let lhs, let rhs) = node, nodeOp == op {
                operands.append(rhs)
                node = lhs
            }
            operands.append(node)
            var parts: [String] = []
            for operand in operands.reversed() { parts.append(try value(operand, set: set, builder: &builder)) }
            return "(" + parts.joined(separator: op == .and ? " AND " : " OR ") + ")"
        case .arithmetic(let op, let lhs, let rhs):
            return try arithmetic(op, lhs, rhs, set: set, builder: &builder)
        case .in(let lhs, let elements):
            guard !elements.isEmpty else { return falseLiteral }
            if canBeNull(lhs) || elements.contains(where: canBeNull) {
                // Null-safe: `x in (a, b)` is `x eq a or x eq b`, with OData's null-aware `eq`.
                var terms: [String] = []
                for element in elements {
                    terms.append(try value(.comparison(.eq, lhs, element), set: set, builder: &builder))
                }
                return "(" + terms.joined(separator: " OR ") + ")"
            }
            let left = try value(lhs, set: set, builder: &builder)
            var list: [String] = []
            for element in elements { list.append(try value(element, set: set, builder: &builder)) }
            return "(\(left) IN (\(list.joined(separator: ", "))))"
        case .function(let function, let arguments):
            var sqlArguments: [String] = []
            for argument in arguments { sqlArguments.append(try value(argument, set: set, builder: &builder)) }
            return try call(function, sqlArguments, argumentTypes: arguments.map { $0.type }, builder: &builder)
        }
    }

    func arithmetic(
        _ op: ArithmeticOperator, _ lhs: ODataExpression, _ rhs: ODataExpression, set: EntitySet,
        builder: inout SQLBuilder
    ) throws(BatonSQLError) -> String {
        let left = try value(lhs, set: set, builder: &builder)
        let right = try value(rhs, set: set, builder: &builder)
        let integral = (lhs.type?.isIntegral ?? true) && (rhs.type?.isIntegral ?? true)
        let divisor = dialect == .postgres ? "NULLIF(\(right), 0)" : right
        switch op {
        case .add: return "(\(left) + \(right))"
        case .sub: return "(\(left) - \(right))"
        case .mul: return "(\(left) * \(right))"
        case .div where integral: return "(\(left) / \(divisor))"
        case .div, .divby:
            let real = dialect == .sqlite ? "CAST(\(left) AS REAL)" : "CAST(\(left) AS numeric)"
            return "(\(real) / \(divisor))"
        case .mod where integral: return "(\(left) % \(divisor))"
        case .mod:
            // a - b * trunc(a / b), which keeps the sign of the dividend as OData's mod does.
            let quotient =
                dialect == .sqlite
                ? "CAST(\(left) / \(divisor) AS INTEGER)" : "trunc(\(left) / \(divisor))"
            return "(\(left) - \(right) * \(quotient))"
        }
    }

    func call(
        _ function: FilterFunction, _ a: [String], argumentTypes: [EdmPrimitiveType?], builder: inout SQLBuilder
    ) throws(BatonSQLError) -> String {
        let sqlite = dialect == .sqlite
        let first = argumentTypes.first ?? nil
        switch function {
        case .contains: return sqlite ? "(instr(\(a[0]), \(a[1])) > 0)" : "(strpos(\(a[0]), \(a[1])) > 0)"
        case .startswith:
            return sqlite ? "(substr(\(a[0]), 1, length(\(a[1]))) = \(a[1]))" : "starts_with(\(a[0]), \(a[1]))"
        case .endswith:
            return sqlite
                ? "(CASE WHEN \(a[0]) IS NULL OR \(a[1]) IS NULL THEN NULL WHEN length(\(a[1])) = 0 THEN 1 "
                    + "ELSE substr(\(a[0]), -length(\(a[1]))) = \(a[1]) END)"
                : "(right(\(a[0]), length(\(a[1]))) = \(a[1]))"
        case .indexof: return sqlite ? "(instr(\(a[0]), \(a[1])) - 1)" : "(strpos(\(a[0]), \(a[1])) - 1)"
        case .length: return "length(\(a[0]))"
        case .substring:
            if sqlite {
                let start = "max(\(a[1]), 0) + 1"
                return a.count == 3 ? "substr(\(a[0]), \(start), max(\(a[2]), 0))" : "substr(\(a[0]), \(start))"
            }
            // PostgreSQL's substr takes integer positions: an Edm.Int64 argument is cast (past 2^31 a data error,
            // SQLSTATE 22003, which the server answers 400), never left to match no function at all.
            let start = "CAST((CASE WHEN \(a[1]) IS NULL THEN NULL ELSE greatest(\(a[1]), 0) + 1 END) AS integer)"
            return a.count == 3
                ? "substr(\(a[0]), \(start), CAST((CASE WHEN \(a[2]) IS NULL THEN NULL ELSE greatest(\(a[2]), 0) END) AS integer))"
                : "substr(\(a[0]), \(start))"
        case .concat: return "(\(a[0]) || \(a[1]))"
        case .tolower: return "lower(\(a[0]))"
        case .toupper: return "upper(\(a[0]))"
        case .trim: return sqlite ? "trim(\(a[0]), char(32, 9, 10, 13))" : "btrim(\(a[0]), E' \\t\\n\\r')"
        case .year, .month, .day, .hour, .minute, .second:
            if sqlite {
                // Dates are `YYYY-MM-DD`, date-times `YYYY-MM-DDTHH:MM:SS.f…Z` (UTC), times `HH:MM:SS.f…`.
                let offsets: [FilterFunction: (Int, Int)] =
                    first == .timeOfDay
                    ? [.hour: (1, 2), .minute: (4, 2), .second: (7, 2)]
                    : [.year: (1, 4), .month: (6, 2), .day: (9, 2), .hour: (12, 2), .minute: (15, 2), .second: (18, 2)]
                guard let (start, length) = offsets[function] else {
                    throw BatonSQLError(
                        .unsupported, "\(function.rawValue)() is not defined for \(first?.rawValue ?? "null")")
                }
                return "CAST(substr(\(a[0]), \(start), \(length)) AS INTEGER)"
            }
            let field = function.rawValue.uppercased()
            let source = first == .dateTimeOffset ? "(\(a[0]) AT TIME ZONE 'UTC')" : a[0]
            return "CAST(floor(EXTRACT(\(field) FROM \(source))) AS integer)"
        case .fractionalseconds:
            if sqlite {
                let start = first == .timeOfDay ? 10 : 21
                return "CAST('0.' || substr(\(a[0]), \(start), 12) AS REAL)"
            }
            let source = first == .dateTimeOffset ? "(\(a[0]) AT TIME ZONE 'UTC')" : a[0]
            return "(EXTRACT(SECOND FROM \(source)) - floor(EXTRACT(SECOND FROM \(source))))"
        case .date: return sqlite ? "substr(\(a[0]), 1, 10)" : "CAST((\(a[0]) AT TIME ZONE 'UTC') AS date)"
        case .time: return sqlite ? "substr(\(a[0]), 12, 21)" : "CAST((\(a[0]) AT TIME ZONE 'UTC') AS time)"
        case .now: return bindLiteral(.dateTimeOffset(now), builder: &builder)
        case .round:
            if first?.isIntegral == true { return a[0] }
            return sqlite ? "round(\(a[0]))" : "(sign(\(a[0])) * floor(abs(\(a[0])) + 0.5))"
        case .floor, .ceiling:
            if first?.isIntegral == true { return a[0] }
            if sqlite {
                let truncated = "CAST(\(a[0]) AS INTEGER)"
                return function == .floor
                    ? "(\(truncated) - (\(a[0]) < \(truncated)))" : "(\(truncated) + (\(a[0]) > \(truncated)))"
            }
            return function == .floor ? "floor(\(a[0]))" : "ceil(\(a[0]))"
        }
    }

    func bindLiteral(_ literal: PrimitiveValue, builder: inout SQLBuilder) -> String {
        guard let type = literal.literalType else { return "NULL" }
        if dialect == .sqlite, case .decimal(let number) = literal {
            return builder.bind(.real(NSDecimalNumber(decimal: number).doubleValue), cast: "")
        }
        if dialect == .sqlite, case .duration(let duration) = literal {
            return builder.bind(.real(NSDecimalNumber(decimal: duration.seconds).doubleValue), cast: "")
        }
        return builder.bind(dialect.encode(literal, as: type), cast: dialect.columnType(for: type))
    }

    /// The column of a property path; navigation hops become correlated subqueries over referential
    /// constraints.
    func columnSQL(_ path: PropertyPath, set: EntitySet, builder: inout SQLBuilder) throws(BatonSQLError) -> String {
        var currentSet = set
        var reference: (alias: String, set: EntitySet)? = ("t0", set)
        var hops: [(alias: String, set: EntitySet, join: String)] = []
        for name in path.navigation {
            guard let type = model.entityType(of: currentSet), let navigation = type.navigationProperty(named: name),
                let target = model.targetSet(of: navigation, from: currentSet),
                let targetType = model.entityType(of: target), let previous = reference
            else { throw BatonSQLError(.unknownName, "Cannot resolve navigation '\(name)'") }
            let alias = builder.nextAlias()
            var pairs: [(String, String)] = navigation.referentialConstraints.map {
                ($0.referencedProperty, $0.property)
            }
            if pairs.isEmpty, let partner = navigation.partner.flatMap(targetType.navigationProperty(named:)) {
                pairs = partner.referentialConstraints.map { ($0.property, $0.referencedProperty) }
            }
            guard !pairs.isEmpty else {
                throw BatonSQLError(
                    .unsupported, "Navigation '\(name)' has no referential constraint to join on; add one to the model")
            }
            let join = pairs.map { "\(alias).\(dialect.quote($0.0)) = \(previous.alias).\(dialect.quote($0.1))" }
                .joined(separator: " AND ")
            hops.append((alias, target, join))
            reference = (alias, target)
            currentSet = target
        }
        guard let last = hops.last else { return "t0.\(dialect.quote(path.property))" }
        var sql = "\(last.alias).\(dialect.quote(path.property))"
        // Nest from the innermost hop outwards: each subquery's FROM holds every hop up to it.
        let froms = hops.map { "\(dialect.quote($0.set.name)) AS \($0.alias)" }.joined(separator: ", ")
        let conditions = hops.map { $0.join }.joined(separator: " AND ")
        sql = "(SELECT \(sql) FROM \(froms) WHERE \(conditions))"
        return sql
    }
}
