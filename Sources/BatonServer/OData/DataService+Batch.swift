import BatonOData
import BatonSQL
import Foundation
import HTTPTypes
import Synchronization

extension DataService {
    /// A failed request inside an atomicity group: the whole group rolls back.
    struct GroupFailure: Error {
        var index: Int
        var response: DataResponse
    }

    /// Runs a `$batch`: requests in order; each atomicity group in one transaction (all or nothing); a
    /// request whose dependency failed is not run and answers 424; `$n` in a URL stands for the entity that
    /// request `n` created.
    func batch(_ requests: [BatchRequest], context: Context) async -> ([BatchResponse], [AuditEntry]) {
        var written = context
        written.writtenAddress = context.address
        let context = written
        var responses: [BatchResponse] = []
        var audit: [AuditEntry] = []
        var failed: Set<String> = []
        var locations: [String: String] = [:]
        var index = 0
        while index < requests.count {
            if requests[index].atomicityGroup == nil, Self.mayBeMedia(requests[index]) {
                // A photo's bytes, or a `$value` read: on its own, once the requests before it ran.
                let request = requests[index]
                index += 1
                if let dependency = request.dependsOn.first(where: failed.contains) {
                    responses.append(
                        Self.failedDependency(request, "Not run: '\(dependency)', which it depends on, failed."))
                    failed.insert(request.id)
                    continue
                }
                if let url = try? relativeURL(request, locations: locations, context: context),
                    let kind = ODataRoutes.mediaRequest(
                        method: request.method, url: url, contentType: request.header("Content-Type"), model: model)
                {
                    let outcome = await batchMedia(request, kind: kind, url: url, context: context)
                    responses.append(outcome.response)
                    audit += outcome.audit
                    if outcome.response.status >= 400 { failed.insert(request.id) }
                    if let location = outcome.location { locations[request.id] = location }
                    continue
                }
                let outcome = await runIndependently(
                    [request], reads: request.method == "GET", locations: locations, failed: failed,
                    context: context)
                responses += outcome.responses
                audit += outcome.audit
                locations = outcome.locations
                failed = outcome.failed
                continue
            }
            if requests[index].atomicityGroup == nil {
                // Consecutive changes outside atomicity groups share one transaction, each applied or rolled back
                // alone, as if it ran by itself (``runIndependently``), and the changes cost one commit (one
                // fsync) instead of one each. Answers go out only after the commit. Consecutive reads share
                // a read transaction: reads never run in a writing one, where they would hold SQLite's one writer
                // (on PostgreSQL, the rows the changes took) for as long as they take.
                var independent: [BatchRequest] = []
                let reads = requests[index].method == "GET"
                while index < requests.count, requests[index].atomicityGroup == nil,
                    (requests[index].method == "GET") == reads, !Self.mayBeMedia(requests[index])
                {
                    independent.append(requests[index])
                    index += 1
                }
                let outcome = await runIndependently(
                    independent, reads: reads, locations: locations, failed: failed, context: context)
                responses += outcome.responses
                audit += outcome.audit
                locations = outcome.locations
                failed = outcome.failed
                continue
            }
            var unit = [requests[index]]
            let group = requests[index].atomicityGroup
            index += 1
            while let group, index < requests.count, requests[index].atomicityGroup == group {
                unit.append(requests[index])
                index += 1
            }
            let ids = Set(unit.map { $0.id })
            let dependencies = Set(unit.flatMap { $0.dependsOn }).subtracting(ids)
            if let failedDependency = dependencies.first(where: failed.contains) {
                for request in unit {
                    responses.append(
                        Self.failedDependency(request, "Not run: '\(failedDependency)', which it depends on, failed."))
                }
                failed.formUnion(ids)
                if let group { failed.insert(group) }
                continue
            }
            let known = locations
            let members = unit
            let urls = batchURLs(members, locations: known, context: context)
            let isolation = isolation(of: members, urls: urls)
            do {
                typealias Outcome = ([(BatchRequest, DataResponse)], [AuditEntry], [String: String])
                let outcome = try await store.write(isolation: isolation) { db -> Outcome in
                    let rows = try await self.readPreconditions(members, urls: urls, isolation: isolation, in: db)
                    var context = context
                    context.preconditions = rows
                    let sequenced = db as? SequencedConnection
                    // `merging`: the group's updates of entities go out together (``SequencedConnection``).
                    let attempt: (Bool) async throws -> Outcome = { [context] merging in
                        sequenced?.merging = merging ? self.merging : nil
                        defer { sequenced?.merging = nil }
                        var results: [(BatchRequest, DataResponse)] = []
                        var entries: [AuditEntry] = []
                        var unitLocations = known
                        for (position, request) in members.enumerated() {
                            let response = try await self.run(
                                request, locations: unitLocations, in: db, context: context,
                                prepared: urls[position], audit: &entries)
                            if group != nil, response.status >= 400 {
                                throw GroupFailure(index: position, response: response)
                            }
                            if let location = response.headers.first(where: { $0.0 == "Location" })?.1 {
                                unitLocations[request.id] = String(location.dropFirst(context.serviceRoot.count))
                            }
                            results.append((request, response))
                        }
                        if merging { try await sequenced?.sendWaitingUpdates() }
                        try await self.outbox.stage(&entries, in: db)
                        return (results, entries, unitLocations)
                    }
                    // Worth a savepoint (two round trips) only for two updates or more.
                    guard db.dialect == .postgres,
                        members.lazy.filter({ $0.method == "PATCH" || $0.method == "PUT" }).count > 1
                    else { return try await attempt(false) }
                    var merged: Outcome?
                    do {
                        try await db.inSavepoint {
                            merged = try await attempt(true)
                            return true
                        }
                    } catch let error as StorageError where error.kind == .conflict || error.kind == .unavailable {
                        throw error
                    } catch let failure as GroupFailure where sequenced?.sendFailed != true {
                        // A change failed on its own: the group fails as it would have without merging.
                        throw failure
                    } catch {
                        // The updates sent together failed (which one, their statement does not say): the group goes
                        // again with each update sent by itself, which says which failed.
                    }
                    if let merged { return merged }
                    return try await attempt(false)
                }
                for (request, response) in outcome.0 {
                    responses.append(Self.batchResponse(request, response))
                    if response.status >= 400 { failed.insert(request.id) }
                }
                audit += outcome.1
                locations = outcome.2
            } catch let failure as GroupFailure {
                for (position, request) in unit.enumerated() {
                    if position == failure.index {
                        responses.append(Self.batchResponse(request, failure.response))
                    } else {
                        responses.append(
                            Self.failedDependency(
                                request,
                                "Not applied: request '\(unit[failure.index].id)' of atomicity group '\(group ?? "")' failed, so the group was rolled back."
                            ))
                    }
                }
                failed.formUnion(ids)
                if let group { failed.insert(group) }
            } catch {
                // The connection may have gone after the commit: the group's audit entries may wait in the outbox
                // (SQLite; on PostgreSQL they committed with it).
                if (error as? StorageError)?.kind == .unavailable { outbox.noteBacklog() }
                for request in unit {
                    responses.append(Self.batchResponse(request, .error(Self.unapplied(error))))
                }
                failed.formUnion(ids)
            }
        }
        return (responses, audit)
    }

