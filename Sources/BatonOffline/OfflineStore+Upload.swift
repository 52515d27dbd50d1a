import BatonClient
import BatonOData
import BatonSQL
import BatonSQLGRDB
import Foundation
import GRDB

/// What an upload did, entry by entry.
public struct UploadReport: Sendable {
    /// Applied on the server (including replays of changes it had already applied).
    public var uploaded: [QueueEntry] = []
    /// Refused by the server and moved to the error archive.
    public var archived: [ArchiveEntry] = []
    /// Still queued: another author's changes the settings do not let this user upload, and changes behind an
    /// archived change to the same entity.
    public var waiting: [QueueEntry] = []

    /// Uploaded changes per author.
    public var uploadedByAuthor: [String: Int] {
        uploaded.reduce(into: [:]) { counts, entry in counts[entry.author, default: 0] += 1 }
    }

    /// True only when every queued change reached the server.
    public var isComplete: Bool { archived.isEmpty && waiting.isEmpty }

    /// This report with `waiting` in place of its own (what a later pass left waiting).
    func merged(waiting: [QueueEntry]) -> UploadReport {
        var report = self
        report.waiting = waiting
        return report
    }
    /// An empty report (nothing uploaded yet).
    public init() {}
}

extension OfflineStore {

    /// Uploads queued changes in JSON `$batch`es with the current user's token. Other authors' changes carry
    /// their signature (`Baton-Author`) when `allowOnBehalf`; otherwise they wait for their author, without
    /// holding anyone else's back. Each change keeps its request id across retries, so it applies exactly
    /// once. A change the server refuses moves to the error archive with the server's reason; later changes
    /// to the same entity wait behind it; other entities go on.
    ///
    /// - Throws: ``OfflineError`` `Offline` when the server cannot be reached before anything went (nothing is
    ///   lost: what was not confirmed stays queued), `Server` for a refused session. When the server stops
    ///   answering after some changes went, the report says which, and the rest is in `waiting`.
    ///
    /// - Parameters:
    ///   - session: the signed-in user's connection.
    ///   - allowOnBehalf: whether the settings let this user upload other authors' changes.
    ///   - chunkSize: the most changes in one `$batch`.
    /// - Returns: what happened to each change.
    public func upload(using session: AuthorizedSession, allowOnBehalf: Bool, chunkSize: Int = 100)
        async throws(OfflineError) -> UploadReport
    {
        let user = try requireUser()
        var report = UploadReport()
        let total = try read { db in try Int.fetchOne(db, sql: #"SELECT COUNT(*) FROM "$queue""#) ?? 0 }
        self.report(.upload(done: 0, total: total))
        // Two batches in flight: while the server applies one, the next is chosen, sent and parsed. The second
        // never holds a change to an entity the first has (each change builds on the ETag the one before got).
        var inFlight: (chosen: [QueueEntry], answer: Task<Result<[String: BatchResponse], OfflineError>, Never>)?
        // The server may have switched on-behalf uploads off since the device last heard: its refusal makes other
        // authors' changes wait for them (as the setting would), not go to the error archive.
        var allowOnBehalf = allowOnBehalf
        while true {
            let busy = Set(inFlight?.chosen.map(\.entityID) ?? [])
            let chosen = try nextChunk(for: user, allowOnBehalf: allowOnBehalf, chunkSize: chunkSize, excluding: busy)
            var next: (chosen: [QueueEntry], answer: Task<Result<[String: BatchResponse], OfflineError>, Never>)?
            if !chosen.isEmpty {
                try markFirstSent(chosen)
                next = (chosen, Task { await self.sendCatching(chosen, user: user, session: session) })
            }
            guard let current = inFlight else {
                guard let next else { break }
                inFlight = next
                continue
            }
            inFlight = next
            let responses: [String: BatchResponse]
            switch await current.answer.value {
            case .success(let answers): responses = answers
            case .failure(let error):
                // Whatever the other batch did is confirmed by its replay next time (same request ids).
                _ = await next?.answer.value
                return try partial(report, failure: error)
            }
            let retryLater = try await record(
                current.chosen, responses: responses, session: session, into: &report, allowOnBehalf: &allowOnBehalf)
            self.report(.upload(done: report.uploaded.count + report.archived.count, total: total))
            if retryLater {
                if let next, case .success(let answers) = await next.answer.value {
                    _ = try await record(
                        next.chosen, responses: answers, session: session, into: &report, allowOnBehalf: &allowOnBehalf)
                }
                break
            }
        }
        // Photos go once the changes before them have: their checks first.
        let photos: (retryLater: Bool, uploaded: Int)
        do {
            photos = try await uploadPhotos(user: user, session: session, allowOnBehalf: allowOnBehalf, into: &report)
        } catch {
            return try partial(report, failure: error)
        }
        if !photos.retryLater, photos.uploaded > 0,
            try !nextChunk(for: user, allowOnBehalf: allowOnBehalf, chunkSize: 1).isEmpty
        {
            // Changes queued behind an uploaded photo (to its entity) may go now.
            let more = try await upload(using: session, allowOnBehalf: allowOnBehalf, chunkSize: chunkSize)
            report.uploaded += more.uploaded
            report.archived += more.archived
            return report.merged(waiting: more.waiting)
        }
        // What is left waits: other authors' changes (not allowed here, or refused by the server on their behalf —
        // a photo's refusal too), and changes behind an archived one. Whatever is still queued was not sent.
        report.waiting = try pendingEntries()
        return report
    }

    /// An upload the server stopped answering midway: what it applied and archived so far is reported, the rest
    /// waits for the next upload; with nothing done yet, `failure` is thrown.
    func partial(_ report: UploadReport, failure: OfflineError) throws(OfflineError) -> UploadReport {
        guard !report.uploaded.isEmpty || !report.archived.isEmpty else { throw failure }
        var report = report
        report.waiting = try pendingEntries()
        return report
    }

    /// Records the server's answers to a batch: applied changes leave the queue, refused ones go to the error
    /// archive. Returns whether some changes must wait for a later upload (no answer, or a temporary failure).
    func record(
        _ chosen: [QueueEntry], responses: [String: BatchResponse], session: AuthorizedSession,
        into report: inout UploadReport, allowOnBehalf: inout Bool
    ) async throws(OfflineError) -> Bool {
        var retryLater = false
        var succeeded: [(entry: QueueEntry, response: BatchResponse)] = []
        for entry in chosen {
            let response = responses[String(entry.sequence)]
            let code = response?.body?["error"]?["code"]?.stringValue
            switch ChangeDisposition.of(status: response?.status, code: code, method: entry.method) {
            case .applied:
                if let response { succeeded.append((entry, response)) }
            case .retryLater:
                retryLater = true
            case .waitForAuthor:
                allowOnBehalf = false
            case .archive(let withServerVersion):
                guard let response else { continue }
                let serverVersion =
                    withServerVersion ? try? await fetchServerVersion(entry.entityID, session: session) : nil
                report.archived.append(try archive(entry, response: response, serverVersion: serverVersion))
            }
        }
        try applied(succeeded)
        report.uploaded += succeeded.map(\.entry)
        return retryLater
    }

    func sendCatching(_ entries: [QueueEntry], user: OfflineUser, session: AuthorizedSession) async -> Result<
        [String: BatchResponse], OfflineError
    > {
        do throws(OfflineError) { return .success(try await send(entries, user: user, session: session)) } catch {
            return .failure(error)
        }
    }

    /// The next changes to send, in queue order: at most one per entity (so each builds on the ETag the
    /// previous one returned), none for an entity in `excluding` (in flight), none behind an archived change,
    /// none of another author unless allowed.
    func nextChunk(for user: OfflineUser, allowOnBehalf: Bool, chunkSize: Int, excluding busy: Set<String> = [])
        throws(OfflineError) -> [QueueEntry]
    {
        try read { db in
            let archived = Set(try String.fetchAll(db, sql: #"SELECT DISTINCT entityID FROM "$archive""#))
            var chosen: [QueueEntry] = []
            var seen = busy
            let rows = try Row.fetchCursor(db, sql: #"SELECT * FROM "$queue" ORDER BY seq"#)
            while let row = try rows.next() {
                let entityID: String = row["entityID"]
                let author: String = row["author"]
                defer { seen.insert(entityID) }
                // Changes to a photo's check queued after the photo wait for it: the server judges the photo
                // against the check as it was when the photo was taken.
                if (row["media"] as String?) != nil {
                    seen.formUnion(self.principalIDs(ofQueued: entityID, body: Array(row["body"] as Data)))
                }
                // A photo goes in a request of its own (``uploadPhotos``); changes behind it to its entity wait.
                guard !archived.contains(entityID), author == user.name || allowOnBehalf, !seen.contains(entityID),
                    (row["media"] as String?) == nil
                else { continue }
                chosen.append(try Self.entry(row))
                if chosen.count >= max(1, chunkSize) { break }
            }
            return chosen
        }
    }

    func markFirstSent(_ entries: [QueueEntry]) throws(OfflineError) {
        let now = Self.imfFixdate(now())
        try write { db in
            for entry in entries {
                try db.execute(
                    sql: #"UPDATE "$queue" SET firstSentAt = ? WHERE seq = ? AND firstSentAt IS NULL"#,
                    arguments: [now, entry.sequence])
            }
        }
    }

    func send(_ entries: [QueueEntry], user: OfflineUser, session: AuthorizedSession) async throws(OfflineError)
        -> [String: BatchResponse]
    {
        let firstSent = try read { db in
            try Row.fetchAll(
                db,
                sql:
                    #"SELECT seq, firstSentAt FROM "$queue" WHERE seq IN (\#(entries.map { String($0.sequence) }.joined(separator: ",")))"#
            ).reduce(into: [Int64: String]()) { $0[$1["seq"]] = $1["firstSentAt"] }
        }
        var requests: [BatchRequest] = []
        for entry in entries {
            var headers: [(String, String)] = [
                ("Repeatability-Request-ID", entry.requestID),
                ("Repeatability-First-Sent", firstSent[entry.sequence] ?? Self.imfFixdate(now())),
                // The new ETag is all the device needs now; server-kept values come with the download.
                ("Prefer", "return=minimal"),
            ]
            if !entry.body.isEmpty { headers.append(("Content-Type", "application/json")) }
            if entry.method != "POST" { headers.append(("If-Match", entry.ifMatch ?? "*")) }
            // Every queued change names its device: the server keeps its request id under (author, device), and
            // lets later changes queued here build on the version it makes. Another author's change carries their
            // signature (the uploader's own token proves their own).
            headers.append(("Baton-Device", entry.device))
            if entry.author != user.name {
                headers += [
                    ("Baton-Author", entry.author), ("Baton-Author-Signature", entry.signature),
                    ("Baton-Created-At", entry.createdAt), ("Baton-If-Match", entry.signedIfMatch),
                ]
            }
            let body: JSONValue?
            do { body = entry.body.isEmpty ? nil : try JSONValue(parsing: entry.body) } catch {
                throw OfflineError(.storage, "Queued change \(entry.sequence) has a damaged body.")
            }
            requests.append(
                BatchRequest(
                    id: String(entry.sequence), method: entry.method, url: entry.url, headers: headers, body: body))
        }
        guard let batchURL = URL(string: session.configuration.odataServiceRoot + "$batch") else {
            throw OfflineError(.server, "The server's OData service root is not a URL.")
        }
        let request = ClientRequest(
            method: "POST", url: batchURL,
            headers: [("Content-Type", "application/json"), ("Accept", "application/json")],
            body: JSONBatch.encodeRequests(requests).serializedBytes, timeout: requestTimeout)
        var response: ClientResponse
        var attempt = 1
        while true {
            do {
                response = try await session.send(request)
            } catch {
                throw Self.offlineError(error, doing: "upload changes")
            }
            // The user's other requests fill their share of the server's writers: wait as told, then again (each
            // change keeps its request id, so a change the server did apply meanwhile is not applied twice).
            guard response.status == 429, attempt < Self.busyAttempts else { break }
            attempt += 1
            do {
                try await Task.sleep(for: .seconds(Self.retryAfter(response)))
            } catch {
                throw OfflineError(.offline, "The upload was stopped; the changes stay on this device.")
            }
        }
        guard response.status == 200 else {
            if response.status == 429 || response.status == 503 {
                throw OfflineError(
                    .offline,
                    "The server is busy (HTTP \(response.status)); the changes stay on this device for the next sync.")
            }
            throw OfflineError(
                .server, "The server refused the upload (HTTP \(response.status)); the changes stay queued.")
        }
        do {
            return Dictionary(
                try JSONBatch.decodeResponses(response.body).map { ($0.id, $0) },
                uniquingKeysWith: { first, _ in first })
        } catch {
            throw OfflineError(.server, "The server's batch response cannot be read; the changes stay queued.")
        }
    }

    /// Changes the server applied: they leave the queue, the local rows take the server's ETags (and any
    /// server-kept values the answer carries), and later changes to the same entities build on those ETags — all in one transaction.
    func applied(_ results: [(entry: QueueEntry, response: BatchResponse)]) throws(OfflineError) {
        var updates: [(entry: QueueEntry, etag: String?, update: SQLQuery?)] = []
        for (entry, response) in results {
            let etag = response.header("ETag") ?? response.body?["@odata.etag"]?.stringValue
            let (set, type, key) = try parseID(entry.entityID)
            var values: [String: PrimitiveValue] = [:]
            if entry.method != "DELETE", let body = response.body {
                for property in type.properties where property.isComputed {
                    if let json = body[property.name], let value = try? PrimitiveValue(json: json, for: property) {
                        values[property.name] = value
                    }
                }
            }
            var update: SQLQuery?
            if entry.method != "DELETE" {
                do {
                    update = try translator.update(
                        set.name, key: key, values: values,
                        systemValues: [(Self.etagColumn, etag.map(SQLValue.text) ?? .null)])
                } catch {
                    throw OfflineError(
                        .storage, "Cannot record the server's answer for \(entry.entityID): \(error.message)")
                }
            }
            updates.append((entry, etag, update))
        }
        try write { db in
            for (entry, etag, update) in updates {
                try db.cachedStatement(sql: #"DELETE FROM "$queue" WHERE seq = ?"#).execute(arguments: [entry.sequence])
                // An uploaded photo's bytes stay as cache: no longer pending, evictable.
                if entry.media != nil {
                    try db.execute(
                        sql: #"UPDATE "$mediaInfo" SET pending = 0 WHERE entityID = ?"#, arguments: [entry.entityID])
                }
                // The entity may be gone locally (deleted after this change was queued).
                if let update {
                    try db.cachedStatement(sql: update.sql).execute(arguments: update.statementArguments)
                }
                if let etag {
                    try db.cachedStatement(
                        sql: #"UPDATE "$queue" SET ifMatch = ? WHERE entityID = ? AND (ifMatch IS NULL OR ifMatch = ?)"#
                    ).execute(arguments: [etag, entry.entityID, entry.ifMatch])
                }
            }
        }
    }

    func archive(_ entry: QueueEntry, response: BatchResponse, serverVersion: JSONValue?) throws(OfflineError)
        -> ArchiveEntry
    {
        let error = response.body?["error"]
        let code = error?["code"]?.stringValue ?? "HTTP\(response.status)"
        let message = error?["message"]?.stringValue ?? "The server refused the change (HTTP \(response.status))."
        try write { db in
            try db.execute(sql: #"DELETE FROM "$queue" WHERE seq = ?"#, arguments: [entry.sequence])
            try db.execute(
                sql: """
                    INSERT INTO "$archive" (seq, requestID, author, device, createdAt, method, url, body, ifMatch,
                        signature, entityID, status, code, message, serverVersion, signedIfMatch, media)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                    """,
                arguments: [
                    entry.sequence, entry.requestID, entry.author, entry.device, entry.createdAt, entry.method,
                    entry.url, Data(entry.body), entry.ifMatch, entry.signature, entry.entityID, response.status, code,
                    message, serverVersion?.serialized, entry.signedIfMatch, entry.media,
                ])
        }
        return ArchiveEntry(
            entry: entry, status: response.status, code: code, message: message, serverVersion: serverVersion)
    }

    func fetchServerVersion(_ id: String, session: AuthorizedSession) async throws -> JSONValue? {
        guard let url = URL(string: session.configuration.odataServiceRoot + id) else { return nil }
        let response = try await session.send(
            ClientRequest(url: url, headers: [("Accept", "application/json")], timeout: requestTimeout))
        guard response.status == 200 else { return nil }
        return try JSONValue(parsing: response.body)
    }

    /// How often one `$batch` is sent while the server answers 429 (busy with the user's other changes).
    static let busyAttempts = 5

    /// The seconds a 429 asks to wait (`Retry-After` in seconds), from 1 to 10; 1 when it says nothing usable.
    static func retryAfter(_ response: ClientResponse) -> Int {
        min(10, max(1, response.header("Retry-After").flatMap { Int($0.trimmingCharacters(in: .whitespaces)) } ?? 1))
    }

    static func offlineError(_ error: BatonClientError, doing action: String) -> OfflineError {
        if error.code == .unreachable {
            return OfflineError(
                .offline, "Cannot \(action): the server cannot be reached; the work stays on this device.")
        }
        return OfflineError(.server, "Cannot \(action): \(error.message)")
    }

    /// IMF-fixdate (RFC 9110), as `Repeatability-First-Sent` wants.
    static func imfFixdate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
