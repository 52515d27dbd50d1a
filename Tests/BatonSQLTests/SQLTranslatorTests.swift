import BatonOData
import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB
import Testing

@Suite struct SQLTranslatorTests {
    let model: ServiceModel

    init() throws { model = try ServiceModel.aircraftChecks }

    func sql(_ url: String, _ dialect: SQLDialect = .sqlite) throws -> SQLQuery {
        let parsed = try ODataURL(parsing: url, model: model)
        return try SQLTranslator(model: model, dialect: dialect).select(
            from: parsed.target?.entitySet.name ?? "", options: parsed.query)
    }

    @Test func valuesAreBoundNeverSpliced() throws {
        let hostile = "x'); DROP TABLE \"PreflightChecks\"; --"
        let encoded =
            hostile.replacingOccurrences(of: "'", with: "''").addingPercentEncoding(
                withAllowedCharacters: .alphanumerics) ?? ""
        for dialect in [SQLDialect.sqlite, .postgres] {
            let query = try sql(
                "PreflightChecks?$filter=Remarks eq '\(encoded)' or contains(Status,'\(encoded)')", dialect)
            #expect(!query.sql.contains("DROP"))
            #expect(query.arguments.filter { $0 == .text(hostile) }.count == 2)
        }
    }

    @Test func sqliteStatementShape() throws {
        let query = try sql(
            "PreflightChecks?$filter=FuelKg gt 5000 and Remarks eq null&$orderby=FuelKg desc&$top=5&$skip=10&$select=FuelKg"
        )
        #expect(
            query.sql == """
                SELECT t0."ID", t0."FuelKg" FROM "PreflightChecks" AS t0 WHERE ((CAST(t0."FuelKg" AS REAL) > ?1) AND \
                (t0."Remarks" IS NULL)) ORDER BY CAST(t0."FuelKg" AS REAL) DESC, t0."ID" ASC LIMIT ?2 OFFSET ?3
                """)
        #expect(query.arguments == [.integer(5000), .integer(5), .integer(10)])
    }

    @Test func postgresStatementShape() throws {
        let query = try sql(
            "PreflightChecks?$filter=Remarks ne 'x' and year(ChangedAt) eq 2026&$orderby=Remarks&$skip=3", .postgres)
        #expect(
            query.sql == """
                SELECT t0."ID", t0."TailNumber", t0."FlightNumber", t0."FuelKg", t0."TyrePressureMainPsi", \
                t0."TyrePressureNosePsi", t0."OilQuarts", t0."Remarks", t0."Status", t0."CheckedBy", t0."UploadedBy", \
                t0."ChangedAt" FROM "PreflightChecks" AS t0 WHERE ((t0."Remarks" IS DISTINCT FROM $1::text) AND \
                (CAST(floor(EXTRACT(YEAR FROM (t0."ChangedAt" AT TIME ZONE 'UTC'))) AS integer) IS NOT DISTINCT FROM $2::integer)) \
                ORDER BY t0."Remarks" ASC NULLS FIRST, t0."ID" ASC OFFSET $3::bigint
                """)
    }

    @Test func navigationBecomesACorrelatedSubquery() throws {
        let query = try sql("PreflightChecks?$filter=Aircraft/Station eq 'FRA'")
        #expect(
            query.sql.contains(
                #"((SELECT n1."Station" FROM "Aircraft" AS n1 WHERE n1."TailNumber" = t0."TailNumber") = ?1)"#))
    }

    @Test func countIgnoresPaging() throws {
        let parsed = try ODataURL(parsing: "PreflightChecks?$filter=FuelKg gt 1&$top=1", model: model)
        let query = try SQLTranslator(model: model, dialect: .sqlite).count(
            from: "PreflightChecks", options: parsed.query)
        #expect(query.sql == #"SELECT count(*) FROM "PreflightChecks" AS t0 WHERE (CAST(t0."FuelKg" AS REAL) > ?1)"#)
    }

    @Test func unknownEntitySetIsAnError() {
        #expect {
            try SQLTranslator(model: model, dialect: .sqlite).select(from: "Nope", options: QueryOptions())
        } throws: { ($0 as? BatonSQLError)?.message == "Unknown entity set 'Nope'" }
    }

    @Test func descriptionsNeverShowBoundValues() throws {
        let query = try sql("PreflightChecks?$filter=Remarks eq 'secret-remark'")
        #expect(!"\(query)".contains("secret-remark"))
    }

    @Test func schemaRunsOnSQLiteAndValuesRoundTrip() throws {
        let database = try TestDatabase(model: model)
        defer { database.remove() }
        let type = try #require(model.entityType(named: "PreflightCheck"))
        let check: [String: PrimitiveValue] = [
            "ID": .guid(UUID()), "TailNumber": .string("D-AIBL"), "FlightNumber": .null,
            "FuelKg": .decimal(Decimal(string: "12345678.9") ?? 0),
            "TyrePressureMainPsi": .decimal(Decimal(string: "200.5") ?? 0),
            "TyrePressureNosePsi": .decimal(58), "OilQuarts": .decimal(Decimal(string: "12.25") ?? 0),
            "Remarks": .string("Ölstand geprüft — ok"), "Status": .string("final"), "CheckedBy": .string("alice"),
            "UploadedBy": .null,
            "ChangedAt": .dateTimeOffset(try #require(ODataDateTimeOffset(parsing: "2026-11-21T08:30:00.125+01:00"))),
        ]
        try database.insert([check], into: "PreflightChecks")
        let rows = try database.fetch(try sql("PreflightChecks"), as: type)
        #expect(rows == [check])
    }

    @Test func insertUpdateAndDeleteChangeExactlyTheKeyedRow() throws {
        let database = try TestDatabase(model: model)
        defer { database.remove() }
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let type = try #require(model.entityType(named: "Aircraft"))
        try database.insert(
            [
                [
                    "TailNumber": .string("D-AIBL"), "Type": .string("A320"), "Station": .string("FRA"),
                    "Status": .string("ready"),
                ],
                [
                    "TailNumber": .string("D-AINA"), "Type": .string("A320neo"), "Station": .string("MUC"),
                    "Status": .string("ready"),
                ],
            ], into: "Aircraft")
        let key = [KeyValue(name: "TailNumber", value: .string("D-AIBL"))]
        let update = try translator.update("Aircraft", key: key, values: ["Status": .string("maintenance")])
        #expect(update.sql == #"UPDATE "Aircraft" SET "Status" = ?1 WHERE "TailNumber" = ?2"#)
        try database.queue.write { try $0.execute(sql: update.sql, arguments: update.statementArguments) }
        var rows = try database.fetch(try sql("Aircraft"), as: type)
        #expect(rows.map { $0["Status"] } == [.string("maintenance"), .string("ready")])
        let delete = try translator.delete(from: "Aircraft", key: key)
        try database.queue.write { try $0.execute(sql: delete.sql, arguments: delete.statementArguments) }
        rows = try database.fetch(try sql("Aircraft"), as: type)
        #expect(rows.map { $0["TailNumber"] } == [.string("D-AINA")])
    }

    /// Several entities' updates of one shape in one PostgreSQL statement: each row's key and values bound with their
    /// columns' types, matched on the key; refused on SQLite, for no rows, and for rows of different shapes.
    @Test func updatesOfOneShapeGoInOneStatementOnPostgres() throws {
        let translator = SQLTranslator(model: model, dialect: .postgres)
        func row(_ tail: String, _ status: String, sequence: Int64) -> SQLTranslator.RowUpdate {
            SQLTranslator.RowUpdate(
                key: [KeyValue(name: "TailNumber", value: .string(tail))], values: ["Status": .string(status)],
                systemValues: [("$seq", .integer(sequence))])
        }
        let update = try translator.update(
            "Aircraft", rows: [row("D-AIBL", "maintenance", sequence: 7), row("D-AINA", "ready", sequence: 8)])
        #expect(
            update.sql
                == #"UPDATE "Aircraft" AS t SET "Status" = v."Status", "$seq" = v."$seq" FROM (VALUES ($1::text, $2::text, $3::bigint), ($4::text, $5::text, $6::bigint)) AS v("TailNumber", "Status", "$seq") WHERE t."TailNumber" = v."TailNumber""#
        )
        #expect(
            update.arguments == [
                .text("D-AIBL"), .text("maintenance"), .integer(7), .text("D-AINA"), .text("ready"), .integer(8),
            ])
        let sqlite = SQLTranslator(model: model, dialect: .sqlite)
        #expect(throws: BatonSQLError.self) { try sqlite.update("Aircraft", rows: [row("D-AIBL", "x", sequence: 1)]) }
        #expect(throws: BatonSQLError.self) { try translator.update("Aircraft", rows: []) }
        var other = row("D-AINA", "ready", sequence: 9)
        other.values["Station"] = .string("MUC")
        #expect(throws: BatonSQLError.self) {
            try translator.update("Aircraft", rows: [row("D-AIBL", "x", sequence: 1), other])
        }
        var rekeyed = row("D-AINA", "ready", sequence: 9)
        rekeyed.values["TailNumber"] = .string("D-AINB")
        #expect(throws: BatonSQLError.self) { try translator.update("Aircraft", rows: [rekeyed]) }
        var text = row("D-AINA", "ready", sequence: 9)
        text.systemValues = [("$seq", .text("9"))]
        #expect(throws: BatonSQLError.self) { try translator.update("Aircraft", rows: [text]) }
    }

    @Test func aKeyPositionContinuesAfterTheLastKeyServed() throws {
        let database = try TestDatabase(model: model)
        defer { database.remove() }
        let type = try #require(model.entityType(named: "Aircraft"))
        try database.insert(
            ["D-AIBL", "D-AINA", "D-AINB", "D-AINC"].map { tail in
                [
                    "TailNumber": .string(tail), "Type": .string("A320"), "Station": .string("FRA"),
                    "Status": .string(tail == "D-AINB" ? "maintenance" : "ready"),
                ]
            }, into: "Aircraft")
        let parsed = try ODataURL(parsing: "Aircraft?$filter=Status eq 'ready'&$top=5", model: model)
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let query = try translator.select(from: "Aircraft", options: parsed.query, after: [.string("D-AIBL")])
        #expect(query.sql.contains(#"WHERE t0."TailNumber" > ?1 AND (t0."Status" = ?2)"#))
        #expect(try database.fetch(query, as: type).map { $0["TailNumber"] } == [.string("D-AINA"), .string("D-AINC")])
        let postgres = try SQLTranslator(model: model, dialect: .postgres).select(
            from: "PreflightChecks", options: QueryOptions(), after: [.guid(UUID())])
        #expect(postgres.sql.contains(#"WHERE t0."ID" > $1::uuid ORDER BY t0."ID" ASC"#))
        // A position needs key order and a whole key.
        let ordered = try ODataURL(parsing: "Aircraft?$orderby=Type", model: model)
        for (options, key) in [
            (ordered.query, [PrimitiveValue.string("D-AIBL")]), (QueryOptions(), []), (QueryOptions(), [.null]),
        ] {
            #expect(throws: BatonSQLError.self) {
                try translator.select(from: "Aircraft", options: options, after: key)
            }
        }
    }

    @Test func changesRefuseIncompleteKeysAndUnknownProperties() {
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        #expect {
            try translator.delete(from: "Aircraft", key: [])
        } throws: { ($0 as? BatonSQLError)?.message == "A key of 'Aircraft' names exactly (TailNumber)" }
        #expect {
            try translator.insert(into: "Aircraft", values: ["Colour": .string("red")])
        } throws: { ($0 as? BatonSQLError)?.message == "'Aircraft' has no property 'Colour'" }
    }

    @Test(arguments: ["tyre", "TYRE OR oil", "NOT tyre", "\"left main\" AND worn", "(oil OR brake) NOT topped", "zzz"])
    func searchAgreesWithTheEvaluator(search: String) throws {
        let database = try TestDatabase(model: model)
        defer { database.remove() }
        let type = try #require(model.entityType(named: "PreflightCheck"))
        let remarks: [PrimitiveValue] = [
            .string("Left main tyre worn"), .string("Oil topped up"), .null, .string("brake check"), .string("TYRE ok"),
        ]
        let checks = remarks.enumerated().map { index, remark -> [String: PrimitiveValue] in
            [
                "ID": .guid(UUID(uuidString: "00000000-0000-4000-8000-00000000000\(index)") ?? UUID()),
                "TailNumber": .string("D-AIBL"), "FuelKg": .decimal(1), "TyrePressureMainPsi": .decimal(1),
                "TyrePressureNosePsi": .decimal(1), "OilQuarts": .decimal(1), "Remarks": remark,
                "Status": .string("final"),
            ]
        }
        try database.insert(checks, into: "PreflightChecks")
        let encoded = search.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? search
        let url = try ODataURL(parsing: "PreflightChecks?$search=\(encoded)", model: model)
        let expression = try #require(url.query.search)
        let fromSQL = try database.fetch(try sql("PreflightChecks?$search=\(encoded)"), as: type).compactMap {
            $0["ID"]
        }
        let fromEvaluator = checks.filter { check in expression.matches(type) { check[$0] ?? .null } }.compactMap {
            $0["ID"]
        }
        #expect(fromSQL == fromEvaluator)
        #expect(fromSQL.isEmpty == (search == "zzz"), "every search but 'zzz' matches some check")
    }

    @Test func corruptStoredValuesAreReportedNotMisread() {
        #expect {
            try SQLDialect.sqlite.decode(.text("not a date"), as: .date, column: "Day")
        } throws: { ($0 as? BatonSQLError)?.message == "Column 'Day' holds a value that is not a valid Edm.Date" }
    }
}

/// Storing a decimal from its canonical text (the download's fast path) gives exactly what encoding the decoded
/// `Decimal` gives.
@Suite struct DecimalStorageTests {
    @Test func canonicalTextStoresLikeTheDecodedDecimal() throws {
        let property = try #require(
            ServiceModel.aircraftChecks.entityType(named: "Baton.PreflightCheck")?.property(named: "FuelKg"))
        var generator = SystemRandomNumberGenerator()
        var numerals = ["0", "-0", "0.0", "-0.0", "10", "100.0", "1.50", "-99.9", "12345678.9", "0.1", "7"]
        for _ in 0..<3000 {
            let whole = Int.random(in: -99_999_999...99_999_999, using: &generator)
            let digit = Int.random(in: 0...9, using: &generator)
            numerals.append(Bool.random(using: &generator) ? "\(whole)" : "\(whole).\(digit)")
        }
        for numeral in numerals {
            let decoded = try PrimitiveValue(json: .number(numeral), for: property)
            for dialect in [SQLDialect.sqlite, .postgres] {
                #expect(
                    dialect.encodeDecimal(canonicalText: PrimitiveValue.canonicalDecimal(numeral))
                        == dialect.encode(decoded, as: .decimal), "\(numeral)")
            }
        }
    }
}