    /// A change of a run failed while the run went without savepoints: the run goes again with them.
    struct NeedsSavepoints: Error {}

    /// Runs requests that belong to no atomicity group, all reads or all changes, in one transaction, each as if
    /// it ran alone: a failed one is rolled back by itself. Reads run in a read transaction, so that they never
    /// hold a writing one, each in a savepoint. Changes run first in one savepoint for them all, since on
    /// PostgreSQL each `SAVEPOINT` and `RELEASE` is a round trip (two of the five or so statements of a change);
    /// when one fails, the run rolls back to that savepoint and goes again, in the same transaction, with a
    /// savepoint each.
    func runIndependently(
        _ requests: [BatchRequest], reads: Bool, locations: [String: String], failed: Set<String>, context: Context
    ) async -> (responses: [BatchResponse], audit: [AuditEntry], locations: [String: String], failed: Set<String>) {
        assert(requests.allSatisfy { ($0.method == "GET") == reads })
        do {
            typealias Outcome = (
                responses: [BatchResponse], audit: [AuditEntry], locations: [String: String], failed: Set<String>
            )
            // The changes' entities are read ahead once for both passes of a transaction (``PreconditionRows``):
            // rolling back to the first pass's savepoint leaves the ones not taken as they were read. A transaction
            // run again from its start reads them again.
            typealias Ahead = (rows: PreconditionRows?, urls: [BatchURL?])
            let body: @Sendable (any SQLConnection, Bool, Ahead) async throws -> Outcome = { db, savepoints, ahead in
                var responses: [BatchResponse] = []
                var audit: [AuditEntry] = []
                var locations = locations
                var failed = failed
                var context = context
                context.preconditions = ahead.rows
                // On PostgreSQL the first pass sends its updates of entities together (``SequencedConnection``).
                let sequenced = db as? SequencedConnection
                sequenced?.merging = !savepoints && !reads && db.dialect == .postgres ? self.merging : nil
                for (position, request) in requests.enumerated() {
                    if let dependency = request.dependsOn.first(where: failed.contains) {
                        responses.append(
                            Self.failedDependency(request, "Not run: '\(dependency)', which it depends on, failed."))
                        failed.insert(request.id)
                        continue
                    }
                    var response = DataResponse(status: 500, headers: [])
                    var entries: [AuditEntry] = []
                    if savepoints {
                        try await db.inSavepoint {
                            response = try await self.run(
                                request, locations: locations, in: db, context: context, prepared: ahead.urls[position],
                                audit: &entries)
                            return response.status < 400
                        }
                    } else {
                        response = try await self.run(
                            request, locations: locations, in: db, context: context, prepared: ahead.urls[position],
                            audit: &entries)
                        if response.status >= 400 { throw NeedsSavepoints() }
                    }
                    if response.status >= 400 {
                        failed.insert(request.id)
                    } else {
                        audit += entries
                        if let location = response.headers.first(where: { $0.0 == "Location" })?.1 {
                            locations[request.id] = String(location.dropFirst(context.serviceRoot.count))
                        }
                    }
                    responses.append(Self.batchResponse(request, response))
                }
                if let sequenced, sequenced.merging != nil {
                    sequenced.merging = nil
                    do {
                        try await sequenced.sendWaitingUpdates()
                    } catch let error as StorageError where error.kind == .conflict || error.kind == .unavailable {
                        throw error
                    } catch {
                        // A change's update failed with the others': each goes again by itself, in a savepoint.
                        throw NeedsSavepoints()
                    }
                }
                if !reads { try await self.outbox.stage(&audit, in: db) }
                return (responses, audit, locations, failed)
            }
            if reads {
                let none = Ahead(nil, Array(repeating: nil, count: requests.count))
                return try await store.storage.read { try await body($0, true, none) }
            }
            let urls = batchURLs(requests, locations: locations, context: context)
            let isolation = isolation(of: requests, urls: urls)
            return try await store.write(isolation: isolation) { db in
                var outcome:
                    (responses: [BatchResponse], audit: [AuditEntry], locations: [String: String], failed: Set<String>)?
                let ahead = Ahead(
                    try await self.readPreconditions(requests, urls: urls, isolation: isolation, in: db), urls)
                do {
                    try await db.inSavepoint {
                        outcome = try await body(db, false, ahead)
                        return true
                    }
                } catch is NeedsSavepoints {}
                if let outcome { return outcome }
                return try await body(db, true, ahead)
            }
        } catch {
            // The connection may have gone after the commit: the batch's audit entries may wait in the outbox
            // (SQLite; on PostgreSQL they committed with it).
            if (error as? StorageError)?.kind == .unavailable { outbox.noteBacklog() }
            let responses = requests.map { request in Self.batchResponse(request, .error(Self.unapplied(error))) }
            return (responses, [], locations, failed.union(requests.map { $0.id }))
        }
    }

