import Foundation
import GRDB
import Synchronization

/// The audit entries of data changes, written in each change's own transaction into the data database
/// (`$auditOutbox`, see ``DataStore/auditOutbox``) so that a crash between the two databases loses none, then
/// recorded in the audit log (``AuditLog/record(staged:outbox:)``). Entries the log holds are deleted from the
/// outbox in the next change's transaction (no transaction of their own); what a crash leaves behind, or a
/// failed commit of that deletion, is moved at the next start (``AuditLog/collect(from:outbox:)``), and the log
/// adds an entry it has already once.
final class AuditOutbox: Sendable {
    private let recordedKeys = Mutex<[String]>([])
    /// Keys are this process's random prefix and a counter: unique in the log across restarts, and cheap (a
    /// random UUID per entry cost a third of a batch).
    private let prefix = UUID().uuidString
    private let counter = Atomic<Int>(0)

    private static let table = "\"\(DataStore.auditOutbox)\""

    /// Gives each entry its outbox key and writes it, inside the change's transaction; first deletes the
    /// entries the log has recorded since the last change.
    func stage(_ entries: inout [AuditEntry], in db: Database) throws {
        let recorded = recordedKeys.withLock { keys in
            defer { keys.removeAll(keepingCapacity: true) }
            return keys
        }
        try Self.delete(recorded, in: db)
        guard !entries.isEmpty else { return }
        let insert = try db.cachedStatement(
            sql:
                "INSERT INTO \(Self.table) (key, at, actor, action, subject, address, detail) VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
        for index in entries.indices {
            let key = prefix + ":" + String(counter.add(1, ordering: .relaxed).newValue)
            entries[index].outboxKey = key
            let entry = entries[index]
            try insert.execute(
                arguments: [
                    key, entry.at.timeIntervalSince1970, entry.actor, entry.action, entry.subject, entry.address,
                    entry.detail,
                ])
        }
    }

    /// Notes entries the audit log now holds, for deletion with the next change.
    func recorded(_ keys: [String]) {
        recordedKeys.withLock { $0 += keys }
    }

    /// Every entry in the outbox, oldest first, with its key.
    static func pending(in db: Database) throws -> [AuditEntry] {
        try Row.fetchAll(
            db, sql: "SELECT key, at, actor, action, subject, address, detail FROM \(table) ORDER BY rowid"
        ).map { row in
            var entry = AuditEntry(
                at: row["at"], actor: row["actor"], action: row["action"], subject: row["subject"],
                address: row["address"], detail: row["detail"])
            entry.outboxKey = row["key"]
            return entry
        }
    }

    /// Deletes entries by key.
    static func delete(_ keys: [String], in db: Database) throws {
        guard !keys.isEmpty else { return }
        let statement = try db.cachedStatement(sql: "DELETE FROM \(table) WHERE key = ?")
        for key in keys { try statement.execute(arguments: [key]) }
    }
}
