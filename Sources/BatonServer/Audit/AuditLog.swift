import Foundation

/// One audit record: who did what, to what, when and from where. Never a secret.
public struct AuditEntry: Sendable, Hashable, Codable {
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
    /// The key of the entry in the data database's audit outbox, for entries of data changes staged there (none
    /// on PostgreSQL, where they go into the log with the change).
    var outboxKey: String?

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
        try await database.storage.write { db in try Self.insert([entry], in: db) }
    }

    /// Records several entries in one transaction (imports, and the benchmark's seeding).
    ///
    /// - Throws: the database error, if the write fails (then none is recorded).
    public func record(contentsOf entries: [AuditEntry]) async throws {
        guard !entries.isEmpty else { return }
        try await database.storage.write { db in try Self.insert(entries, in: db) }
    }

    /// Records the entries of a committed data change, already in the data database's `outbox`, in one
    /// transaction; the outbox drops them with the next change. Adding an entry that is in the log already
    /// does nothing.
    ///
    /// - Throws: the database error, if the write fails (then the entries stay in the outbox, for the next
    ///   start).
    func record(staged entries: [AuditEntry], outbox: AuditOutbox) async throws {
        // Written with the change already when the log is in the data's database.
        guard !entries.isEmpty, !outbox.writesTheLog else { return }
        try await database.storage.write { db in try Self.insert(entries, in: db) }
        outbox.recorded(entries.compactMap(\.outboxKey))
    }

    static func insert(_ entries: [AuditEntry], in db: any SQLConnection) throws {
        for entry in entries {
            try db.execute(
                """
                INSERT INTO audit (at, actor, action, subject, address, detail, outboxKey) VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT DO NOTHING
                """, entry.at, entry.actor, entry.action, entry.subject, entry.address, entry.detail,
                entry.outboxKey)
        }
    }

    /// Moves every entry in the data database's outbox to the log, then empties the outbox: at start-up, for
    /// the entries of changes committed just before a crash. A crash at any point leaves the entries in the
    /// outbox, and moving one again adds it once (its outbox key is unique in the log).
    ///
    /// - Returns: how many entries were moved.
    /// - Throws: the database error, if a read or write fails (the entries stay in the outbox).
    @discardableResult
    func collect(from data: any ServerStorage) async throws -> Int {
        let pending = try await data.read { db in try AuditOutbox.pending(in: db) }
        guard !pending.isEmpty else { return 0 }
        try await database.storage.write { db in try Self.insert(pending, in: db) }
        let keys = pending.compactMap(\.outboxKey)
        try await data.write { db in try AuditOutbox.delete(keys, in: db) }
        return pending.count
    }

    /// The newest entries first.
    ///
    /// - Throws: the database error, if the read fails.
    public func entries(limit: Int = 100) async throws -> [AuditEntry] {
        try await database.storage.read { db in
            try db.fetchAll(
                "SELECT at, actor, action, subject, address, detail, outboxKey FROM audit ORDER BY id DESC LIMIT ?",
                limit
            ).map { row in
                var entry = AuditEntry(
                    at: row["at"].date ?? .distantPast, actor: row["actor"].text, action: row["action"].text ?? "",
                    subject: row["subject"].text, address: row["address"].text, detail: row["detail"].text)
                entry.outboxKey = row["outboxKey"].text
                return entry
            }
        }
    }
}
