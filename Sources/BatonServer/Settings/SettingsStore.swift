import Foundation
import GRDB

/// Reads and writes the settings document.
public struct SettingsStore: Sendable {
    let database: ServerDatabase

    /// The current settings (the defaults until someone changes one).
    ///
    /// - Throws: the database error, or a decoding error if the stored document is damaged.
    public func current() async throws -> ServerSettings {
        let document = try await database.pool.read { db in
            try String.fetchOne(db, sql: "SELECT document FROM settings WHERE id = 1")
        }
        guard let document else { return ServerSettings() }
        return try JSONDecoder().decode(ServerSettings.self, from: Data(document.utf8))
    }

    /// Changes one setting and returns the new settings.
    ///
    /// - Throws: ``ServerError`` (400) for an unknown key or a bad value; nothing is stored then.
    public func set(_ key: String, to value: String) async throws -> ServerSettings {
        var settings = try await current()
        try settings.set(key, to: value)
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let document = String(decoding: try encoder.encode(settings), as: UTF8.self)
        try await database.pool.write { db in
            try db.execute(
                sql:
                    "INSERT INTO settings (id, document) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET document = excluded.document",
                arguments: [document])
        }
        return settings
    }
}
