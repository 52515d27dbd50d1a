import Foundation

/// The parsers fuzzed at scale: `scripts/fuzz` (libFuzzer with AddressSanitizer over the kept corpus, then the
/// corpus merged back), run from the harness so that its long mode is one command. libFuzzer needs a build of its
/// own (`-sanitize=fuzzer,address`), so the harness runs the script as a process and reads the figures from its
/// last line. A crash leaves its input in `fuzz/regressions/`, which the tests replay.
public struct FuzzChaos: Sendable {
    /// How many inputs, in all.
    public var inputs: Int
    /// Fuzzer processes at once.
    public var jobs: Int
    /// The script, in the package's `scripts/` folder.
    public var script: URL

    public init(inputs: Int, jobs: Int = 2, script: URL) {
        (self.inputs, self.jobs, self.script) = (inputs, jobs, script)
    }

    public struct Report: Sendable, Codable, Equatable {
        public var inputs = 0
        public var seconds = 0
        public var processes = 0
        public var edges: Int?
        public var corpusFiles = 0
        public var corpusBytes = 0
        /// Whether a parser crashed, timed out or ran out of memory (its input is in `fuzz/regressions/`).
        public var crashed = false

        public var passed: Bool { !crashed && inputs > 0 }

        public var text: String {
            var lines = [
                "inputs: \(inputs) in \(seconds) s over \(processes) processes"
                    + (edges.map { ", \($0) coverage edges" } ?? ""),
                "corpus kept: \(corpusFiles) files, \(corpusBytes) bytes",
            ]
            lines.append(crashed ? "crashes: yes — the input is in fuzz/regressions/" : "crashes: 0")
            return lines.joined(separator: "\n")
        }
    }

    /// The figures of the script's summary line (`baton-fuzz: N inputs in S s over J processes, cov: E edges;
    /// corpus kept: F files, B bytes`), or `nil` when `output` has none.
    public static func summary(_ output: String) -> Report? {
        guard
            let line = output.split(separator: "\n").last(where: {
                $0.hasPrefix("baton-fuzz: ") && $0.contains(" inputs in ")
            })
        else { return nil }
        /// The whole number right before `word` in the line.
        func number(before word: String) -> Int? {
            guard let range = line.range(of: " \(word)") else { return nil }
            let digits = line[..<range.lowerBound].reversed().prefix { $0.isNumber }
            return digits.isEmpty ? nil : Int(String(digits.reversed()))
        }
        func number(after word: String) -> Int? {
            guard let range = line.range(of: "\(word) ") else { return nil }
            let digits = line[range.upperBound...].prefix { $0.isNumber }
            return digits.isEmpty ? nil : Int(digits)
        }
        guard let inputs = number(before: "inputs in"), let seconds = number(before: "s over"),
            let processes = number(before: "processes"), let files = number(before: "files"),
            let bytes = number(before: "bytes")
        else { return nil }
        return Report(
            inputs: inputs, seconds: seconds, processes: processes, edges: number(after: "cov:"), corpusFiles: files,
            corpusBytes: bytes)
    }

    /// Runs the script (its build and its fuzzing), writes its output to standard error when it ends, and returns
    /// its figures.
    ///
    /// - Throws: ``ChaosFailure`` when the script cannot run or ends without its summary.
    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> Report {
        let process = Process()
        process.executableURL = script
        process.arguments = [String(inputs), String(jobs)]
        process.currentDirectoryURL = script.deletingLastPathComponent().deletingLastPathComponent()
        let output = Pipe()
        process.standardOutput = output
        progress(
            "fuzzing \(inputs) inputs over \(jobs) processes (scripts/fuzz builds baton-fuzz with libFuzzer first)")
        do {
            try process.run()
        } catch {
            throw ChaosFailure("scripts/fuzz could not start: \(error.localizedDescription)")
        }
        // Read to the end before waiting, so a full pipe cannot stop the script.
        let data = await Task.detached { output.fileHandleForReading.readDataToEndOfFile() }.value
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        FileHandle.standardError.write(data)
        guard var report = Self.summary(text) else {
            throw ChaosFailure("scripts/fuzz ended (status \(process.terminationStatus)) without its summary line.")
        }
        report.crashed = process.terminationStatus != 0
        return report
    }

    /// `scripts/fuzz` of the package this executable was built in (`.build/…/baton-chaos`): the folder above its
    /// `.build` that holds `Package.swift`. Nothing else, not the current directory: a `scripts/fuzz` someone put
    /// there would run as the developer, and the script rewrites `fuzz/corpus/` of the tree it is in.
    public static func script(beside executable: URL) -> URL? {
        var directory = executable.resolvingSymlinksInPath().deletingLastPathComponent()
        while directory.pathComponents.count > 1 {
            let isBuild = directory.lastPathComponent == ".build"
            directory = directory.deletingLastPathComponent()
            guard isBuild else { continue }
            let script = directory.appendingPathComponent("scripts/fuzz")
            let manifest = directory.appendingPathComponent("Package.swift")
            guard FileManager.default.isExecutableFile(atPath: script.path),
                FileManager.default.fileExists(atPath: manifest.path)
            else { return nil }
            return script
        }
        return nil
    }
}
