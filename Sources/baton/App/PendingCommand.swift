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

struct PendingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pending", abstract: "Changes on this device the server does not have yet, and the error archive.")
    @OptionGroup var device: DeviceOptions
    @OptionGroup var signIn: SignInOptions
    @Flag(help: "Print JSON.") var json = false

    struct Entry: Encodable {
        let requestID: String
        let author: String
        let method: String
        let entity: String
        let createdAt: String
        let archived: Bool
        let reason: String?
    }

    func run() async throws {
        try await runScripted(device, signIn: signIn) { device, ui in
            let queued = try await device.store.pendingEntries().map {
                Entry(
                    requestID: $0.requestID, author: $0.author, method: $0.method, entity: $0.entityID,
                    createdAt: $0.createdAt, archived: false, reason: nil)
            }
            let archived = try await device.store.archivedEntries().map {
                Entry(
                    requestID: $0.entry.requestID, author: $0.entry.author, method: $0.entry.method,
                    entity: $0.entry.entityID, createdAt: $0.entry.createdAt, archived: true, reason: $0.message)
            }
            if json {
                try printJSON(queued + archived)
                return
            }
            let counts = Dictionary(grouping: queued, by: \.author).mapValues(\.count)
            print(
                counts.isEmpty
                    ? "No pending changes."
                    : counts.sorted { $0.key < $1.key }.map {
                        "\($0.value) change\($0.value == 1 ? "" : "s") by \($0.key)"
                    }
                    .joined(separator: ", "))
            for entry in queued { print("  \(entry.method) \(entry.entity) by \(entry.author) at \(entry.createdAt)") }
            for entry in archived {
                print("  archived: \(entry.method) \(entry.entity) by \(entry.author): \(entry.reason ?? "")")
            }
        }
    }
}
