import BatonFuzzing
import Foundation
import Testing

/// The fuzzer's kept corpus and every input that once crashed a parser, replayed through the same entry point
/// `baton-fuzz` runs under libFuzzer (`scripts/fuzz`, docs/FUZZING.md).
@Suite struct FuzzCorpusTests {
    static let fuzz = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("fuzz")

    static func inputs(_ folder: String) throws -> [(name: String, bytes: [UInt8])] {
        let directory = fuzz.appendingPathComponent(folder)
        return try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
            .filter { !$0.hasPrefix(".") && $0 != "README.md" }
            .map { name in (name, Array(try Data(contentsOf: directory.appendingPathComponent(name)))) }
    }

    @Test func theKeptCorpusAndEveryInputThatOnceCrashedReplay() throws {
        #expect(ParserFuzzing.isReady)
        let corpus = try Self.inputs("corpus")
        #expect(corpus.count >= 200, "the corpus has \(corpus.count) inputs")
        let targets = Set(corpus.compactMap { ParserFuzzing.target(of: $0.bytes) })
        #expect(
            targets == Set(ParserFuzzing.Target.allCases),
            "no input for \(Set(ParserFuzzing.Target.allCases).subtracting(targets))")
        // Small enough to keep in the repository.
        #expect(corpus.reduce(0) { $0 + $1.bytes.count } < 2_000_000)
        for input in corpus { ParserFuzzing.exercise(input.bytes) }
        // And every input that once crashed a parser (none yet: the folder is where scripts/fuzz leaves them).
        for input in try Self.inputs("regressions") { ParserFuzzing.exercise(input.bytes) }
    }
}
