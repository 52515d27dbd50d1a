import BatonOData
import Crypto
import Foundation
import HTTPTypes

extension DataService {
    /// Applies a change at most once when it carries `Repeatability-Request-ID` and `Repeatability-First-Sent`
    /// (OASIS Repeatable Requests 1.0).
    ///
    /// Who the change counts as, and whether they may change the addressed entity set, is decided first: the
    /// stored results are looked up only after that, and under the id's scope — the signing author and device
    /// for a signed change, the signed-in user otherwise — so nobody reads another author's stored answer or
    /// takes their request id first.
    ///
    /// The id is claimed, and the result stored, in the same transaction as the change, so a crash can never leave a
    /// change applied without its record, or recorded without being applied; the same request sent twice at once is
    /// applied once, and both get its answer. A replay with the same id and the same request
    /// returns the stored response with `Repeatability-Result: accepted`; the same id with a different request
    /// gets 409 with `Repeatability-Result: rejected`; a first-sent time older than the retention window gets
    /// 412. After the retention window the stored answer is dropped but the id, the request's fingerprint and
    /// the ETag it produced are kept for ever: a replay, however late, is never applied again.
    func changeRepeatably(
        _ url: ODataURL, request: DataRequest, in db: any SQLConnection, context: Context, audit: inout [AuditEntry]
    )
        async
        throws -> DataResponse
    {
        let attribution = try attribution(for: request, context: context)
        let target = try await authorizedTarget(
            url, request: request, attribution: attribution, context: context, in: db)
        let repeatability: Repeatability?
        do {
            repeatability = try Repeatability(
                requestIDHeader: request.header("Repeatability-Request-ID"),
                firstSentHeader: request.header("Repeatability-First-Sent"))
        } catch {
            throw ServerError(error)
        }
        guard let repeatability else {
            return try await apply(
                target, request: request, attribution: attribution, in: db, context: context, audit: &audit)
        }
        let now = clock.now()
        guard now.timeIntervalSince(repeatability.firstSent) <= configuration.repeatabilityRetention else {
            var error = ServerError(
                .preconditionFailed, "RepeatabilityExpired",
                "This request was first sent longer ago than the server remembers (\(Int(configuration.repeatabilityRetention / 86_400)) days); it cannot be applied safely. Read the current state and send a new request."
            )
            error.headers = [(.repeatabilityResult, Repeatability.Result.rejected.rawValue)]
            throw error
        }
        let scope = attribution.device.map { "\(attribution.author)\n\($0)" } ?? context.user
        let fingerprint = Self.fingerprint(request)
        // The id is claimed before the change is applied, and its answer written into the claim after. The same
        // request sent again at once (to this instance or another) waits for the claim's transaction; when that
        // commits after the waiting one's snapshot, PostgreSQL refuses the waiting one (SQLSTATE 40001, at
        // `REPEATABLE READ` as at `SERIALIZABLE`) and the storage runs it again, when it finds the answer. Looked up
        // first and recorded after, both could look before either recorded: the second's creation then met the
        // first's entity (409) instead of getting the first's answer. A claim whose change fails rolls back with it.
        let claimed = try await db.execute(
            #"""
            INSERT INTO "$repeatability" (scope, requestID, device, fingerprint, status, createdAt)
            VALUES (?, ?, ?, ?, 0, ?) ON CONFLICT (scope, requestID) DO NOTHING
            """#, scope, repeatability.requestID, attribution.device, fingerprint, now)
        if claimed == 0 {
            guard
                let row = try await db.fetchOne(
                    #"SELECT fingerprint, status, etag, headers, body FROM "$repeatability" WHERE scope = ? AND requestID = ?"#,
                    scope, repeatability.requestID)
            else {
                throw StorageError(.conflict, "A repeatability claim was neither taken nor found.")
            }
            // A claim holds status 0 until its answer is written in the same transaction, so one committed without an
            // answer would be a change never applied: it must not answer as one that was.
            guard row["status"].integer != 0 else {
                throw StorageError(.other, "A repeatability claim was found without its answer.")
            }
            guard row["fingerprint"].text == fingerprint else {
                var error = ServerError(
                    .conflict, "RepeatabilityConflict",
                    "Repeatability-Request-ID '\(repeatability.requestID.prefix(scalars: 64))' was already used for a different request; use a new id for a new request."
                )
                error.headers = [(.repeatabilityResult, Repeatability.Result.rejected.rawValue)]
                throw error
            }
            return Self.storedResponse(row)
        }
        var response = try await apply(
            target, request: request, attribution: attribution, in: db, context: context, audit: &audit)
        response.headers.append(("Repeatability-Result", Repeatability.Result.accepted.rawValue))
        let headers = JSONValue.array(response.headers.map { .array([.string($0.0), .string($0.1)]) }).serialized
        let body: String? =
            switch response.body {
            case .none: nil
            case .json(let json): json.serialized
            case .rawJSON(let bytes): String(decoding: bytes, as: UTF8.self)
            case .text(let text, _): text
            }
        let etag = response.headers.first { $0.0 == "ETag" }?.1
        let answered = try await db.execute(
            #"UPDATE "$repeatability" SET status = ?, etag = ?, headers = ?, body = ? WHERE scope = ? AND requestID = ?"#,
            response.status, etag, headers, body, scope, repeatability.requestID)
        guard answered == 1 else {
            throw StorageError(.other, "A repeatability claim was not found to write its answer into.")
        }
        // Past the retention window only the answer goes; the record that the request was applied stays.
        if chores.isDue(.answers, window: configuration.repeatabilityRetention, at: now) {
            try await db.execute(
                #"UPDATE "$repeatability" SET headers = NULL, body = NULL WHERE createdAt < ? AND headers IS NOT NULL"#,
                now.addingTimeInterval(-configuration.repeatabilityRetention))
        }
        return response
    }

    /// What makes two requests "the same": method, URL, body and author.
    static func fingerprint(_ request: DataRequest) -> String {
        var hasher = SHA256()
        for part in [request.method, request.url, request.header("Baton-Author") ?? ""] {
            hasher.update(data: Data(part.utf8))
            hasher.update(data: Data([0]))
        }
        hasher.update(data: Data(request.body))
        return hasher.finalize().lowercaseHex
    }

    static func storedResponse(_ row: SQLRow) -> DataResponse {
        guard row["headers"].text != nil else {
            // Applied longer ago than the retention window: only the fact and the ETag are left.
            var headers = [("Repeatability-Result", Repeatability.Result.accepted.rawValue)]
            if let etag = row["etag"].text { headers.append(("ETag", etag)) }
            return DataResponse(status: 204, headers: headers)
        }
        var headers: [(String, String)] = []
        if let text = row["headers"].text, case .array(let pairs)? = try? JSONValue(parsing: text) {
            for pair in pairs {
                if case .array(let items) = pair, items.count == 2, let name = items[0].stringValue,
                    let value = items[1].stringValue
                {
                    headers.append((name, value))
                }
            }
        }
        var body: DataResponse.Body = .none
        if let text = row["body"].text {
            body = (try? JSONValue(parsing: text)).map(DataResponse.Body.json) ?? .text(text, contentType: "text/plain")
        }
        return DataResponse(status: Int(row["status"].integer ?? 500), headers: headers, body: body)
    }
}

extension HTTPField.Name {
    static let repeatabilityResult: HTTPField.Name = {
        guard let name = HTTPField.Name("Repeatability-Result") else { preconditionFailure("valid header name") }
        return name
    }()
}
