import ArgumentParser
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `baton demo`: starts `baton-demo demo …`, which plays the shift handover on a server it runs in-process. The app
/// links no server library, so the demo is an executable of its own (see ``CompanionExecutable``).
struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo", abstract: "Show Baton working, end to end, on temporary data (runs baton-demo).")

    @Argument(parsing: .captureForPassthrough, help: "Passed to baton-demo demo, e.g. --keep DIRECTORY.")
    var arguments: [String] = []

    func run() throws { try CompanionExecutable.demo.replaceThisProcess(arguments: ["demo"] + arguments) }
}

/// `baton sql URL`: starts `baton-demo sql …`, which prints the parameterised SQL an OData URL becomes.
struct SQLCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sql", abstract: "Print the parameterised SQL an OData request URL becomes (runs baton-demo).")

    @Argument(parsing: .captureForPassthrough, help: "Passed to baton-demo sql: a URL, --dialect sqlite|postgres.")
    var arguments: [String] = []

    func run() throws { try CompanionExecutable.demo.replaceThisProcess(arguments: ["sql"] + arguments) }
}

/// An executable built beside `baton` that `baton` hands a command to, replacing itself (`execv`), so the
/// companion's output, input and exit status are the command's own.
///
/// Where the companion is missing and `baton` runs from a package's `.build` directory (`swift run baton demo` on a
/// fresh clone builds only `baton`), the command becomes `swift run --package-path PACKAGE baton-demo …`, which
/// builds the companion first. Anywhere else (an app installed on its own) the error names what is missing.
struct CompanionExecutable {
    static let demo = CompanionExecutable(name: "baton-demo")

    let name: String

    /// What replaces this process: the companion beside it, or `swift run` in the package it was built in.
    ///
    /// `swift` is looked up in the absolute directories of `searchPath` only (`PATH` by default): a relative entry
    /// such as `.` would run whatever `swift` the current directory holds.
    func invocation(
        arguments: [String], executable: URL,
        searchPath: String = ProcessInfo.processInfo.environment["PATH"] ?? ""
    ) throws -> (path: String, arguments: [String]) {
        let directory = executable.deletingLastPathComponent()
        let beside = directory.appendingPathComponent(name).path
        if FileManager.default.isExecutableFile(atPath: beside) { return (beside, [beside] + arguments) }
        let components = directory.pathComponents
        guard let build = components.lastIndex(of: ".build") else {
            throw AppError(
                .failed, "\(name) is not installed beside \(executable.lastPathComponent) (\(directory.path)).")
        }
        let package = URL(fileURLWithPath: NSString.path(withComponents: Array(components[..<build])))
        guard FileManager.default.fileExists(atPath: package.appendingPathComponent("Package.swift").path) else {
            throw AppError(.failed, "\(name) is not built, and \(package.path) holds no Package.swift to build it.")
        }
        let release = components[build...].contains("release")
        let directories = searchPath.split(separator: ":").filter { $0.hasPrefix("/") }
        guard
            let swift = directories.map({ URL(fileURLWithPath: String($0)).appendingPathComponent("swift").path })
                .first(where: { FileManager.default.isExecutableFile(atPath: $0) })
        else {
            throw AppError(
                .failed, "\(name) is not built, and no swift is on PATH to build it (absolute directories only).")
        }
        let run = [swift, "run", "--package-path", package.path] + (release ? ["-c", "release"] : []) + [name]
        return (swift, run + arguments)
    }

    /// Replaces this process with the companion; returns only by throwing.
    func replaceThisProcess(arguments: [String]) throws {
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let own = FileManager.default.fileExists(atPath: executable.path) ? executable : Bundle.main.executableURL
        guard let own else { throw AppError(.failed, "Cannot tell where baton is installed.") }
        let (path, argv) = try invocation(arguments: arguments, executable: own)
        if argv.dropFirst().first == "run" {
            FileHandle.standardError.write(Data("\(name) is not built yet; building it with swift run.\n".utf8))
        }
        let cArguments = argv.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        fflush(nil)
        execv(path, cArguments)
        throw AppError(.failed, "Could not start \(path): \(String(cString: strerror(errno))).")
    }
}
