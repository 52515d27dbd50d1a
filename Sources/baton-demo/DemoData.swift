import BatonOData
import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB

/// The sample aircraft and checks the demo stores.
enum DemoData {
    typealias Entity = [String: PrimitiveValue]

    /// The stored sample rows.
    struct Rows {
        var aircraft: [Entity]
        var checks: [Entity]

        /// The value of a property path for a check, following `Aircraft` to its aircraft.
        func resolve(_ path: PropertyPath, in check: Entity) -> PrimitiveValue {
            guard path.navigation == ["Aircraft"] else { return check[path.property] ?? .null }
            let plane = aircraft.first { $0["TailNumber"] == check["TailNumber"] }
            return plane?[path.property] ?? .null
        }
    }

    /// A check's ID as SQLite stores it.
    static func id(_ check: Entity) -> String {
        if case .guid(let id)? = check["ID"] { return id.uuidString.lowercased() }
        return ""
    }

    static func load(into database: DatabaseQueue, model: ServiceModel) throws -> Rows {
        let aircraft: [Entity] = [
            [
                "TailNumber": .string("D-AIBL"), "Type": .string("A320"), "Station": .string("FRA"),
                "Status": .string("ready"),
            ],
            [
                "TailNumber": .string("D-AINA"), "Type": .string("A320neo"), "Station": .string("MUC"),
                "Status": .string("ready"),
            ],
            [
                "TailNumber": .string("D-ABYA"), "Type": .string("B747-8"), "Station": .string("FRA"),
                "Status": .string("maintenance"),
            ],
        ]
        var checks: [Entity] = []
        let samples: [(String, String, String, String, String?, String)] = [
            ("D-AIBL", "5200.0", "200.5", "58.0", nil, "final"),
            ("D-AIBL", "4800.0", "198.0", "60.5", "Left main tyre worn", "draft"),
            ("D-AINA", "6100.5", "201.0", "59.0", "tyre pressure rechecked", "final"),
            ("D-ABYA", "98000.0", "210.0", "65.0", nil, "final"),
            ("D-ABYA", "5000.0", "190.0", "61.0", "Oil topped up", "draft"),
        ]
        for (index, sample) in samples.enumerated() {
            checks.append([
                "ID": .guid(UUID(uuidString: "00000000-0000-4000-8000-00000000000\(index)") ?? UUID()),
                "TailNumber": .string(sample.0),
                "FuelKg": .decimal(Decimal(string: sample.1) ?? 0),
                "TyrePressureMainPsi": .decimal(Decimal(string: sample.2) ?? 0),
                "TyrePressureNosePsi": .decimal(Decimal(string: sample.3) ?? 0),
                "OilQuarts": .decimal(12),
                "Remarks": sample.4.map(PrimitiveValue.string) ?? .null,
                "Status": .string(sample.5),
                "CheckedBy": .string("alice"),
            ])
        }
        try database.write { db in
            for statement in SQLSchema(model: model, dialect: .sqlite).createStatements() {
                try db.execute(sql: statement)
            }
            let translator = SQLTranslator(model: model, dialect: .sqlite)
            for (setName, entities) in [("Aircraft", aircraft), ("PreflightChecks", checks)] {
                for entity in entities {
                    let insert = try translator.insert(into: setName, values: entity)
                    try db.execute(sql: insert.sql, arguments: insert.statementArguments)
                }
            }
        }
        return Rows(aircraft: aircraft, checks: checks)
    }
}
