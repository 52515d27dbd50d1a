import BatonClient
import BatonOData
import Crypto
import Foundation
import Logging

/// The device's own log: swift-log lines kept sealed in a bounded, rotating file (``SealedRecordFile``) under a
/// key derived from the device key, sent to the server when it asks (a setting, or an admin's order for this
/// device) or when the person sends it to support.
///
/// What goes in is what the app logs, so the app logs events and codes: never a passcode, password, token or
/// entity value (the tests scan uploaded logs for the secrets they used).
public struct DeviceLog: Sendable {
    public let file: SealedRecordFile

    static let purpose = "baton-device-log-v1"

    /// The log of the device in `storage` (256 KiB per file, two files).
    public init(storage: DeviceStorage, maxBytes: Int = 256 * 1024) throws(FlowsError) {
        file = SealedRecordFile(
            url: storage.logURL, key: try storage.sealingKey(for: Self.purpose), purpose: Self.purpose,
            maxBytes: maxBytes)
    }

    /// A swift-log handler writing to this log.
    public func handler(label: String, level: Logger.Level = .info) -> DeviceLogHandler {
        var handler = DeviceLogHandler(label: label, file: file)
        handler.logLevel = level
        return handler
    }

    /// Every line kept, oldest first.
    public func lines() throws(FlowsError) -> [String] {
        try file.records().map { String(decoding: $0, as: UTF8.self) }
    }

    /// Sends the lines kept to the server for `reason` (`support`, `requested`, `setting`) with `session`'s
    /// token and the device's proof (signed with the device key in the session), then forgets them. Returns how
    /// many were sent.
    ///
    /// - Throws: ``FlowsError`` `stepFailed` when the session holds no device key (nothing is forgotten).
    @discardableResult
    public func send(reason: String, session: OnboardingSession) async throws(FlowsError) -> Int {
        var sent = 0
        try await file.drain { records throws(FlowsError) in
            let lines = records.map { String(decoding: $0, as: UTF8.self) }
            guard !lines.isEmpty else { return }
            try await Self.upload(lines, reason: reason, session: session)
            sent = lines.count
        }
        return sent
    }

    static func upload(_ lines: [String], reason: String, session: OnboardingSession) async throws(FlowsError) {
        let key = try deviceKey(of: session)
        do {
            for part in parts(of: lines) {
                try await session.authorized.sendLogs(
                    deviceID: session.deviceID, reason: reason, lines: part, deviceKey: key)
            }
        } catch {
            throw flowsError(error, doing: "send the device's log")
        }
    }

    /// The device key from `session`'s secure store: uploads for the device are signed with it.
    ///
    /// - Throws: ``FlowsError`` `StepFailed` for a user onboarded before device keys (nothing is sent or forgotten).
    static func deviceKey(of session: OnboardingSession) throws(FlowsError) -> P256.Signing.PrivateKey {
        guard let raw = session.info[.deviceKey], let key = try? P256.Signing.PrivateKey(rawRepresentation: raw) else {
            throw FlowsError(
                .stepFailed, "\(session.user.displayName)'s secure store holds no device key; another user sends it.")
        }
        return key
    }

    /// The lines in parts that each fit one request (the server takes bodies up to 64 KiB).
    static func parts(of lines: [String], budget: Int = 48 * 1024) -> [[String]] {
        var parts: [[String]] = []
        var part: [String] = []
        var size = 0
        for line in lines {
            // JSON escaping can double a line's bytes at worst (quotes, control characters as \uXXXX are rare).
            let cost = line.utf8.count * 2 + 4
            if !part.isEmpty, size + cost > budget || part.count == 5_000 {
                parts.append(part)
                part = []
                size = 0
            }
            part.append(line)
            size += cost
        }
        if !part.isEmpty { parts.append(part) }
        return parts
    }
}

/// Writes swift-log lines to a ``DeviceLog``: `2026-11-24T07:00:00.123Z info baton.sync: message key=value`.
public struct DeviceLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    let label: String
    let file: SealedRecordFile

    init(label: String, file: SealedRecordFile) {
        self.label = label
        self.file = file
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let own = event.metadata { merged.merge(own) { _, new in new } }
        var line = Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date.now)
        line += " \(event.level.rawValue) \(label): \(event.message)"
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) { line += " \(key)=\(value)" }
        // One line per record, bounded, without control characters: a log line never carries a payload, and
        // nothing in it can move a terminal's cursor when an admin reads it.
        let flat = String(
            String(line.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : Character($0) })
                .prefix(2_000))
        try? file.append(Data(flat.utf8))
    }
}

/// The device's usage events, kept sealed until the next sync sends them (`UsageEvent`). Nothing is recorded
/// for a user who did not agree to usage data, nor when the server does not collect it.
public struct UsageRecorder: Sendable {
    public let file: SealedRecordFile

    static let purpose = "baton-usage-v1"

    /// The events of the device in `storage` (64 KiB per file, two files: the oldest go first).
    public init(storage: DeviceStorage, maxBytes: Int = 64 * 1024) throws(FlowsError) {
        file = SealedRecordFile(
            url: storage.usageURL, key: try storage.sealingKey(for: Self.purpose), purpose: Self.purpose,
            maxBytes: maxBytes)
    }

    /// Whether usage is recorded: the user agreed to usage data (``OnboardingSessionManager/consent``) and the
    /// server collects it.
    public static func allowed(consent: Consent?, settings: ClientSettings) -> Bool {
        settings.telemetry.usage && consent?.agreed(to: .usage) == true
    }

    /// Records `event` now.
    public func record(_ event: UsageEvent) throws(FlowsError) {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        guard let data = try? encoder.encode(event) else { return }
        try file.append(data)
    }

    /// The events waiting, oldest first.
    public func pending() throws(FlowsError) -> [UsageEvent] {
        Self.decode(try file.records())
    }

    /// Sends the waiting events with `session`'s token and the device's proof, then forgets them. Returns how many
    /// were sent.
    ///
    /// - Throws: ``FlowsError`` `stepFailed` when the session holds no device key (nothing is forgotten).
    @discardableResult
    public func send(session: OnboardingSession) async throws(FlowsError) -> Int {
        var sent = 0
        try await file.drain { records throws(FlowsError) in
            let events = Self.decode(records)
            try await Self.upload(events, session: session)
            sent = events.count
        }
        return sent
    }

    /// Sends in batches of 400 (well within the server's 64 KiB body limit); a batch sent again (its answer
    /// lost) adds nothing, since the server keeps each event id once.
    static func upload(_ events: [UsageEvent], session: OnboardingSession) async throws(FlowsError) {
        let key = try DeviceLog.deviceKey(of: session)
        do {
            for batch in stride(from: 0, to: events.count, by: 400) {
                try await session.authorized.sendUsage(
                    deviceID: session.deviceID, events: Array(events[batch..<min(batch + 400, events.count)]),
                    deviceKey: key)
            }
        } catch {
            throw flowsError(error, doing: "send usage events")
        }
    }

    static func decode(_ records: [Data]) -> [UsageEvent] {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return records.compactMap { try? decoder.decode(UsageEvent.self, from: $0) }
    }
}
