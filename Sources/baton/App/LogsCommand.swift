import ArgumentParser
import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

struct LogsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logs", abstract: "This device's log: send it to support.", subcommands: [Send.self])

    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send this device's log to the server for support (events and codes, never secrets or values).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                let lines = try await device.sendLog(reason: "support")
                print("Sent \(lines) log line\(lines == 1 ? "" : "s") to support.")
            }
        }
    }
}

// MARK: lock

struct LockCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock", abstract: "Lock the app running on this device now (e.g. at shift end).")
    @OptionGroup var device: DeviceOptions

    func run() async throws {
        let pidFile = device.directory.appendingPathComponent("app.pid")
        guard let text = try? String(contentsOf: pidFile, encoding: .utf8), let pid = pid_t(text), kill(pid, 0) == 0
        else {
            print("No baton app is open on \(device.dataDir): the device is locked.")
            return
        }
        guard kill(pid, SIGUSR1) == 0 else {
            FileHandle.standardError.write(Data("baton: cannot signal the app (process \(pid)).\n".utf8))
            throw ExitCode(AppError.Status.failed.rawValue)
        }
        print("Locked the baton app (process \(pid)).")
    }
}
