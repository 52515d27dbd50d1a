import ArgumentParser
import BatonOData
import BatonSQL

/// `baton sql URL`: parses an OData request URL against the bundled model and prints the SQL it becomes.
struct SQLCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sql", abstract: "Print the parameterised SQL an OData request URL becomes.")

    @Argument(help: "A request URL relative to the service root, e.g. \"PreflightChecks?$filter=FuelKg gt 5000\".")
    var url: String

    @Option(help: "The SQL dialect: sqlite or postgres.")
    var dialect: String = "sqlite"

    func run() throws {
        let sqlDialect: SQLDialect
        switch dialect.lowercased() {
        case "sqlite": sqlDialect = .sqlite
        case "postgres", "postgresql": sqlDialect = .postgres
        default: throw ValidationError("Unknown dialect '\(dialect)'. Use 'sqlite' or 'postgres'.")
        }
        let model = try ServiceModel.aircraftChecks
        let parsed: ODataURL
        do {
            parsed = try ODataURL(parsing: url, model: model)
        } catch {
            throw CommandError(ErrorReport.describe(error, in: url))
        }
        guard let target = parsed.target, case .resource = parsed.path else {
            print("'\(url)' addresses \(parsed.path); it has no SQL.")
            return
        }
        let query = try SQLTranslator(model: model, dialect: sqlDialect)
            .select(from: target.entitySet.name, options: parsed.query)
        print(query.sql)
        print("-- \(query.arguments.count) bound argument(s)")
    }
}

/// A failure to report as `Error: <message>` with exit code 1, without usage text (the command was used
/// correctly; its input was wrong).
struct CommandError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) { self.description = description }
}

/// Renders errors for the terminal: the message, and for positioned errors a caret under the input.
enum ErrorReport {
    static func describe(_ error: any Error, in input: String) -> String {
        guard let error = error as? ODataError else { return "\(error)" }
        guard let position = error.position, position <= input.count else { return error.message }
        return "\(error.message)\n  \(input)\n  \(String(repeating: " ", count: position))^"
    }
}
