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

/// Where the device's files are and which server it belongs to (every command).
struct DeviceOptions: ParsableArguments {
    @Option(help: "The device's data directory (users' secure stores, the encrypted offline store).")
    var dataDir: String = "baton-device"

    @Option(help: "The server, e.g. http://127.0.0.1:8080 (remembered on first use).")
    var server: String?

    @Flag(help: "Work with no network: nothing is sent to the server.")
    var offline = false

    var directory: URL { URL(fileURLWithPath: dataDir) }
}

/// Who signs in for a scriptable command, and how the passcode arrives (never on the command line).
struct SignInOptions: ParsableArguments {
    @Option(help: "The user (their name on the server) who runs the command.")
    var user: String

    @Flag(help: "Read the passcode from the first line of standard input instead of a hidden prompt.")
    var passcodeStdin = false

    @Option(
        help: ArgumentHelp(
            "What the user agrees to, when a newer app asks for consent they never gave: data[,usage].",
            valueName: "data[,usage]"))
    var consent: String = ""

    func validate() throws { _ = try parseConsents(consent) }
}

/// `--consent data,usage` as consent kinds; an unknown word is a usage error.
func parseConsents(_ text: String) throws -> Set<ConsentKind> {
    var kinds: Set<ConsentKind> = []
    for word in text.split(separator: ",") {
        guard let kind = ConsentKind(rawValue: word.trimmingCharacters(in: .whitespaces).lowercased()) else {
            throw ValidationError("--consent takes data and usage, not '\(word.prefix(20))'.")
        }
        kinds.insert(kind)
    }
    return kinds
}

/// Runs a scriptable command: opens the device, signs `user` in (a restore: passcode only, synced when the
/// server is reachable), runs `body`, and closes the session again. Errors become a message on standard
/// error and the documented exit status.
func runScripted(
    _ options: DeviceOptions, signIn: SignInOptions?, onboarding newUser: String? = nil, password: String? = nil,
    passcode: String? = nil, approver: Approver? = nil, consents: Set<ConsentKind> = [],
    _ body: (Device, ConsoleUI) async throws -> Void
) async throws {
    let ui = ConsoleUI()
    do {
        var passcode = passcode
        if let signIn, signIn.passcodeStdin, passcode == nil { passcode = readSecretLine("passcode") }
        let presenter = ScriptPresenter(
            ui: ui, username: signIn?.user ?? newUser, password: password, passcode: passcode, approver: approver,
            consents: consents.union((try? parseConsents(signIn?.consent ?? "")) ?? []))
        let device = try await Device.open(
            directory: options.directory, server: options.server, offline: options.offline, presenter: presenter,
            askServer: { throw AppError(.usage, "This device has no server yet; give --server URL.") })
        if let newUser, await device.sessions.users.user(serverUserID: newUser) != nil {
            throw AppError(.usage, "\(newUser) is on this device already.")
        }
        if let name = signIn?.user {
            guard let user = await device.sessions.users.user(serverUserID: name), user.status == .success else {
                throw AppError(.notFound, "\(name) is not on this device; `baton users` lists who is.")
            }
            _ = try await device.sessions.switchUser(to: user.id)
        }
        do {
            try await body(device, ui)
        } catch {
            await device.notePendingChanges()
            await device.sessions.close()
            throw error
        }
        await device.notePendingChanges()
        await device.sessions.close()
    } catch {
        let failure = AppError.from(error)
        FileHandle.standardError.write(Data("baton: \(failure.message)\n".utf8))
        throw failure.exitCode
    }
}

/// Runs `body`, a check of the command's own values before anything is opened: its refusal goes to standard
/// error and ends the command with its exit status.
func validated<T>(_ body: () throws -> T) throws -> T {
    do { return try body() } catch let error as AppError {
        FileHandle.standardError.write(Data("baton: \(error.message)\n".utf8))
        throw error.exitCode
    }
}

/// One line of standard input (for `--passcode-stdin` / `--password-stdin`); nil when there is none.
func readSecretLine(_ what: String) -> String? {
    guard let line = readLine(strippingNewline: true), !line.isEmpty else { return nil }
    return line
}

/// Prints `value` as sorted, indented JSON.
func printJSON(_ value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}
