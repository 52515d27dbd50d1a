import BatonSQL
import Foundation
import Synchronization

/// The audit entries of data changes, written in each change's own transaction into the data database
/// (`$auditOutbox`, see ``DataStore/auditOutbox``) so that a crash between the two databases loses none, then
/// recorded in the audit log (``AuditLog/record(staged:outbox:)``). Entries the log holds are deleted from the
/// outbox in the next change's transaction (no transaction of their own); what a crash leaves behind, or a
/// failed commit of that deletion, is moved at the next start (``AuditLog/collect(from:)``), and the log
/// adds an entry it has already once. Entries the log could not take (its database was away) are moved by the
/// next change whose entries it takes.
///
/// On PostgreSQL the log and the data are one database: ``writesTheLog`` is then set, a change's entries go into
/// the log in the change's own transaction, and the outbox only holds what an earlier version left.
final class AuditOutbox: Sendable {
    /// Whether ``stage(_:in:)`` writes the audit log itself, in the change's transaction (the log is in the
    /// same database as the data).
    let writesTheLog: Bool
    private let recordedKeys = Mutex<[String]>([])
    /// Keys are this process's random prefix and a counter: unique in the log across restarts, and cheap (a
    /// random UUID per entry cost a third of a batch).
    private let prefix = UUID().uuidString
    private let counter = Atomic<Int>(0)
    private let backlog = Atomic<Bool>(false)

    private static let table = "\"\(DataStore.auditOutbox)\""

    init(writesTheLog: Bool = false) {
        self.writesTheLog = writesTheLog
    }

    /// Gives each entry its outbox key and writes it, inside the change's transaction; first deletes the
    /// entries the log has recorded since the last change. With ``writesTheLog``, writes them to the log instead.
    func stage(_ entries: inout [AuditEntry], in db: any SQLConnection) async throws {
        // One database: the log takes them in this transaction; there is nothing to move afterwards.
        if writesTheLog { return try await AuditLog.insert(entries, in: db) }
        let recorded = recordedKeys.withLock { keys in
            defer { keys.removeAll(keepingCapacity: true) }
            return keys
        }
        try await Self.delete(recorded, in: db)
        guard !entries.isEmpty else { return }
        for index in entries.indices {
            entries[index].outboxKey = prefix + ":" + String(counter.add(1, ordering: .relaxed).newValue)
        }
        // Many rows a statement, in the entries' order (the outbox is read back in insertion order).
        try await db.insert(
            into: Self.table, columns: ["key", "at", "actor", "action", "subject", "address", "detail"],
            rows: entries.map { entry in
                [
                    entry.outboxKey.sqlValue, entry.at.sqlValue, entry.actor.sqlValue, entry.action.sqlValue,
                    entry.subject.sqlValue, entry.address.sqlValue, entry.detail.sqlValue,
                ]
            }, rowsPerInsert: AuditLog.rowsPerInsert)
    }

    /// Notes that entries of committed changes could not be recorded: they wait in the outbox.
    func noteBacklog() {
        // Nothing waits when the entries went into the log with the change.
        guard !writesTheLog else { return }
        backlog.store(true, ordering: .relaxed)
    }

    /// Whether entries wait in the outbox since a failed record; clears the note.
    func takeBacklog() -> Bool {
        backlog.exchange(false, ordering: .relaxed)
    }

    /// Notes entries the audit log now holds, for deletion with the next change.
    func recorded(_ keys: [String]) {
        recordedKeys.withLock { $0 += keys }
    }

    /// Every entry in the outbox, oldest first, with its key.
    static func pending(in db: any SQLConnection) async throws -> [AuditEntry] {
        try await db.fetchAll(
            "SELECT key, at, actor, action, subject, address, detail FROM \(table) ORDER BY \(db.dialect == .sqlite ? "rowid" : "ordinal")"
        ).map {
            row in
            var entry = AuditEntry(
                at: row["at"].date ?? .distantPast, actor: row["actor"].text, action: row["action"].text ?? "",
                subject: row["subject"].text, address: row["address"].text, detail: row["detail"].text)
            entry.outboxKey = row["key"].text
            return entry
        }
    }

    /// Deletes entries by key, up to ``AuditLog/rowsPerInsert`` a statement: one statement a key made a 100-change
    /// batch run a hundred deletes besides its hundred updates.
    static func delete(_ keys: [String], in db: any SQLConnection) async throws {
        for start in stride(from: 0, to: keys.count, by: AuditLog.rowsPerInsert) {
            let chunk = keys[start..<min(keys.count, start + AuditLog.rowsPerInsert)]
            try await db.execute(
                "DELETE FROM \(table) WHERE key IN ("
                    + Array(repeating: "?", count: chunk.count).joined(separator: ", ")
                    + ")", chunk.map(SQLValue.text))
        }
    }
}
