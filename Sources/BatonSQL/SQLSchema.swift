import BatonOData

/// DDL for storing a model's entity sets: one table per entity set, one column per primitive property.
public struct SQLSchema: Sendable {
    /// The model to store.
    public var model: ServiceModel
    /// The dialect to write.
    public var dialect: SQLDialect

    /// Extra columns every table gets, as (name, SQL type), e.g. a change sequence for ETags and delta
    /// tracking. Names starting with `$` cannot clash with OData property names. Default: none.
    public var systemColumns: [(name: String, type: String)]

    /// Creates a schema writer.
    public init(model: ServiceModel, dialect: SQLDialect, systemColumns: [(name: String, type: String)] = []) {
        self.model = model
        self.dialect = dialect
        self.systemColumns = systemColumns
    }

    /// `CREATE TABLE IF NOT EXISTS` statements, one per entity set, with primary keys and `NOT NULL`
    /// where the model says so. SQLite tables are `WITHOUT ROWID`: rows are stored in key order, so reading a
    /// page in key order (how OData paging is stable) walks one B-tree instead of looking every row up
    /// through the key index.
    public func createStatements() -> [String] {
        model.entitySets.compactMap { set in
            guard let type = model.entityType(of: set) else { return nil }
            var columns = type.properties.map { property in
                "\(dialect.quote(property.name)) \(dialect.columnType(for: property.type))"
                    + (property.isNullable ? "" : " NOT NULL")
            }
            columns += systemColumns.map { "\(dialect.quote($0.name)) \($0.type)" }
            columns.append("PRIMARY KEY (\(type.key.map(dialect.quote).joined(separator: ", ")))")
            let options = dialect == .sqlite ? " WITHOUT ROWID" : ""
            return
                "CREATE TABLE IF NOT EXISTS \(dialect.quote(set.name)) (\(columns.joined(separator: ", ")))\(options)"
        }
    }
}
