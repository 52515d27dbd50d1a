import BatonOData
import Foundation
import PropertyBased
import Testing

/// Random and mutated inputs, seeded from the ABNF corpus, fed to every parser: none may crash or hang, and
/// every positioned error must point inside the input. (For long runs, see docs/FUZZING.md.)
@Suite struct ParserRobustnessTests {
    static let model = try? ServiceModel.aircraftChecks
    static let seeds: [String] = {
        var seeds = ABNFCorpus.shared.cases.map(\.input)
        seeds += [
            "PreflightChecks?$filter=FuelKg gt 5000 and contains(Remarks,'tyre')&$orderby=FuelKg desc&$top=5",
            "Aircraft('D-AIBL')/Checks?$expand=Aircraft($select=Station)&$count=true",
            #"{"requests":[{"id":"1","method":"POST","url":"PreflightChecks","body":{"FuelKg":1.5}}]}"#,
            "--b\r\nContent-Type: application/http\r\n\r\nGET A HTTP/1.1\r\n\r\n--b--\r\n",
            #"{"ID":"0f8fad5b-d9cb-469f-a165-70867728950e","FuelKg":12.5,"Remarks":"ok"}"#,
        ]
        return seeds
    }()

    /// Characters that matter to the grammars.
    static let alphabet = Array("()[]{}'\",;:/$@=&?%2Fae0-9 .+-*TZnulltrue\\\t\r\n€")

    /// Applies `count` seeded edits (insert, delete, replace, duplicate a slice) to `text`.
    static func mutate(_ text: String, edits: [Int]) -> String {
        var characters = Array(text)
        for (step, edit) in edits.enumerated() {
            let position = characters.isEmpty ? 0 : abs(edit) % (characters.count + 1)
            let character = alphabet[abs(edit / 7 + step) % alphabet.count]
            switch abs(edit) % 4 {
            case 0: characters.insert(character, at: position)
            case 1: if position < characters.count { characters.remove(at: position) }
            case 2: if position < characters.count { characters[position] = character }
            default:
                let end = min(characters.count, position + abs(edit) % 8)
                characters.insert(contentsOf: characters[position..<end], at: position)
            }
        }
        return String(characters)
    }

    static func checkEveryParser(_ text: String) {
        guard let model, let checks = model.entityType(named: "PreflightCheck") else { return }
        let bytes = Array(text.utf8)
        func positioned(in input: String? = nil, _ body: () throws -> Void) {
            let input = input ?? text
            let limit = max(input.utf8.count, input.unicodeScalars.count)
            do { try body() } catch let error as ODataError {
                if let position = error.position {
                    #expect(position >= 0 && position <= limit, "position \(position) outside «\(input)»")
                }
                #expect(!error.message.isEmpty)
            } catch {
                Issue.record("unexpected error type \(type(of: error)) for «\(text)»")
            }
        }
        positioned { _ = try ODataURL(parsing: text, model: model) }
        let filterURL = "PreflightChecks?$filter=" + text
        positioned(in: filterURL) { _ = try ODataURL(parsing: filterURL, model: model) }
        positioned { _ = try ODataExpression(parsing: text, for: checks, in: model) }
        positioned { _ = try QueryOptions(parsing: text, for: checks, in: model) }
        positioned { _ = try PrimitiveValue(parsingLiteral: text) }
        positioned { _ = try JSONValue(parsing: bytes) }
        positioned { _ = try EntityPayload(decoding: bytes, as: checks, mode: .create) }
        positioned { _ = try JSONBatch.decodeRequests(bytes) }
        positioned { _ = try MultipartBatch.decodeRequests(bytes, boundary: "b") }
        positioned { _ = try Preferences(parsing: [text]) }
        positioned { _ = try ETagCondition(parsing: text) }
    }

    @Test func mutatedCorpusInputsNeverCrash() async {
        await propertyCheck(
            count: 1000, input: Gen.int(in: 0...(Self.seeds.count - 1)), Gen.int(in: -10_000...10_000).array(of: 1...6)
        ) { seed, edits in
            Self.checkEveryParser(Self.mutate(Self.seeds[seed], edits: edits))
        }
    }

    @Test func randomInputsNeverCrash() async {
        let indexes = Gen.int(in: 0...(Self.alphabet.count - 1)).array(of: 0...80)
        await propertyCheck(count: 1000, input: indexes) { indexes in
            Self.checkEveryParser(String(indexes.map { Self.alphabet[$0] }))
        }
    }
}
