import BatonOData
import Foundation

/// What devices send for support: usage events (counts and durations, no personal data, no values) and their
/// log, kept per device. An admin reads them with `baton-server logs` or in the cockpit, and orders a device's
/// log with `baton-server logs request DEVICE`.
extension DeviceRegistry {
    /// The usage events a device may report, and nothing else.
    public static let usageEventNames: Set<String> = ["app-start", "sign-in", "switch-user", "sync", "error"]
    /// At most this many events, and this many log lines of at most `maxLogLineLength` characters, per request
    /// (within the body limit of 64 KiB: devices send in parts).
    public static let maxUsageEvents = 500
    public static let maxLogLines = 5_000
    public static let maxLogLineLength = 2_000
    /// Why a device sent its log.
    public static let logReasons: Set<String> = ["support", "requested", "setting"]
    /// What is kept per device: the newest log uploads and usage events (older ones go as new ones come), and
    /// at most this many log uploads per device in 24 hours (then 429).
    public static let keptLogUploads = 50
    public static let keptUsageEvents = 20_000
    public static let dailyLogUploads = 200

    /// One usage event as kept.
    public struct UsageEvent: Sendable, Hashable, Codable {
        public var id: String
        public var device: String
        public var at: Date
        public var name: String
        public var count: Int?
        public var durationMs: Int?
        public var code: String?
    }

    /// One log upload.
    public struct LogUpload: Sendable, Hashable, Codable {
        public var id: Int64
        public var device: String
        public var uploader: String
        public var reason: String
        public var receivedAt: Date
        public var lineCount: Int
        /// The lines, when read with `logs(device:)`; empty in summaries.
        public var lines: [String]
    }

    /// What a device sent, for the list.
    public struct TelemetrySummary: Sendable, Hashable, Codable {
        public var device: String
        public var logUploads: Int
        public var lastLogAt: Date?
        public var usageEvents: Int
        public var logsRequested: Bool
    }

    /// Checks and keeps a device's usage events (`{"events": [{"id", "at", "name", "count"?, "durationMs"?,
    /// "code"?}]}`). An event already kept (same id) is not kept twice, so a retried upload adds nothing.
    ///
    /// - Returns: how many events were new.
    /// - Throws: ``ServerError`` 400 naming what is wrong; nothing is kept then.
    public func keepUsage(device: String, body: JSONValue) async throws -> Int {
        guard let events = body["events"]?.arrayValue, events.count <= Self.maxUsageEvents else {
            throw ServerError.badRequest(
                "The body must be {\"events\": [...]} with at most \(Self.maxUsageEvents) events.")
        }
        var kept: [UsageEvent] = []
        for (index, event) in events.enumerated() {
            func number(_ key: String) throws -> Int? {
                guard let value = event[key], value != .null else { return nil }
                guard case .number(let text) = value, let number = Int(text), (0...86_400_000).contains(number) else {
                    throw ServerError.badRequest("Event \(index): \(key) must be a whole number from 0 to 86400000.")
                }
                return number
            }
            guard let id = event["id"]?.stringValue, UUID(uuidString: id) != nil,
                let name = event["name"]?.stringValue, Self.usageEventNames.contains(name),
                let at = event["at"]?.stringValue.flatMap({ try? Date($0, strategy: .iso8601) })
            else {
                throw ServerError.badRequest(
                    "Event \(index) needs an id (a UUID), a time (at) and a name, one of \(Self.usageEventNames.sorted().joined(separator: ", ")))."
                )
            }
            let code = event["code"]?.stringValue
            if let code,
                !(1...64).contains(code.count) || !code.allSatisfy({ $0.isASCII && ($0.isLetter || $0 == "-") })
            {
                throw ServerError.badRequest(
                    "Event \(index): code must be 1–64 letters (an error code, never a message).")
            }
            kept.append(
                UsageEvent(
                    id: id.lowercased(), device: device, at: at, name: name, count: try number("count"),
                    durationMs: try number("durationMs"), code: code))
        }
        let now = clock.now()
        let checked = kept
        return try await database.storage.write { db in
            var added = 0
            for event in checked {
                added += try await db.execute(
                    """
                    INSERT INTO usageEvents (id, device, at, name, count, durationMs, code, receivedAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
                    """, event.id, event.device, event.at, event.name, event.count.map(Int64.init),
                    event.durationMs.map(Int64.init), event.code, now)
            }
            // Bounded per device: the oldest go.
            try await db.execute(
                """
                DELETE FROM usageEvents WHERE device = ? AND id NOT IN (
                    SELECT id FROM usageEvents WHERE device = ? ORDER BY at DESC, id DESC LIMIT ?)
                """, device, device, Self.keptUsageEvents)
            return added
        }
    }

