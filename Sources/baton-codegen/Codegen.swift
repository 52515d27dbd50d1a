import ArgumentParser
import BatonCodegen
import BatonOData
import Foundation

/// `baton-codegen MODEL.csdl.json --output FILE`: Swift types for a CSDL JSON model's entity types.
@main
struct Codegen: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "baton-codegen",
        abstract: "Write a Swift struct per entity type of a CSDL JSON model (ODataEntity types for the SDK).",
        discussion: """
            The output is meant to be checked in beside the app's code and regenerated when the model changes; \
            Baton's own aircraft-checks types are made this way (scripts/codegen).
            """)

    @Argument(help: "The CSDL JSON model (the file `baton-server serve --model` takes).")
    var model: String

    @Option(help: "Where to write the Swift file (default: standard output).")
    var output: String?

    func run() throws {
        let url = URL(fileURLWithPath: model)
        let text: String
        do { text = try String(contentsOf: url, encoding: .utf8) } catch {
            throw ValidationError("Cannot read the model \(model): it must be a readable UTF-8 file.")
        }
        let parsed: ServiceModel
        do { parsed = try ServiceModel(csdlJSON: text) } catch {
            throw ValidationError("The model \(model) is not valid: \(error.description)")
        }
        let source: String
        do { source = try EntityCodeGenerator.swiftSource(for: parsed, source: url.lastPathComponent) } catch {
            throw ValidationError(error.message)
        }
        guard let output else {
            print(source, terminator: "")
            return
        }
        try Data(source.utf8).write(to: URL(fileURLWithPath: output), options: .atomic)
    }
}
