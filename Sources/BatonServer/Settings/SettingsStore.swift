import BatonOData
import Foundation

/// Reads and writes the settings document.
public struct SettingsStore: Sendable {
    let database: ServerDatabase

    /// The current settings (the defaults until someone changes one).
    ///
    /// - Throws: the database error, or a decoding error if the stored document is damaged.
    public func current() async throws -> ServerSettings {
        try await database.storage.read { db in try await Self.current(in: db) }
    }

    /// Changes one setting and returns the new settings. The document is read and written in one transaction,
    /// so two changes at once (from two instances, or an admin command) both take effect.
    ///
    /// - Throws: ``ServerError`` (400) for an unknown key or a bad value; nothing is stored then.
    public func set(_ key: String, to value: String) async throws -> ServerSettings {
        try await database.storage.write { db in
            var settings = try await Self.current(in: db)
            try settings.set(key, to: value)
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let document = String(decoding: try encoder.encode(settings), as: UTF8.self)
            try await db.execute(
                "INSERT INTO settings (id, document) VALUES (1, ?) ON CONFLICT(id) DO UPDATE SET document = excluded.document",
                document)
            return settings
        }
    }

    static func current(in db: any SQLConnection) async throws -> ServerSettings {
        guard let document = try await db.fetchOne("SELECT document FROM settings WHERE id = 1")?["document"].text
        else {
            return ServerSettings()
        }
        return try JSONDecoder().decode(ServerSettings.self, from: Data(document.utf8))
    }
}
