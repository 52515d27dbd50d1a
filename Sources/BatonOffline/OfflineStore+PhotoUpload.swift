import BatonClient
import BatonOData
import BatonSQL
import BatonSQLGRDB
import Crypto
import Foundation
import GRDB

extension OfflineStore {
    // MARK: Upload

    /// Uploads the queued photos that may go now, oldest first, each in a request of its own (its bytes are the
    /// body): one whose check still has changes queued waits for them; one whose check was refused goes to the
    /// error archive with it; another author's waits unless `allowOnBehalf`. Returns whether some must wait for a
    /// later upload (the server was busy midway), and how many photos went.
    func uploadPhotos(
        user: OfflineUser, session: AuthorizedSession, allowOnBehalf: Bool, into report: inout UploadReport
    ) async throws(OfflineError) -> (retryLater: Bool, uploaded: Int) {
        var uploaded = 0
        var onBehalf = allowOnBehalf
        let candidates = try read { db in
            try Row.fetchAll(db, sql: #"SELECT * FROM "$queue" WHERE media IS NOT NULL ORDER BY seq"#).map(Self.entry)
        }
        for entry in candidates {
            guard entry.author == user.name || onBehalf else { continue }
            let principals = principalIDs(ofQueued: entry.entityID, body: entry.body)
            let (waiting, refused) = try read { db -> (Bool, String?) in
                for principal in principals {
                    if let code = try String.fetchOne(
                        db, sql: #"SELECT code FROM "$archive" WHERE entityID = ? LIMIT 1"#, arguments: [principal])
                    {
                        return (false, "\(principal) was refused (\(code))")
                    }
                    if try Bool.fetchOne(
                        db, sql: #"SELECT EXISTS (SELECT 1 FROM "$queue" WHERE entityID = ? AND seq < ?)"#,
                        arguments: [principal, entry.sequence]) == true
                    {
                        return (true, nil)
                    }
                }
                let earlier = try Bool.fetchOne(
                    db,
                    sql:
                        #"SELECT EXISTS (SELECT 1 FROM "$queue" WHERE entityID = ? AND seq < ?) OR EXISTS (SELECT 1 FROM "$archive" WHERE entityID = ?)"#,
                    arguments: [entry.entityID, entry.sequence, entry.entityID])
                return (earlier == true, nil)
            }
            if let refused {
                let response = BatchResponse(
                    id: String(entry.sequence), status: 424,
                    body: .object([
                        (
                            "error",
                            .object([
                                ("code", .string("PrincipalRefused")),
                                ("message", .string("The photo was not sent: \(refused); it stays here with it.")),
                            ])
                        )
                    ]))
                report.archived.append(try archive(entry, response: response, serverVersion: nil))
                continue
            }
            if waiting { continue }
            try markFirstSent([entry])
            let response: ClientResponse
            do {
                response = try await sendPhoto(entry, user: user, session: session)
            } catch {
                if error.code == .offline { throw error }
                return (true, uploaded)
            }
            let body = try? JSONValue(parsing: response.body)
            let code = body?["error"]?["code"]?.stringValue
            switch ChangeDisposition.of(status: response.status, code: code, method: entry.method) {
            case .applied:
                let answer = BatchResponse(
                    id: String(entry.sequence), status: response.status,
                    headers: response.headers.map { ($0.name, $0.value) },
                    body: body)
                try applied([(entry, answer)])
                try write { db in
                    try db.execute(
                        sql: #"UPDATE "$mediaInfo" SET pending = 0 WHERE entityID = ?"#, arguments: [entry.entityID])
                }
                report.uploaded.append(entry)
                uploaded += 1
            case .retryLater:
                return (true, uploaded)
            case .waitForAuthor:
                // Another author's photo waits for them, and so do the rest of theirs.
                onBehalf = false
            case .archive(let withServerVersion):
                let answer = BatchResponse(
                    id: String(entry.sequence), status: response.status,
                    headers: response.headers.map { ($0.name, $0.value) }, body: body)
                let serverVersion =
                    withServerVersion ? try? await fetchServerVersion(entry.entityID, session: session) : nil
                report.archived.append(try archive(entry, response: answer, serverVersion: serverVersion))
            }
        }
        return (false, uploaded)
    }

    /// Sends one queued photo in a resumable upload (the server's `$uploads`, after the IETF's resumable uploads
    /// for HTTP): its properties in `Slug`, its author's signature when someone else uploads it, its bytes in
    /// chunks of ``photoChunkSize``, each at the offset the server confirmed. Returns the server's answer to the
    /// photo (its entity, or why it was refused).
    ///
    /// The upload is found again by the queued change's `Repeatability-Request-ID`: after a broken connection —
    /// in this call, or at a later sync after the app stopped — the creation sent again answers with the offset
    /// the server holds, or with the photo's stored answer when its last chunk arrived, so no byte is sent twice
    /// that the server confirmed and the photo is written once.
    func sendPhoto(_ entry: QueueEntry, user: OfflineUser, session: AuthorizedSession) async throws(OfflineError)
        -> ClientResponse
    {
        let files = try requirePhotoFiles()
        guard let photo = try read({ db in try Self.keptPhoto(entry.entityID, files: files, in: db) }) else {
            throw OfflineError(.storage, "The bytes of \(entry.entityID) are missing on this device.")
        }
        let firstSent = try read { db in
            try String.fetchOne(
                db, sql: #"SELECT firstSentAt FROM "$queue" WHERE seq = ?"#, arguments: [entry.sequence])
        }
        let bytes = photo.bytes
        var headers: [(String, String)] = [
            ("Content-Type", photo.kind.rawValue), ("Slug", Self.slug(entry.body)),
            // RFC 9530: the server keeps nothing that arrives other than sent.
            ("Content-Digest", "sha-256=:" + Data(SHA256.hash(data: bytes)).base64EncodedString() + ":"),
            ("Repeatability-Request-ID", entry.requestID),
            ("Repeatability-First-Sent", firstSent ?? Self.imfFixdate(now())), ("Prefer", "return=minimal"),
            ("Baton-Device", entry.device), ("Upload-Complete", "?0"), ("Upload-Length", String(bytes.count)),
        ]
        if entry.author != user.name {
            headers += [
                ("Baton-Author", entry.author), ("Baton-Author-Signature", entry.signature),
                ("Baton-Created-At", entry.createdAt), ("Baton-If-Match", entry.signedIfMatch),
            ]
        }
        guard let url = URL(string: session.configuration.odataServiceRoot + entry.url) else {
            throw OfflineError(.server, "The server's OData service root is not a URL.")
        }
        let chunk = photoChunkSize
        // The creation carries the first chunk: a photo of one chunk takes one request. Sent again without a body,
        // it asks where the upload stands (the server answers with its offset, or with the photo when every byte
        // is there), so no byte the server confirmed is sent twice.
        let create = ClientRequest(
            method: "POST", url: url, headers: headers, body: Array(bytes.prefix(chunk)), timeout: requestTimeout)
        var ask = create
        ask.body = []
        var response = try await sendBusy(create, doing: "upload the photo", session: session)
        var location: URL?
        var setbacks = 0
        var lastOffset = -1
        // Whether the answer is to asking again: its offset repeats the last one by design, and asking again has
        // counted its setback already (a lost chunk is one setback, not two).
        var askedAgain = false
        while true {
            // An upload in progress says `Upload-Complete: ?0` and where it stands; any other answer is the
            // photo's (its entity, or why it was refused).
            guard response.header("Upload-Complete") == "?0",
                let offset = response.header("Upload-Offset").flatMap(Int.init), (0...bytes.count).contains(offset)
            else { return response }
            // An upload that stands still (a server answering the same offset again) is a setback: a few, then
            // the photo waits for the next sync instead of the upload going round for ever.
            if offset <= lastOffset, !askedAgain { try Self.noteSetback(&setbacks) }
            lastOffset = offset
            askedAgain = false
            if let created = Self.uploadLocation(response.header("Location"), service: url) { location = created }
            guard let location, offset < bytes.count else {
                response = try await askAgain(ask, setbacks: &setbacks, session: session)
                askedAgain = true
                continue
            }
            let end = min(bytes.count, offset + chunk)
            let patch = ClientRequest(
                method: "PATCH", url: location,
                headers: [
                    ("Content-Type", "application/partial-upload"), ("Upload-Offset", String(offset)),
                    ("Upload-Complete", end == bytes.count ? "?1" : "?0"),
                ], body: Array(bytes[offset..<end]), timeout: requestTimeout)
            do {
                response = try await sendBusy(patch, doing: "upload the photo", session: session)
                // Gone (it expired, or was removed): the creation starts it again, or finds the photo's answer.
                if response.status == 404 {
                    response = try await askAgain(ask, setbacks: &setbacks, session: session)
                    askedAgain = true
                }
            } catch {
                response = try await askAgain(ask, setbacks: &setbacks, session: session, after: error)
                askedAgain = true
            }
        }
    }

    /// Where an upload's chunks go: the `Location` the server named, resolved against the service's URL, only on the
    /// service's own scheme, host and port — the session's token goes with every chunk, and never to another place.
    static func uploadLocation(_ header: String?, service: URL) -> URL? {
        guard let header, let location = URL(string: header, relativeTo: service)?.absoluteURL,
            Self.sameASCII(location.scheme, service.scheme), Self.sameASCII(location.host, service.host),
            location.port == service.port
        else { return nil }
        return location
    }

    /// Whether two URL parts are equal with ASCII case folded, byte by byte (a Unicode lower-casing would take a
    /// Kelvin sign in a host for a `k`); both missing counts as equal.
    static func sameASCII(_ first: String?, _ second: String?) -> Bool {
        guard let first, let second else { return first == nil && second == nil }
        return HeaderScanner.sameName(first, second)
    }

    /// After a broken connection, a lost upload or an answer with no place to go on: asks again where the upload
    /// stands (`ask`, the creation without a body), a few times in one upload.
    func askAgain(
        _ ask: ClientRequest, setbacks: inout Int, session: AuthorizedSession, after error: OfflineError? = nil
    ) async throws(OfflineError) -> ClientResponse {
        try Self.noteSetback(&setbacks, after: error)
        return try await sendBusy(ask, doing: "upload the photo", session: session)
    }

    /// One more setback in a photo's upload; past a few, the photo waits for the next sync (with `error`, the last
    /// one, when there was one).
    static func noteSetback(_ setbacks: inout Int, after error: OfflineError? = nil) throws(OfflineError) {
        setbacks += 1
        guard setbacks < busyAttempts else {
            throw error ?? OfflineError(.offline, "The photo's upload did not get through; it is retried later.")
        }
    }

    /// Sends `request`, waiting and sending it again while the server answers 429 (a few times).
    func sendBusy(_ request: ClientRequest, doing what: String, session: AuthorizedSession)
        async throws(OfflineError) -> ClientResponse
    {
        var attempt = 1
        while true {
            let response: ClientResponse
            do {
                response = try await session.send(request)
            } catch {
                throw Self.offlineError(error, doing: what)
            }
            guard response.status == 429, attempt < Self.busyAttempts else { return response }
            attempt += 1
            do {
                try await Task.sleep(for: .seconds(Self.retryAfter(response)))
            } catch {
                throw OfflineError(.offline, "The upload was stopped; the photo stays on this device.")
            }
        }
    }

    /// The `Slug` a photo's properties travel in: their JSON, percent-encoded (every byte but ASCII letters and
    /// digits), exactly as its author signed it.
    static func slug(_ body: [UInt8]) -> String {
        String(decoding: body, as: UTF8.self).addingPercentEncoding(withAllowedCharacters: slugAllowed) ?? ""
    }

    static let slugAllowed = CharacterSet(
        charactersIn: "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
}