    /// The answer for requests whose transaction failed: 503 when the database is away (try again), else 500.
    static func unapplied(_ error: any Error) -> ServerError {
        if let error = error as? StorageError, error.kind == .unavailable {
            return .databaseUnavailable("The server cannot reach its database; send the batch again.")
        }
        return ServerError(.internalServerError, "InternalError", "The batch could not be applied.")
    }

    /// Runs one request of a batch inside the caller's transaction; errors become error responses, except a
    /// conflict with another transaction or a database gone away, which end the whole transaction (the storage
    /// runs it again after a conflict, on PostgreSQL).
    ///
    /// `prepared` is the request's URL as ``batchURLs(_:locations:context:)`` made and parsed it.
    func run(
        _ request: BatchRequest, locations: [String: String], in db: any SQLConnection, context: Context,
        prepared: BatchURL? = nil, audit: inout [AuditEntry]
    ) async throws -> DataResponse {
        do {
            let url = try prepared?.text ?? relativeURL(request, locations: locations, context: context)
            let parsed = try prepared?.parsed ?? parse(url)
            if case .batch = parsed.path {
                throw ServerError.badRequest("A batch cannot contain another $batch.")
            }
            if ODataRoutes.mediaRequest(
                method: request.method, url: url, contentType: request.header("Content-Type"), model: model) != nil
            {
                // Its bytes are stored before its change is written: they cannot roll back with a group.
                throw ServerError.badRequest(
                    "A photo's bytes and $value reads go in a $batch outside atomicity groups (changesets), each on its own."
                )
            }
            var data = DataRequest(
                method: request.method, url: url, headers: request.headers, body: request.body?.serializedBytes ?? [])
            data.json = request.body
            if request.method == "GET" {
                if let budget = context.budget, budget.isSpent {
                    throw ServerError(
                        .contentTooLarge, "BatchResponseTooLarge",
                        "The answers of this $batch passed \(Self.describe(bytes: budget.limit)), so this read was not run; send it in another $batch."
                    )
                }
                let response = try await read(parsed, request: data, in: db, context: context)
                context.budget?.spend(response.size)
                return response
            }
            return try await change(parsed, request: data, in: db, context: context, audit: &audit)
        } catch let error as ServerError {
            return .error(error)
        } catch let error as ODataError {
            return .error(ServerError(error))
        } catch let error as BatonSQLError {
            return .error(ServerError(error))
        } catch let error as StorageError where error.kind == .conflict || error.kind == .unavailable {
            throw error
        } catch let error as StorageError where request.method == "GET" && error.dataExceptionState != nil {
            // The read's savepoint (or its atomicity group) is rolled back by the caller: the transaction goes on.
            return .error(.unevaluable(sqlState: error.dataExceptionState ?? "22000"))
        } catch {
            return .error(ServerError(.internalServerError, "InternalError", "The request failed."))
        }
    }

