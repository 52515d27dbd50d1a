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
    /// How many events this entry stands for: more than 1 for events counted per minute rather than kept one by
    /// one (refused changes, store-key fetches, re-registrations, revocations: ``AuditLog/recordAggregated(_:)``).
    /// Default: 1.
    public var repeats = 1
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
        try await database.storage.write { db in try await Self.insert([entry], in: db) }
    }

    /// Records several entries in one transaction (imports, and the benchmark's seeding).
    ///
    /// - Throws: the database error, if the write fails (then none is recorded).
    public func record(contentsOf entries: [AuditEntry]) async throws {
        guard !entries.isEmpty else { return }
        try await database.storage.write { db in try await Self.insert(entries, in: db) }
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
        try await database.storage.write { db in try await Self.insert(entries, in: db) }
        outbox.recorded(entries.compactMap(\.outboxKey))
    }

    /// Records entries that are counted rather than kept one by one: the first entry of each `key` is kept in
    /// full, and each later one with the same key adds 1 to its ``AuditEntry/repeats``. What a loop of refused
    /// requests adds to the log is then bounded by its keys (one uploader, code and minute), not its rate.
    ///
    /// - Throws: the database error, if the write fails (then none is recorded).
    public func recordAggregated(_ entries: [(entry: AuditEntry, key: String)]) async throws {
        guard !entries.isEmpty else { return }
        try await database.storage.write { db in
            for (entry, key) in entries {
                try await db.execute(
                    """
                    INSERT INTO audit (at, actor, action, subject, address, detail, aggregateKey) VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT (aggregateKey) WHERE aggregateKey IS NOT NULL DO UPDATE SET repeats = audit.repeats + 1
                    """, entry.at, entry.actor, entry.action, entry.subject, entry.address, entry.detail, key)
            }
        }
    }

    /// Records `entry` counted per actor, action, subject, network and minute (``recordAggregated(_:)``): for what
    /// any account may ask for in a loop (a store key, a re-registration, revoking a token), so the log grows with
    /// the minutes, not the request rate.
    ///
    /// - Throws: the database error, if the write fails.
    public func recordCounted(_ entry: AuditEntry) async throws {
        // Not the detail (a new key id each time would defeat the count), and an address by its network (an IPv6
        // client may take a new address for every request).
        let key = Self.countingKey(
            [
                entry.action, entry.actor ?? "", entry.subject ?? "",
                entry.address.map(DeviceAuthorizations.network(of:)) ?? "",
            ],
            at: entry.at)
        try await recordAggregated([(entry, key)])
    }

    /// The key entries are counted under (``recordAggregated(_:)``): `parts` and the minute of `at`.
    static func countingKey(_ parts: [String], at: Date) -> String {
        (parts + [String(Int64((at.timeIntervalSince1970 / 60).rounded(.down)))]).joined(separator: "\n")
    }

    /// Deletes the entries older than `cutoff`, in batches of `batch` (each its own short transaction, so a
    /// large prune never holds the log), and records that it did.
    ///
    /// - Returns: how many entries were deleted.
    /// - Throws: the database error of a failed batch (the batches before it stay deleted).
    @discardableResult
    public func prune(before cutoff: Date, actor: String, at now: Date = Date(), batch: Int = 5_000) async throws
        -> Int
    {
        var deleted = 0
        while true {
            let removed = try await database.storage.write { db in
                try await db.execute(
                    "DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE at < ? ORDER BY id LIMIT ?)", cutoff,
                    batch)
            }
            deleted += removed
            if removed < batch { break }
        }
        if deleted > 0 {
            try await record(
                AuditEntry(
                    at: now, actor: actor, action: "audit-pruned", subject: nil, address: nil,
                    detail: "\(deleted) entries from before \(cutoff.formatted(.iso8601))"))
        }
        return deleted
    }

    /// Prunes what the setting `audit.retention-days` (default 400) no longer keeps (``prune(before:actor:at:batch:)``).
    @discardableResult
    public func prune(settings: SettingsStore, now: Date, actor: String) async throws -> Int {
        let days = try await settings.current().audit.retentionDays
        return try await prune(before: now.addingTimeInterval(-Double(days) * 86_400), actor: actor, at: now)
    }

    static func insert(_ entries: [AuditEntry], in db: any SQLConnection) async throws {
        // Many rows a statement: a 100-change batch's entries cost PostgreSQL one round trip, not a hundred.
        try await db.insert(
            into: "audit", columns: ["at", "actor", "action", "subject", "address", "detail", "outboxKey"],
            rows: entries.map { entry in
                [
                    entry.at.sqlValue, entry.actor.sqlValue, entry.action.sqlValue, entry.subject.sqlValue,
                    entry.address.sqlValue, entry.detail.sqlValue, entry.outboxKey.sqlValue,
                ]
            }, suffix: " ON CONFLICT DO NOTHING", rowsPerInsert: rowsPerInsert)
    }

    /// How many entries one `INSERT` writes at most (7 arguments each, far below either engine's limit).
    static let rowsPerInsert = 100

    /// Moves every entry in the data database's outbox to the log, then empties the outbox: at start-up, for
    /// the entries of changes committed just before a crash. A crash at any point leaves the entries in the
    /// outbox, and moving one again adds it once (its outbox key is unique in the log).
    ///
    /// - Returns: how many entries were moved.
    /// - Throws: the database error, if a read or write fails (the entries stay in the outbox).
    @discardableResult
    func collect(from data: any ServerStorage) async throws -> Int {
        let pending = try await data.read { db in try await AuditOutbox.pending(in: db) }
        guard !pending.isEmpty else { return 0 }
        try await database.storage.write { db in try await Self.insert(pending, in: db) }
        let keys = pending.compactMap(\.outboxKey)
        try await data.write { db in try await AuditOutbox.delete(keys, in: db) }
        return pending.count
    }

    /// The newest entries first.
    ///
    /// - Throws: the database error, if the read fails.
    public func entries(limit: Int = 100) async throws -> [AuditEntry] {
        try await database.storage.read { db in
            try await db.fetchAll(
                """
                SELECT at, actor, action, subject, address, detail, outboxKey, repeats FROM audit
                ORDER BY id DESC LIMIT ?
                """, limit
            ).map { row in
                var entry = AuditEntry(
                    at: row["at"].date ?? .distantPast, actor: row["actor"].text, action: row["action"].text ?? "",
                    subject: row["subject"].text, address: row["address"].text, detail: row["detail"].text)
                entry.outboxKey = row["outboxKey"].text
                entry.repeats = Int(row["repeats"].integer ?? 1)
                return entry
            }
        }
    }
}
