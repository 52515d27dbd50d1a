import ArgumentParser
import BatonOData
import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB

/// `baton demo`: plays what Baton can do today, end to end, and exits non-zero if any expectation fails.
///
/// First the shift handover on real components (``HandoverDemo``), then the OData protocol core underneath:
/// the bundled model, `$metadata`, URL and `$filter` parsing, SQL translation run on a real SQLite file,
/// agreement with the in-memory evaluator, and clear errors for bad input.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo", abstract: "Show Baton working, end to end, on temporary data.")

    @Option(help: "Keep the demo's server and device data in this directory (it must not exist yet).")
    var keep: String?

    func run() async throws {
        let directory: URL
        if let keep {
            directory = URL(fileURLWithPath: keep)
            guard !FileManager.default.fileExists(atPath: directory.path) else {
                throw ValidationError("\(keep) exists already; name a new directory for --keep.")
            }
        } else {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-demo-\(UUID().uuidString)")
        }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { if keep == nil { try? FileManager.default.removeItem(at: directory) } }
        var handover = HandoverDemo(directory: directory)
        try await handover.play()
        print("\n— and underneath: the OData protocol core —\n")
        var demo = Demo()
        try demo.play()
        let failures = handover.failures + demo.failures
        if let keep { print("\nThe demo's data is in \(keep) (server/ and device/).") }
        if failures > 0 {
            print("\n\(failures) expectation(s) failed.")
            throw ExitCode(1)
        }
        print("\nAll expectations met.")
    }
}

/// The demo's steps and their checks.
struct Demo {
    var failures = 0
    let now = ODataDateTimeOffset(parsing: "2026-11-21T06:00:00Z") ?? ODataDateTimeOffset(Date())

    mutating func expect(_ condition: Bool, _ what: String) {
        print(condition ? "  ✓ \(what)" : "  ✗ \(what)")
        if !condition { failures += 1 }
    }

    mutating func play() throws {
        print("The OData protocol core on a real SQLite database\n")
        let model = try ServiceModel.aircraftChecks
        print("1. The bundled aircraft-checks model")
        for set in model.entitySets {
            let type = model.entityType(of: set)
            print(
                "   \(set.name): key \(type?.key.joined(separator: ",") ?? "?"), \(type?.properties.count ?? 0) properties"
            )
        }
        let roundTrip = try ServiceModel(csdlJSON: model.csdlJSONDocument.serialized)
        expect(roundTrip == model, "CSDL JSON $metadata reads back to the same model")
        expect(
            model.csdlXML.contains("<EntitySet Name=\"PreflightChecks\""), "CSDL XML $metadata lists PreflightChecks")

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = try DatabaseQueue(path: directory.appendingPathComponent("demo.sqlite").path)
        print("\n2. A SQLite database at \(directory.lastPathComponent)/demo.sqlite, schema from the model")
        let rows = try DemoData.load(into: database, model: model)
        print("   \(rows.aircraft.count) aircraft, \(rows.checks.count) pre-flight checks")

        print("\n3. Queries: URL -> typed AST -> parameterised SQL -> rows, checked against the in-memory evaluator")
        let translator = SQLTranslator(model: model, dialect: .sqlite, now: now)
        let queries = [
            "PreflightChecks?$filter=FuelKg ge 5000 and Aircraft/Station eq 'FRA'&$orderby=FuelKg desc",
            "PreflightChecks?$filter=contains(Remarks,'tyre') or Remarks eq null&$select=TailNumber,Remarks",
            "PreflightChecks?FILTER=TyrePressureMainPsi sub TyrePressureNosePsi GT 140&$top=2",
            "PreflightChecks?$filter=TailNumber in ('D-AIBL','D-AINA') and not (Status eq 'draft')&$count=true",
        ]
        for text in queries {
            print("   GET \(text)")
            let url = try ODataURL(parsing: text, model: model)
            let query = try translator.select(from: "PreflightChecks", options: url.query)
            let fromSQL = try database.read { db in
                try Row.fetchAll(db, sql: query.sql, arguments: query.statementArguments).map {
                    $0["ID"] as String? ?? ""
                }
            }
            var expected = try rows.checks.filter { check in
                try url.query.filter?.matches(now: now) { rows.resolve($0, in: check) } ?? true
            }.map(DemoData.id).sorted()
            if let top = url.query.top, url.query.orderBy.isEmpty { expected = Array(expected.prefix(top)) }
            print("     SQL: \(query.sql.count > 110 ? String(query.sql.prefix(107)) + "..." : query.sql)")
            print("     \(fromSQL.count) row(s)")
            expect(Set(fromSQL) == Set(expected), "SQL and the in-memory evaluator keep the same checks")
        }

        print("\n4. Bad input gets a clear error, never a wrong result")
        let bad = [
            "PreflightChecks?$filter=FuelKgs gt 5000",
            "PreflightChecks?$fitler=FuelKg gt 5000",
            "PreflightChecks?$filter=FuelKg gt 'lots'",
            "PreflightChecks?$filter=Remarks/any(r:r eq 'x')",
        ]
        for text in bad {
            do {
                _ = try ODataURL(parsing: text, model: model)
                expect(false, "'\(text)' is rejected")
            } catch {
                print("   GET \(text)")
                print(
                    "     \(error.code): \(ErrorReport.describe(error, in: text).replacingOccurrences(of: "\n", with: "\n     "))"
                )
                expect(error.position != nil, "the error names its position")
            }
        }
        print("\nThe identity server runs on its own: swift run baton-server serve (see docs/OPERATIONS.md).")
    }
}
