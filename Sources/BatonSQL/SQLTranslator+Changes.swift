import BatonOData

extension SQLTranslator {
    /// `INSERT` one entity: every property of the entity type gets a column value (absent values are NULL),
    /// and each system column its value.
    ///
    /// - Throws: ``BatonSQLError`` for an unknown entity set, or a value name the type does not have.
    public func insert(
        into entitySet: String, values: [String: PrimitiveValue], systemValues: [(String, SQLValue)] = []
    ) throws(BatonSQLError) -> SQLQuery {
        let (set, type) = try resolve(entitySet)
        var builder = SQLBuilder(dialect: dialect)
        let columns = (type.properties.map { $0.name } + systemValues.map { $0.0 }).map(dialect.quote).joined(
            separator: ", ")
        let arguments = try insertArguments(into: entitySet, values: values, systemValues: systemValues.map(\.1))
        let casts = type.properties.map { dialect.columnType(for: $0.type) } + systemValues.map { _ in "" }
        let placeholders = zip(arguments, casts).map { builder.bind($0, cast: $1) }
        return SQLQuery(
            sql: "INSERT INTO \(dialect.quote(set.name)) (\(columns)) VALUES (\(placeholders.joined(separator: ", ")))",
            arguments: builder.arguments)
    }

    /// The arguments of ``insert(into:values:systemValues:)`` alone, in its placeholder order. Its statement
    /// text is the same for every entity of a set, so bulk inserts prepare it once and bind these per row.
    ///
    /// - Throws: ``BatonSQLError`` for an unknown entity set, or a value name the type does not have.
    public func insertArguments(into entitySet: String, values: [String: PrimitiveValue], systemValues: [SQLValue])
        throws(BatonSQLError) -> [SQLValue]
    {
        let (_, type) = try resolve(entitySet)
        try checkNames(values.keys, in: type)
        return type.properties.map { dialect.encode(values[$0.name] ?? .null, as: $0.type) } + systemValues
    }

    /// `UPDATE` the entity with `key`, setting the given properties.
    ///
    /// - Throws: ``BatonSQLError`` for an unknown entity set or property, an incomplete key, or no values.
    public func update(
        _ entitySet: String, key: [KeyValue], values: [String: PrimitiveValue], systemValues: [(String, SQLValue)] = []
    ) throws(BatonSQLError) -> SQLQuery {
        let (set, type) = try resolve(entitySet)
        try checkNames(values.keys, in: type)
        guard !values.isEmpty || !systemValues.isEmpty else {
            throw BatonSQLError(.unsupported, "An update needs at least one property value")
        }
        var builder = SQLBuilder(dialect: dialect)
        let assignments =
            type.properties.filter { values[$0.name] != nil }.map { property in
                "\(dialect.quote(property.name)) = " + bind(values[property.name] ?? .null, as: property, &builder)
            } + systemValues.map { "\(dialect.quote($0.0)) = " + builder.bind($0.1, cast: "") }
        let condition = try keyCondition(key, type: type, builder: &builder)
        return SQLQuery(
            sql: "UPDATE \(dialect.quote(set.name)) SET \(assignments.joined(separator: ", ")) WHERE \(condition)",
            arguments: builder.arguments)
    }

    /// One change of an entity in ``update(_:rows:)``: its key, the properties it sets, and the system columns.
    public struct RowUpdate: Sendable {
        /// The entity's key.
        public var key: [KeyValue]
        /// The properties set, by name.
        public var values: [String: PrimitiveValue]
        /// The system columns set (the sequence), in order.
        public var systemValues: [(String, SQLValue)]

        public init(key: [KeyValue], values: [String: PrimitiveValue], systemValues: [(String, SQLValue)]) {
            self.key = key
            self.values = values
            self.systemValues = systemValues
        }
    }

