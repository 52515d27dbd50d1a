import BatonTestSupport
import BatonTesting
import Foundation
import Testing

/// Runs the built `baton` binary and checks what a user sees.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct BatonExecutableTests {
    typealias Result = ProgramResult

    /// The `baton` executable in the build directory that holds this test binary.
    static var executable: URL { builtExecutable("baton") }

    /// Runs `executable` to its end (``Program``).
    static func run(_ arguments: [String], executable: URL = executable, input: String? = nil) async throws -> Result {
        try await Program.run(executable, arguments, input: input)
    }

    @Test func demoPassesEveryExpectation() async throws {
        let result = try await Self.run(["demo"])
        #expect(result.status == 0, "\(result.output)\(result.error)")
        #expect(result.output.contains("All expectations met."))
        #expect(!result.output.contains("✗"))
        #expect(result.output.contains("Unknown property 'FuelKgs' on 'PreflightCheck'. Did you mean 'FuelKg'?"))
        // The handover: alice's offline check reaches the server as hers, uploaded by bob.
        #expect(result.output.contains("FuelKg 5200, CheckedBy alice, UploadedBy bob"))
        #expect(result.output.contains("✓ the server cannot be reached"))
    }

    @Test func demoKeepsItsDataWhenAsked() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-keep-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let result = try await Self.run(["demo", "--keep", directory.path])
        #expect(result.status == 0, "\(result.output)\(result.error)")
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("device/offline.sqlite").path))
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("server").path))
        // An existing directory is refused, not overwritten.
        let again = try await Self.run(["demo", "--keep", directory.path])
        #expect(again.status != 0)
        #expect(again.error.contains("exists already"))
    }

    @Test func sqlPrintsParameterisedSQL() async throws {
        let result = try await Self.run(["sql", "PreflightChecks?$filter=Remarks eq 'secret'&$top=2"])
        #expect(result.status == 0)
        #expect(result.output.contains(#"WHERE (t0."Remarks" IS ?1) ORDER BY t0."ID" ASC LIMIT ?2"#))
        #expect(!result.output.contains("secret"))
        #expect(result.output.contains("-- 2 bound argument(s)"))
    }

    @Test func badURLIsAnErrorWithACaret() async throws {
        let result = try await Self.run(["sql", "PreflightChecks?$filter=FuelKgs gt 5"])
        #expect(result.status != 0)
        #expect(
            result.error == """
                Error: Unknown property 'FuelKgs' on 'PreflightCheck'. Did you mean 'FuelKg'?
                  PreflightChecks?$filter=FuelKgs gt 5
                                          ^

                """)
    }

    @Test func aThousandsOfTermsChainIsALimitErrorNotACrash() async throws {
        let chain = Array(repeating: "true", count: 3_000).joined(separator: " or ")
        let result = try await Self.run(["sql", "PreflightChecks?$filter=" + chain])
        #expect(result.status == 1, "\(result.error.prefix(300))")
        #expect(result.error.contains("more than 200 terms"), "\(result.error.prefix(300))")
    }

    /// `baton-demo` runs on its own, without `baton`: its default command is the demo, `sql` its other.
    @Test func theCompanionRunsOnItsOwn() async throws {
        let result = try await Self.run(["sql", "Aircraft?$top=1"], executable: builtExecutable("baton-demo"))
        #expect(result.status == 0, "\(result.error)")
        #expect(result.output.contains("LIMIT ?1"))
        let help = try await Self.run(["--help"], executable: builtExecutable("baton-demo"))
        #expect(help.output.contains("demo (default)"), "\(help.output)")
    }

    /// `baton` installed on its own (no `baton-demo` beside it, no package around it) says what is missing.
    @Test func theAppAloneNamesTheMissingDemo() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-alone-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let alone = directory.appendingPathComponent("baton")
        try FileManager.default.copyItem(at: Self.executable, to: alone)
        let result = try await Self.run(["demo"], executable: alone)
        #expect(result.status == 1)
        #expect(result.error.contains("baton-demo is not installed beside baton"), "\(result.error)")
        #expect(!result.output.contains("Baton demo"))
    }

    @Test func unknownDialectIsNamed() async throws {
        let result = try await Self.run(["sql", "Aircraft", "--dialect", "oracle"])
        #expect(result.status != 0)
        #expect(result.error.contains("Unknown dialect 'oracle'. Use 'sqlite' or 'postgres'."))
    }
}
