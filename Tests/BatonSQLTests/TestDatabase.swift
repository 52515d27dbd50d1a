import BatonOData
import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB

/// A real SQLite file in its own temporary directory, with the tables of a model.
struct TestDatabase {
    let directory: URL
    let queue: DatabaseQueue
    let model: ServiceModel

    init(model: ServiceModel) throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-sql-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        queue = try DatabaseQueue(path: directory.appendingPathComponent("test.sqlite").path)
        self.model = model
        try queue.write { db in
            for statement in SQLSchema(model: model, dialect: .sqlite).createStatements() {
                try db.execute(sql: statement)
            }
        }
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }

    /// Inserts entities into an entity set's table, every value bound.
    func insert(_ entities: [[String: PrimitiveValue]], into setName: String) throws {
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        try queue.write { db in
            for entity in entities {
                let query = try translator.insert(into: setName, values: entity)
                try db.execute(sql: query.sql, arguments: query.statementArguments)
            }
        }
    }

    /// Runs a query and decodes each row's columns as the entity type's properties.
    func fetch(_ query: SQLQuery, as type: EntityType) throws -> [[String: PrimitiveValue]] {
        try queue.read { db in
            try Row.fetchAll(db, sql: query.sql, arguments: query.statementArguments).map { row in
                var entity: [String: PrimitiveValue] = [:]
                for column in row.columnNames {
                    guard let property = type.property(named: column) else { continue }
                    let value: DatabaseValue = row[column]
                    entity[column] = try SQLDialect.sqlite.decode(SQLValue(value), as: property.type, column: column)
                }
                return entity
            }
        }
    }
}
