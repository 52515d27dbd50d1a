import Foundation
import Logging

/// A swift-log handler that writes one JSON object per line, for log collectors (Loki, Elasticsearch, CloudWatch):
/// `timestamp` (ISO 8601, UTC, milliseconds), `level`, `label`, `message`, `source`, and every metadata key at the
/// top level (`trace_id`, `span_id`, `duration_ms`, …), nested metadata as JSON objects and arrays, numbers
/// logged as numbers (`.stringConvertible` of an `Int` or a `Double`) as JSON numbers.
///
/// `baton-server serve --log-format json` bootstraps it. A metadata key that would replace one of the fixed keys
/// is written as `metadata.KEY` instead, so no log statement can forge a line's level or message.
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public var metadataProvider: Logger.MetadataProvider?
    let label: String
    let write: @Sendable (Data) -> Void

    /// A handler for `label` that hands each line (ending in `\n`) to `write`.
    public init(
        label: String, metadataProvider: Logger.MetadataProvider? = nil,
        write: @escaping @Sendable (Data) -> Void
    ) {
        self.label = label
        self.metadataProvider = metadataProvider
        self.write = write
    }

    /// A handler that writes to standard error, one `write(2)` per line (lines up to 4 KiB, the most a pipe
    /// writes at once, never interleave with those of other requests). A line that cannot be written is lost,
    /// never a crash: a full disk or a closed pipe must not stop the server.
    public static func standardError(label: String, metadataProvider: Logger.MetadataProvider?) -> JSONLogHandler {
        JSONLogHandler(label: label, metadataProvider: metadataProvider) {
            try? FileHandle.standardError.write(contentsOf: $0)
        }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    static let fixedKeys: Set<String> = ["timestamp", "level", "label", "message", "source"]

    public func log(event: LogEvent) {
        var fields: [String: Any] = [
            "timestamp": Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date.now),
            "level": event.level.rawValue,
            "label": label,
            "message": event.message.description,
            "source": event.source,
        ]
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let own = event.metadata { merged.merge(own) { _, new in new } }
        for (key, value) in merged {
            fields[Self.fixedKeys.contains(key) ? "metadata.\(key)" : key] = Self.json(value)
        }
        guard
            var line = try? JSONSerialization.data(
                withJSONObject: fields, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return }
        line.append(UInt8(ascii: "\n"))
        write(line)
    }

    static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let text): text
        case .stringConvertible(let convertible as Int): convertible
        case .stringConvertible(let convertible as Int64): convertible
        case .stringConvertible(let convertible as Double): convertible
        case .stringConvertible(let convertible): convertible.description
        case .array(let values): values.map(json)
        case .dictionary(let dictionary): dictionary.mapValues(json)
        }
    }
}
