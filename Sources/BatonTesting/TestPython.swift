import Foundation

/// The Python that tests use to drive third-party clients (Authlib, odatapy, python-odata, requests, pexpect)
/// against a real server.
///
/// `scripts/test` (the README's test command) installs the pinned clients of `requirements-test.txt` into
/// `.build/venv`; that Python is used when it exists, else `python3` from `PATH`. A Python that lacks a module
/// is reported with the command that installs it, never as a bare exit status.
public enum TestPython {
    /// The package's root directory (where `Package.swift` is).
    public static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent()

    /// The Python executable: `.build/venv/bin/python3` when `scripts/test` made it, otherwise `python3` on `PATH`.
    public static var executable: URL {
        let venv = packageRoot.appendingPathComponent(".build/venv/bin/python3")
        if FileManager.default.isExecutableFile(atPath: venv.path) { return venv }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = URL(fileURLWithPath: String(directory)).appendingPathComponent("python3")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
        }
        return URL(fileURLWithPath: "/usr/bin/python3")
    }

    /// What a test says when Python or one of `modules` is missing: which ones, and the command that installs them.
    ///
    /// - Returns: nil when `import` of every module works.
    public static func missing(_ modules: [String]) -> String? {
        let process = Process()
        process.executableURL = executable
        process.arguments =
            [
                "-c",
                "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))",
            ] + modules
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        do { try process.runAlone() } catch {
            return
                "No Python at \(executable.path) (\(error)). Run scripts/test, the README's test command: it installs what the tests need."
        }
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let absent = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard process.terminationStatus != 0 || !absent.isEmpty else { return nil }
        return """
            \(executable.path) lacks the Python module(s) \(absent.isEmpty ? text : absent). Run scripts/test, the \
            README's test command: it installs requirements-test.txt into .build/venv (or \
            `python3 -m pip install -r requirements-test.txt`).
            """
    }
}

/// Runs `body`, which blocks (waits for a process, reads a pipe or a socket), on a thread of its own and awaits
/// its result.
///
/// Tests share Swift's concurrency pool (one thread per core, two on a small machine) with the in-process servers
/// of other tests: a test that blocked a pool thread while waiting for a child process could starve them all.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

extension Process {
    private static let spawnLock = NSLock()

    /// Starts the process while no other test starts one.
    ///
    /// Foundation's `Process.run()` on Linux lists `/proc/self/fd` to close every descriptor in the child, and
    /// copies 256 bytes of each entry's name: with about 1,360 descriptors open the last entry lies at the end of
    /// glibc's 32 KiB directory buffer and the copy can read past it (SIGSEGV). Test suites that serve Baton
    /// hold a slot each (`BatonTestSupport`'s `.serverSlot`) so the test process stays far below that; starting
    /// one process at a time keeps the listings from overlapping too.
    public func runAlone() throws {
        try Self.spawnLock.withLock { try run() }
    }
}
