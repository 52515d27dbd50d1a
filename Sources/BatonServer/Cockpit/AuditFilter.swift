import BatonOData
import BatonSQL
import Foundation

/// The cockpit's audit filters (user, device, action, a range of days in UTC) and its page position, read
/// from a query string; ``problem`` names what is wrong with one, and nothing is searched then.
struct AuditFilter: Sendable {
    var user: String?
    var device: String?
    var action: String?
    var fromText: String?
    var toText: String?
    /// Entries older than this id (the next page).
    var before: Int64?
    var problem: String?

    init(_ parameters: [(Substring, Substring)]) {
        func value(_ name: String) -> String? {
            guard let raw = parameters.first(where: { $0.0 == name })?.1 else { return nil }
            let text = String(raw).trimmingCharacters(in: .whitespaces)
            return text.isEmpty ? nil : text
        }
        user = value("user")
        device = value("device")
        action = value("action")
        fromText = value("from")
        toText = value("to")
        for (name, text) in [("user", user), ("device", device), ("action", action)] {
            // Counted by Unicode scalar: a `Character` holds any number of combining marks.
            if let text, text.unicodeScalars.count > 128 {
                problem = "The \(name) filter has at most 128 characters (Unicode scalars)."
            }
        }
        if let fromText, Self.day(fromText) == nil { problem = "'From' must be a date: YYYY-MM-DD." }
        if let toText, Self.day(toText) == nil { problem = "'To' must be a date: YYYY-MM-DD." }
        if let from = fromText.flatMap(Self.day), let to = toText.flatMap(Self.day), from > to {
            problem = "'From' is after 'to'."
        }
        if let text = value("before") {
            guard let id = Int64(text), id > 0 else {
                problem = "The page position is not valid."
                return
            }
            before = id
        }
    }

    /// The entries the subject index (`auditSubjectOfDevices`) holds: every one but the entity changes, whose subject is
    /// the entity (`PreflightChecks(…)`), not a device. Indexing those took a random page of the index for each
    /// change, which SQLite writes out at every commit: with them, a 100-change batch's audit rows cost 3.5 times
    /// what they cost without (55 against 15 µs a row, in a 100-row insert on this machine). The device filter
    /// repeats this condition word for word, as SQLite needs to use a partial index.
    static let entriesNotOfEntities = "action NOT LIKE 'entity-%'"

    /// Seconds since 1970 of a `YYYY-MM-DD` day's start, UTC.
    static func day(_ text: String) -> Double? {
        guard text.count == 10 else { return nil }
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC") ?? .current
        let parts = text.split(separator: "-").compactMap { Int($0) }
        guard parts.count == 3, (1...9999).contains(parts[0]), (1...12).contains(parts[1]), (1...31).contains(parts[2]),
            let date = calendar.date(from: DateComponents(year: parts[0], month: parts[1], day: parts[2])),
            calendar.component(.day, from: date) == parts[2]
        else { return nil }
        return date.timeIntervalSince1970
    }

    /// The newest `limit` entries that match, newest first.
    func query(limit: Int) -> (String, [SQLValue]) {
        var conditions: [String] = []
        var arguments: [SQLValue] = []
        if let user {
            conditions.append("actor = ?")
            arguments.append(.text(user))
        }
        if let device {
            // In the terms of the subject index's own condition: SQLite reads a partial index only for a query that
            // repeats it (the test checks SQLite's plan; PostgreSQL proves the same condition implied).
            conditions.append("subject = ? AND \(Self.entriesNotOfEntities)")
            arguments.append(.text(device))
        }
        if let action {
            conditions.append("action = ?")
            arguments.append(.text(action))
        }
        if let from = fromText.flatMap(Self.day) {
            conditions.append("at >= ?")
            arguments.append(.real(from))
        }
        if let to = toText.flatMap(Self.day) {
            conditions.append("at < ?")
            arguments.append(.real(to + 86_400))
        }
        if let before {
            conditions.append("id < ?")
            arguments.append(.integer(before))
        }
        arguments.append(.integer(Int64(limit)))
        let filter = conditions.isEmpty ? "" : " WHERE " + conditions.joined(separator: " AND ")
        return (
            "SELECT id, at, actor, action, subject, address, detail, repeats FROM audit\(filter) ORDER BY id DESC LIMIT ?",
            arguments
        )
    }

    /// The filters (and page position) as query items (``CockpitPages/link(_:_:)``).
    var queryItems: [(name: String, value: String?)] {
        [
            ("user", user), ("device", device), ("action", action), ("from", fromText), ("to", toText),
            ("before", before.map(String.init)),
        ]
    }
}

/// One audit entry as the cockpit shows it: an uploaded change's author (`CheckedBy`) and uploader
/// (`UploadedBy`), and whether it was uploaded on the author's behalf.
struct AuditRow: Sendable {
    var id: Int64
    var at: Date
    var actor: String
    var action: String
    var subject: String
    var address: String
    var detail: String
    /// How many events the entry stands for (``AuditEntry/repeats``).
    var repeats: Int
    var checkedBy: String?
    var uploadedBy: String?

    init(row: SQLRow) {
        id = row["id"].integer ?? 0
        at = row["at"].date ?? .distantPast
        actor = row["actor"].text ?? ""
        action = row["action"].text ?? ""
        subject = row["subject"].text ?? ""
        address = row["address"].text ?? ""
        detail = row["detail"].text ?? ""
        repeats = Int(row["repeats"].integer ?? 1)
        if action.hasPrefix("entity-"), detail.hasPrefix("uploaded by ") {
            checkedBy = actor
            uploadedBy = String(detail.dropFirst("uploaded by ".count))
        }
    }

    var onBehalf: Bool { uploadedBy.map { $0 != checkedBy } ?? false }

    var time: String { at.formatted(Self.timeStyle) }

    static let timeStyle = Date.ISO8601FormatStyle()

    var values: [String: Any] {
        [
            "id": id, "at": time, "actor": actor, "action": action, "subject": subject, "address": address,
            "detail": detail, "checkedBy": checkedBy ?? "", "uploadedBy": uploadedBy ?? "", "onBehalf": onBehalf,
            "repeats": repeats > 1 ? "×\(repeats)" : "",
        ]
    }

    /// The rows as CSV (RFC 4180), a header first, each cell through ``Markup/csvCell(_:)``: a cell that a
    /// spreadsheet would take for a formula gets a leading `'`, since audit fields hold what users typed.
    static func csv(_ rows: [AuditRow]) -> String {
        var text = "id,at,actor,action,subject,address,detail,checked_by,uploaded_by,on_behalf,repeats\r\n"
        for row in rows {
            let cells = [
                String(row.id), row.time, row.actor, row.action, row.subject, row.address, row.detail,
                row.checkedBy ?? "", row.uploadedBy ?? "", row.onBehalf ? "yes" : "no", String(row.repeats),
            ]
            text += cells.map(Markup.csvCell).joined(separator: ",") + "\r\n"
        }
        return text
    }

}