    /// One `UPDATE` of several entities of `entitySet` on PostgreSQL, each setting the same properties and system
    /// columns to values of its own — `UPDATE "Set" AS t SET "P" = v."P", … FROM (VALUES ($1::uuid, $2::text, …), …)
    /// AS v("ID", "P", …) WHERE t."ID" = v."ID"` — where ``update(_:key:values:systemValues:)`` made a statement
    /// each. Its count of changed rows is the number of entities found (an entity named twice is changed once).
    ///
    /// - Throws: ``BatonSQLError`` as ``update(_:key:values:systemValues:)``; `.unsupported` on SQLite, for no rows,
    ///   for rows that set different properties or system columns or a key property, or for a system value that is
    ///   not an integer.
    public func update(_ entitySet: String, rows: [RowUpdate]) throws(BatonSQLError) -> SQLQuery {
        guard dialect == .postgres, let first = rows.first else {
            throw BatonSQLError(.unsupported, "Updates of many entities in one statement are for PostgreSQL")
        }
        let (set, type) = try resolve(entitySet)
        let properties = type.properties.filter { first.values[$0.name] != nil }
        let systemColumns = first.systemValues.map(\.0)
        let keyProperties = type.keyProperties
        guard !properties.contains(where: { type.key.contains($0.name) }) else {
            throw BatonSQLError(.unsupported, "An update of many entities matches them by key and cannot change it")
        }
        guard !properties.isEmpty || !systemColumns.isEmpty else {
            throw BatonSQLError(.unsupported, "An update needs at least one property value")
        }
        var builder = SQLBuilder(dialect: dialect)
        var tuples: [String] = []
        tuples.reserveCapacity(rows.count)
        for row in rows {
            try checkNames(row.values.keys, in: type)
            guard row.values.count == properties.count, row.systemValues.map(\.0) == systemColumns,
                row.key.count == keyProperties.count
            else {
                throw BatonSQLError(.unsupported, "The rows of one update set the same properties and system columns")
            }
            var items: [String] = []
            items.reserveCapacity(keyProperties.count + properties.count + systemColumns.count)
            for property in keyProperties {
                guard let part = row.key.first(where: { $0.name == property.name }) else {
                    throw BatonSQLError(
                        .unknownName, "A key of '\(type.name)' names exactly (\(type.key.joined(separator: ", ")))")
                }
                items.append(bind(part.value, as: property, &builder))
            }
            for property in properties {
                guard let value = row.values[property.name] else {
                    throw BatonSQLError(
                        .unsupported, "The rows of one update set the same properties and system columns")
                }
                items.append(bind(value, as: property, &builder))
            }
            for (_, value) in row.systemValues {
                guard case .integer = value else {
                    throw BatonSQLError(.unsupported, "A system column of a many-entity update takes an integer")
                }
                items.append(builder.bind(value, cast: "bigint"))
            }
            tuples.append("(" + items.joined(separator: ", ") + ")")
        }
        let assigned = properties.map(\.name) + systemColumns
        let names = keyProperties.map(\.name) + assigned
        let assignments = assigned.map { "\(dialect.quote($0)) = v.\(dialect.quote($0))" }
        let condition = keyProperties.map { "t.\(dialect.quote($0.name)) = v.\(dialect.quote($0.name))" }
        return SQLQuery(
            sql: "UPDATE \(dialect.quote(set.name)) AS t SET \(assignments.joined(separator: ", ")) FROM (VALUES "
                + tuples.joined(separator: ", ") + ") AS v(\(names.map(dialect.quote).joined(separator: ", "))) WHERE "
                + condition.joined(separator: " AND "),
            arguments: builder.arguments)
    }

    /// `DELETE` the entity with `key`.
    ///
    /// - Throws: ``BatonSQLError`` for an unknown entity set or an incomplete key.
    public func delete(from entitySet: String, key: [KeyValue]) throws(BatonSQLError) -> SQLQuery {
        let (set, type) = try resolve(entitySet)
        var builder = SQLBuilder(dialect: dialect)
        let condition = try keyCondition(key, type: type, builder: &builder)
        return SQLQuery(sql: "DELETE FROM \(dialect.quote(set.name)) WHERE \(condition)", arguments: builder.arguments)
    }

    /// `value` bound as a value of `property`'s column: encoded for it, and cast to its type on PostgreSQL.
    func bind(_ value: PrimitiveValue, as property: Property, _ builder: inout SQLBuilder) -> String {
        builder.bind(dialect.encode(value, as: property.type), cast: dialect.columnType(for: property.type))
    }

    func checkNames(_ names: some Sequence<String>, in type: EntityType) throws(BatonSQLError) {
        for name in names where type.property(named: name) == nil {
            throw BatonSQLError(.unknownName, "'\(type.name)' has no property '\(name)'")
        }
    }

    func keyCondition(_ key: [KeyValue], type: EntityType, builder: inout SQLBuilder) throws(BatonSQLError) -> String {
        guard Set(key.map({ $0.name })) == Set(type.key), key.count == type.key.count else {
            throw BatonSQLError(
                .unknownName, "A key of '\(type.name)' names exactly (\(type.key.joined(separator: ", ")))")
        }
        return type.keyProperties.compactMap { property in
            key.first { $0.name == property.name }.map { part in
                "\(dialect.quote(property.name)) = " + bind(part.value, as: property, &builder)
            }
        }.joined(separator: " AND ")
    }
}
