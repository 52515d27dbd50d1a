import Foundation
import Testing

@testable import baton

/// Where `baton demo` and `baton sql` go: the `baton-demo` beside `baton`, else `swift run` in the package `baton`
/// was built in, else a clear error.
@Suite struct CompanionExecutableTests {
    let root = FileManager.default.temporaryDirectory.appendingPathComponent("baton-companion-\(UUID())")

    func make(_ path: String, executable: Bool = false) throws -> URL {
        let url = root.appendingPathComponent(path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data("#!/bin/sh\n".utf8).write(to: url)
        if executable { try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: url.path) }
        return url
    }

    @Test func theCompanionBesideTheAppIsStartedDirectly() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let app = try make("bin/baton", executable: true)
        let demo = try make("bin/baton-demo", executable: true)
        let (path, arguments) = try CompanionExecutable.demo.invocation(
            arguments: ["demo", "--keep", "x"], executable: app)
        #expect(path == demo.path)
        #expect(arguments == [demo.path, "demo", "--keep", "x"])
    }

    @Test func aMissingCompanionInAPackageIsBuiltBySwiftRun() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        _ = try make("pkg/Package.swift")
        let debug = try make("pkg/.build/x86_64-unknown-linux-gnu/debug/baton", executable: true)
        // A companion that is there but not executable does not count.
        _ = try make("pkg/.build/x86_64-unknown-linux-gnu/debug/baton-demo")
        let package = root.appendingPathComponent("pkg").path
        // `swift` comes from the first absolute directory of PATH that has one; relative entries are skipped.
        let swift = try make("toolchain/bin/swift", executable: true).path
        _ = try make("bin/swift", executable: false)
        let searchPath = ".:bin:\(root.path)/bin:\(root.path)/toolchain/bin"
        let (path, arguments) = try CompanionExecutable.demo.invocation(
            arguments: ["sql", "Aircraft"], executable: debug, searchPath: searchPath)
        #expect(path == swift)
        #expect(arguments == [swift, "run", "--package-path", package, "baton-demo", "sql", "Aircraft"])
        let release = try make("pkg/.build/x86_64-unknown-linux-gnu/release/baton", executable: true)
        let (_, releaseArguments) = try CompanionExecutable.demo.invocation(
            arguments: ["demo"], executable: release, searchPath: searchPath)
        #expect(releaseArguments == [swift, "run", "--package-path", package, "-c", "release", "baton-demo", "demo"])
        // A relative entry that does lead to a swift (from this process's working directory) is still skipped.
        let decoy = try make("decoy/bin/swift", executable: true).deletingLastPathComponent().path
        let up = String(repeating: "../", count: FileManager.default.currentDirectoryPath.split(separator: "/").count)
        let relativeDecoy = up + decoy.dropFirst()
        #expect(FileManager.default.isExecutableFile(atPath: relativeDecoy + "/swift"), "the decoy is reachable")
        let (skipping, _) = try CompanionExecutable.demo.invocation(
            arguments: ["demo"], executable: debug, searchPath: "\(relativeDecoy):\(root.path)/toolchain/bin")
        #expect(skipping == swift)
        // No swift in an absolute directory: a clear error, nothing run from the current directory.
        #expect {
            try CompanionExecutable.demo.invocation(arguments: ["demo"], executable: debug, searchPath: ".:bin")
        } throws: { "\($0)".contains("no swift is on PATH") }
    }

    @Test func aMissingCompanionElsewhereIsAClearError() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let installed = try make("opt/baton", executable: true)
        #expect {
            try CompanionExecutable.demo.invocation(arguments: ["demo"], executable: installed)
        } throws: { "\($0)".contains("baton-demo is not installed beside baton") }
        // A `.build` with no package around it is not built from.
        let stray = try make("stray/.build/debug/baton", executable: true)
        #expect {
            try CompanionExecutable.demo.invocation(arguments: ["demo"], executable: stray)
        } throws: { "\($0)".contains("holds no Package.swift") }
    }
}