    /// Keeps a device's log (`{"reason": "support" | "requested" | "setting", "lines": ["…"]}`) and settles a
    /// pending order for it.
    ///
    /// - Throws: ``ServerError`` 400 naming what is wrong; nothing is kept then.
    public func keepLog(device: String, uploader: String, body: JSONValue) async throws -> LogUpload {
        guard let reason = body["reason"]?.stringValue, Self.logReasons.contains(reason),
            let array = body["lines"]?.arrayValue, (1...Self.maxLogLines).contains(array.count)
        else {
            throw ServerError.badRequest(
                "The body must be {\"reason\": \"support\", \"requested\" or \"setting\", \"lines\": [...]} with 1 to \(Self.maxLogLines) lines."
            )
        }
        var lines: [String] = []
        for (index, value) in array.enumerated() {
            // No control characters (a tab aside): a line read in an admin's terminal must not move its cursor,
            // retitle it or fake another upload's header.
            guard let line = value.stringValue, line.count <= Self.maxLogLineLength,
                !line.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && $0 != "\t" })
            else {
                throw ServerError.badRequest(
                    "Line \(index) must be text of at most \(Self.maxLogLineLength) characters, one line, no control characters."
                )
            }
            lines.append(line)
        }
        let now = clock.now()
        let text = lines.joined(separator: "\n")
        let count = Int64(lines.count)
        let id = try await database.storage.write { db -> Int64 in
            let recent =
                try await db.fetchOne(
                    "SELECT COUNT(*) FROM deviceLogs WHERE device = ? AND receivedAt > ?", device,
                    now.addingTimeInterval(-86_400))?[0].integer ?? 0
            guard recent < Self.dailyLogUploads else {
                throw ServerError(
                    .tooManyRequests, "TooManyRequests",
                    "This device sent \(Self.dailyLogUploads) logs in the last 24 hours; try again later.")
            }
            // Only the log an admin asked for settles the order.
            if reason == "requested" {
                try await db.execute("UPDATE devices SET logsRequestedAt = NULL WHERE id = ?", device)
            }
            let id =
                try await db.fetchOne(
                    """
                    INSERT INTO deviceLogs (device, uploader, reason, receivedAt, lineCount, lines)
                    VALUES (?, ?, ?, ?, ?, ?) RETURNING id
                    """, device, uploader, reason, now, count, text)?[0].integer ?? 0
            try await db.execute(
                """
                DELETE FROM deviceLogs WHERE device = ? AND id NOT IN (
                    SELECT id FROM deviceLogs WHERE device = ? ORDER BY id DESC LIMIT ?)
                """, device, device, Self.keptLogUploads)
            return id
        }
        return LogUpload(
            id: id, device: device, uploader: uploader, reason: reason, receivedAt: now, lineCount: lines.count,
            lines: [])
    }

    /// Orders `device` to send its log at its next contact.
    ///
    /// - Throws: ``ServerError`` 404 for an unknown device.
    public func requestLogs(device: String) async throws {
        let now = clock.now()
        let changed = try await database.storage.write { db in
            try await db.execute("UPDATE devices SET logsRequestedAt = ? WHERE id = ?", now, device)
        }
        guard changed > 0 else { throw ServerError.notFound("No device '\(device.prefix(scalars: 128))'.") }
    }

    /// Whether an order for the device's log is pending.
    public func logsRequested(device: String) async throws -> Bool {
        try await database.storage.read { db in
            try await db.fetchOne("SELECT logsRequestedAt FROM devices WHERE id = ?", device)?["logsRequestedAt"]
                ?? .null
        } != .null
    }

    /// Every device that sent something or has an order pending, by device id.
    public func telemetrySummaries() async throws -> [TelemetrySummary] {
        try await database.storage.read { db in
            try await db.fetchAll(
                """
                SELECT d.id AS device,
                    (SELECT COUNT(*) FROM deviceLogs l WHERE l.device = d.id) AS uploads,
                    (SELECT MAX(receivedAt) FROM deviceLogs l WHERE l.device = d.id) AS lastLogAt,
                    (SELECT COUNT(*) FROM usageEvents u WHERE u.device = d.id) AS events,
                    d.logsRequestedAt
                FROM devices d ORDER BY d.id
                """
            ).compactMap { row in
                let summary = TelemetrySummary(
                    device: row["device"].text ?? "", logUploads: Int(row["uploads"].integer ?? 0),
                    lastLogAt: row["lastLogAt"].date, usageEvents: Int(row["events"].integer ?? 0),
                    logsRequested: row["logsRequestedAt"] != .null)
                return summary.logUploads + summary.usageEvents > 0 || summary.logsRequested ? summary : nil
            }
        }
    }

    /// A device's newest log uploads (at most `limit`), newest first, with their lines.
    public func logs(device: String, limit: Int = keptLogUploads) async throws -> [LogUpload] {
        try await database.storage.read { db in
            try await db.fetchAll(
                """
                SELECT id, uploader, reason, receivedAt, lineCount, lines FROM deviceLogs WHERE device = ?
                ORDER BY id DESC LIMIT ?
                """, device, limit
            ).map { row in
                LogUpload(
                    id: row["id"].integer ?? 0, device: device, uploader: row["uploader"].text ?? "",
                    reason: row["reason"].text ?? "", receivedAt: row["receivedAt"].date ?? .distantPast,
                    lineCount: Int(row["lineCount"].integer ?? 0),
                    lines: (row["lines"].text ?? "").split(separator: "\n", omittingEmptySubsequences: false).map(
                        String.init))
            }
        }
    }

    /// A device's newest usage events (at most `limit`), oldest first.
    public func usage(device: String, limit: Int = keptUsageEvents) async throws -> [UsageEvent] {
        try await database.storage.read { db in
            try await db.fetchAll(
                """
                SELECT * FROM (SELECT id, at, name, count, durationMs, code FROM usageEvents WHERE device = ?
                ORDER BY at DESC, id DESC LIMIT ?) newest ORDER BY at, id
                """, device, limit
            ).map { row in
                UsageEvent(
                    id: row["id"].text ?? "", device: device, at: row["at"].date ?? .distantPast,
                    name: row["name"].text ?? "", count: row["count"].integer.map(Int.init),
                    durationMs: row["durationMs"].integer.map(Int.init), code: row["code"].text)
            }
        }
    }
}