    /// A 424 answer for a request that was not run or not applied because another one failed.
    static func failedDependency(_ request: BatchRequest, _ message: String) -> BatchResponse {
        BatchResponse(
            id: request.id, atomicityGroup: request.atomicityGroup, status: 424,
            body: DataResponse.error(ServerError(failedDependencyStatus, "FailedDependency", message)).jsonBody)
    }

    static let failedDependencyStatus = HTTPResponse.Status(code: 424, reasonPhrase: "Failed Dependency")

    static func batchResponse(_ request: BatchRequest, _ response: DataResponse) -> BatchResponse {
        var body: JSONValue?
        switch response.body {
        case .none: body = nil
        case .json(let json): body = json
        case .rawJSON(let bytes): body = try? JSONValue(parsing: bytes)
        case .text(let text, _): body = .string(text)
        }
        return BatchResponse(
            id: request.id, atomicityGroup: request.atomicityGroup, status: response.status, headers: response.headers,
            body: body)
    }
}

/// The bytes of answers one `$batch` may produce: reads after the budget is spent are answered 413 instead of
/// being run, so one request cannot make the server build an unbounded answer.
final class ResponseBudget: Sendable {
    let limit: Int
    let spent = Mutex(0)

    init(limit: Int) { self.limit = limit }

    var isSpent: Bool { spent.withLock { $0 >= limit } }

    func spend(_ bytes: Int) { spent.withLock { $0 += bytes } }

    /// The bytes spent so far.
    var spentBytes: Int { spent.withLock { $0 } }
}

extension DataResponse {
    /// The size of the body in bytes (a JSON value is serialized to count it).
    var size: Int {
        switch body {
        case .none: 0
        case .json(let json): json.serializedBytes.count
        case .rawJSON(let bytes): bytes.count
        case .text(let text, _): text.utf8.count
        }
    }
}

extension DataService {
    /// A size for a message: whole MiB or KiB where it divides, bytes otherwise.
    static func describe(bytes: Int) -> String {
        if bytes >= 1024 * 1024, bytes % (1024 * 1024) == 0 { return "\(bytes / (1024 * 1024)) MiB" }
        if bytes >= 1024, bytes % 1024 == 0 { return "\(bytes / 1024) KiB" }
        return "\(bytes) bytes"
    }
}
