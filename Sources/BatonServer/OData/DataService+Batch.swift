import BatonOData
import Foundation
import GRDB
import HTTPTypes

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
        var responses: [BatchResponse] = []
        var audit: [AuditEntry] = []
        var failed: Set<String> = []
        var locations: [String: String] = [:]
        var index = 0
        while index < requests.count {
            var unit = [requests[index]]
            let group = requests[index].atomicityGroup
            index += 1
            while let group, index < requests.count, requests[index].atomicityGroup == group {
                unit.append(requests[index])
                index += 1
            }
            let ids = Set(unit.map(\.id))
            let dependencies = Set(unit.flatMap(\.dependsOn)).subtracting(ids)
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
            do {
                let outcome = try await store.pool.write { db in
                    var results: [(BatchRequest, DataResponse)] = []
                    var entries: [AuditEntry] = []
                    var unitLocations = known
                    for (position, request) in members.enumerated() {
                        let response = run(request, locations: unitLocations, in: db, context: context, audit: &entries)
                        if group != nil, response.status >= 400 {
                            throw GroupFailure(index: position, response: response)
                        }
                        if let location = response.headers.first(where: { $0.0 == "Location" })?.1 {
                            unitLocations[request.id] = String(location.dropFirst(context.serviceRoot.count))
                        }
                        results.append((request, response))
                    }
                    return (results, entries, unitLocations)
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
                for request in unit {
                    responses.append(
                        Self.batchResponse(
                            request,
                            .error(
                                ServerError(.internalServerError, "InternalError", "The batch could not be applied."))))
                }
                failed.formUnion(ids)
            }
        }
        return (responses, audit)
    }

    /// Runs one request of a batch inside the caller's transaction; errors become error responses.
    func run(
        _ request: BatchRequest, locations: [String: String], in db: Database, context: Context,
        audit: inout [AuditEntry]
    )
        -> DataResponse
    {
        do {
            var url = try request.resolvedURL(locations: locations)
            if url.hasPrefix(context.serviceRoot) { url = String(url.dropFirst(context.serviceRoot.count)) }
            if url.hasPrefix("/odata/") { url = String(url.dropFirst("/odata/".count)) }
            let parsed = try parse(url)
            if case .batch = parsed.path {
                throw ServerError.badRequest("A batch cannot contain another $batch.")
            }
            let data = DataRequest(
                method: request.method, url: url, headers: request.headers, body: request.body?.serializedBytes ?? [])
            if request.method == "GET" { return try read(parsed, request: data, in: db, context: context) }
            return try change(parsed, request: data, in: db, context: context, audit: &audit)
        } catch let error as ServerError {
            return .error(error)
        } catch let error as ODataError {
            return .error(ServerError(error))
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
