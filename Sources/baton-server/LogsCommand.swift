import ArgumentParser
import BatonServer
import Foundation

/// `baton-server logs list|show|request`: what devices sent for support (their logs and usage events), and
/// asking one for its log.
struct LogsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logs",
        abstract: "Device logs and usage events: list, show one device's, or ask a device for its log.",
        subcommands: [List.self, Show.self, Request.self])

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The devices that sent logs or usage events, or have a log request pending.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            let summaries = try await data.open().devices.telemetrySummaries()
            if summaries.isEmpty { print("No device sent logs or usage events.") }
            let formatter = ISO8601DateFormatter()
            for summary in summaries {
                print(
                    "\(summary.device)  \(summary.logUploads) log upload(s)"
                        + (summary.lastLogAt.map { ", last \(formatter.string(from: $0))" } ?? "")
                        + "  \(summary.usageEvents) usage event(s)"
                        + (summary.logsRequested ? "  [log requested]" : ""))
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print a device's logs (newest upload first).")
        @OptionGroup var data: DataOptions
        @Argument(help: "The device id (from `logs list`).") var device: String
        @Flag(help: "Print its usage events instead.") var usage = false
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            let server = try await data.open()
            let formatter = ISO8601DateFormatter()
            if usage {
                let events = try await server.devices.usage(device: device)
                if json { return try printJSON(events) }
                if events.isEmpty { print("No usage events from \(device).") }
                for event in events {
                    var line = "\(formatter.string(from: event.at))  \(event.name)"
                    if let count = event.count { line += "  count \(count)" }
                    if let duration = event.durationMs { line += "  \(duration) ms" }
                    if let code = event.code { line += "  \(code)" }
                    print(line)
                }
                return
            }
            let uploads = try await server.devices.logs(device: device)
            if json { return try printJSON(uploads) }
            if uploads.isEmpty { print("No logs from \(device).") }
            for upload in uploads {
                print(
                    "## \(formatter.string(from: upload.receivedAt))  \(upload.lineCount) line(s), \(upload.reason), sent by \(upload.uploader)"
                )
                for line in upload.lines { print(line) }
            }
        }
    }

    struct Request: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Ask a device for its log: it sends it with its next sync.")
        @OptionGroup var data: DataOptions
        @Argument(help: "The device id (from `devices list`).") var device: String

        func run() async throws {
            let server = try await data.open()
            try await adminAction { try await server.devices.requestLogs(device: device) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "device-log-requested", subject: device,
                    address: nil, detail: nil))
            print("Asked \(device) for its log; it sends it with its next sync.")
        }
    }
}

/// Prints `value` as sorted, indented JSON with ISO 8601 dates.
func printJSON(_ value: some Encodable) throws {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .iso8601
    print(String(decoding: try encoder.encode(value), as: UTF8.self))
}
