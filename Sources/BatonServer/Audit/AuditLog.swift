import Foundation
import GRDB

/// One audit record: who did what, to what, when and from where. Never a secret.
public struct AuditEntry: Sendable, Hashable, Codable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "audit"
    /// When it happened.
    public var at: Date
    /// The user (or `admin` for the command line) who acted, if known.
    public var actor: String?
    /// What happened: `sign-in`, `sign-in-failed`, `token-revoked`, `device-registered`, `settings-changed`, …
    public var action: String
    /// What it happened to (a user, a device, a setting key).
    public var subject: String?
    /// The client address, for requests.
    public var address: String?
    /// More detail; never a secret.
    public var detail: String?

    /// Creates an entry.
    public init(at: Date, actor: String?, action: String, subject: String?, address: String?, detail: String?) {
        self.at = at
        self.actor = actor
        self.action = action
        self.subject = subject
        self.address = address
        self.detail = detail
    }
}

/// Appends to and reads the audit log.
public struct AuditLog: Sendable {
    let database: ServerDatabase

    /// Records an entry.
    ///
    /// - Throws: the database error, if the write fails.
    public func record(_ entry: AuditEntry) async throws {
        try await database.pool.write { db in try entry.insert(db) }
    }

    /// Records entries in one transaction (nothing for none).
    ///
    /// - Throws: the database error, if the write fails (then none is recorded).
    public func record(contentsOf entries: [AuditEntry]) async throws {
        guard !entries.isEmpty else { return }
        try await database.pool.write { db in
            // One prepared statement for all (the record encoder was most of the cost); same columns and
            // values as `entry.insert(db)`.
            let statement = try db.cachedStatement(
                sql: "INSERT INTO audit (at, actor, action, subject, address, detail) VALUES (?, ?, ?, ?, ?, ?)")
            for entry in entries {
                try statement.execute(
                    arguments: [entry.at, entry.actor, entry.action, entry.subject, entry.address, entry.detail])
            }
        }
    }

    /// The newest entries first.
    ///
    /// - Throws: the database error, if the read fails.
    public func entries(limit: Int = 100) async throws -> [AuditEntry] {
        try await database.pool.read { db in
            try AuditEntry.order(Column("id").desc).limit(limit).fetchAll(db)
        }
    }
}
