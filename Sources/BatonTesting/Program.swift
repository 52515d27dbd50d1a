import Foundation
import Subprocess
import Synchronization
import SystemPackage

/// What a program run to its end left: its exit status and what it wrote.
public struct ProgramResult: Sendable {
    /// The exit code, or 128 + the signal that ended it (as a shell reports it).
    public var status: Int32
    /// Whether a signal ended it.
    public var signaled: Bool
    /// Its standard output, as UTF-8.
    public var output: String
    /// Its standard error, as UTF-8.
    public var error: String
}

/// The test kit's one way to run a program to its end and read what it wrote, on swift-subprocess: standard input
/// is written while both outputs are read (no pipe fills and stalls it), descriptors other than the three standard
/// ones are closed in the child without walking `/proc/self/fd` (which crashed Foundation's `Process` once), and an
/// exit code is told apart from a signal.
public enum Program {
    /// Runs `executable` with `arguments` and waits for it to end.
    ///
    /// - Parameters:
    ///   - executable: The program's file.
    ///   - arguments: Its arguments (never a secret: they are visible to every user of the machine).
    ///   - environment: Variables added to (or replacing) this process's.
    ///   - input: Its standard input; `nil` gives it an empty one.
    ///   - workingDirectory: Where it runs; `nil` here.
    ///   - limit: The most bytes read from each output; more is an error.
    /// - Returns: Its status and outputs.
    /// - Throws: When it cannot be started, or writes more than `limit`.
    public static func run(
        _ executable: URL, _ arguments: [String], environment: [String: String] = [:], input: String? = nil,
        workingDirectory: URL? = nil, limit: Int = 64 << 20
    ) async throws -> ProgramResult {
        var overrides: [Environment.Key: String?] = [:]
        for (name, value) in environment {
            // swift-subprocess takes any name; one with `=` or NUL would set another variable than asked.
            guard !name.isEmpty, !name.utf8.contains(where: { $0 == UInt8(ascii: "=") || $0 == 0 }),
                !value.utf8.contains(0), let key = Environment.Key(rawValue: name)
            else {
                throw ProgramError("An environment variable's name is empty or holds '=' or NUL, or its value NUL.")
            }
            overrides[key] = value
        }
        func execute(_ input: some InputProtocol) async throws -> ProgramResult {
            let result = try await Subprocess.run(
                .path(FilePath(executable.path)), arguments: Arguments(arguments),
                environment: .inherit.updating(overrides),
                workingDirectory: workingDirectory.map { FilePath($0.path) },
                input: input, output: .string(limit: limit), error: .string(limit: limit))
            let (status, signaled): (Int32, Bool) =
                switch result.terminationStatus {
                case .exited(let code): (code, false)
                case .signaled(let signal): (128 + signal, true)
                }
            return ProgramResult(
                status: status, signaled: signaled, output: result.standardOutput, error: result.standardError)
        }
        let bytes = Array((input ?? "").utf8)
        // swift-subprocess 1.0.2 stops the whole process (`FileDescriptor … was not closed`) when a child ends
        // before the input it is given as a string is all written. An input that fits a pipe's buffer is written
        // into a pipe here, whole and closed, before the child starts: the child reads it or not, nothing waits.
        // Only a larger one (a test of large input, whose child reads it all) is written while the child runs.
        guard bytes.count <= Self.prefilledInputLimit else { return try await execute(.string(input ?? "")) }
        let (readEnd, writeEnd) = try FileDescriptor.pipe()
        do {
            _ = try writeEnd.writeAll(bytes)
            try writeEnd.close()
        } catch {
            try? writeEnd.close()
            try? readEnd.close()
            throw error
        }
        return try await execute(.fileDescriptor(readEnd, closeAfterSpawningProcess: true))
    }

    /// The largest input written into a pipe before the child starts: half of Linux's 64 KiB pipe buffer.
    static let prefilledInputLimit = 32 * 1024

    /// ``run(_:_:environment:input:workingDirectory:limit:)`` for code that cannot await (a cluster's set-up): it
    /// blocks the calling thread until the program ends. Call it only off Swift's concurrency pool (from
    /// ``offThePool(_:)``), since the run itself needs a pool thread.
    ///
    /// - Returns: Its status and outputs.
    /// - Throws: As the async one.
    public static func runBlocking(
        _ executable: URL, _ arguments: [String], environment: [String: String] = [:], input: String? = nil,
        workingDirectory: URL? = nil
    ) throws -> ProgramResult {
        let done = DispatchSemaphore(value: 0)
        let outcome = Mutex<Result<ProgramResult, any Error>?>(nil)
        Task.detached {
            let result: Result<ProgramResult, any Error>
            do {
                result = .success(
                    try await run(
                        executable, arguments, environment: environment, input: input,
                        workingDirectory: workingDirectory))
            } catch {
                result = .failure(error)
            }
            outcome.withLock { $0 = result }
            done.signal()
        }
        done.wait()
        guard let result = outcome.withLock({ $0 }) else { throw ProgramError("\(executable.path) did not end.") }
        return try result.get()
    }
}

/// A program could not be run as asked.
public struct ProgramError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
