import BatonClient
import BatonOData
import BatonSQL
import Foundation
import GRDB

/// What a download did.
public struct DownloadReport: Sendable, Hashable {
    /// New and changed entities written.
    public var updated = 0
    /// Entities removed (deleted on the server, or no longer in a defining query's set).
    public var removed = 0
    /// Server versions not applied because the entity has changes on this device not uploaded yet.
    public var keptLocal = 0
    /// Pages read.
    public var pages = 0
    /// An empty report (nothing downloaded yet).
    public init() {}
}

extension OfflineStore {
    /// Downloads every defining query: the first time in full, then what changed since (delta links),
    /// following server-driven paging, each page applied in one transaction. Entities with changes on this
    /// device that are not uploaded yet keep the local version (the user sees their own edits); the upload
    /// then meets the server's version (a conflict goes to the error archive).
    ///
    /// - Throws: ``OfflineError`` `Offline` when the server cannot be reached (what was applied stays; the
    ///   next download continues from the last complete delta link).
    public func download(using session: AuthorizedSession, pageSize: Int = 1000) async throws(OfflineError)
        -> DownloadReport
    {
        var report = DownloadReport()
        for query in definingQueries {
            let stored = try read { db in
                try String.fetchOne(
                    db, sql: #"SELECT link FROM "$deltaLinks" WHERE query = ?"#, arguments: [query.name])
            }
            var next = stored ?? session.configuration.odataServiceRoot + query.url
            var restarted = false
            while true {
                guard let url = URL(string: next) else {
                    throw OfflineError(.server, "The server sent a link that is not a URL.")
                }
                let response: ClientResponse
                do {
                    response = try await session.send(
                        ClientRequest(
                            url: url,
                            headers: [
                                ("Accept", "application/json"),
                                ("Prefer", "odata.track-changes, odata.maxpagesize=\(pageSize)"),
                            ]))
                } catch {
                    throw Self.offlineError(error, doing: "download '\(query.name)'")
                }
                if response.status == 410, !restarted {
                    // The delta link expired: start over with a full download of this query.
                    restarted = true
                    try write { db in
                        try db.execute(sql: #"DELETE FROM "$deltaLinks" WHERE query = ?"#, arguments: [query.name])
                    }
                    next = session.configuration.odataServiceRoot + query.url
                    continue
                }
                guard response.status == 200, let page = try? JSONValue(parsing: response.body),
                    let items = page["value"]?.arrayValue
                else {
                    throw OfflineError(
                        .server, "Cannot download '\(query.name)': the server answered HTTP \(response.status).")
                }
                let (set, type, _) = try parseRead(query.url)
                let deltaLink = page["@odata.deltaLink"]?.stringValue
                try apply(
                    items, set: set, type: type, serviceRoot: session.configuration.odataServiceRoot,
                    report: &report, deltaLink: deltaLink.map { (query.name, $0) })
                report.pages += 1
                self.report(
                    .download(query: query.name, entities: report.updated + report.removed, pages: report.pages))
                if let nextLink = page["@odata.nextLink"]?.stringValue {
                    next = nextLink
                    continue
                }
                break
            }
        }
        return report
    }

    func apply(
        _ items: [JSONValue], set: EntitySet, type: EntityType, serviceRoot: String, report: inout DownloadReport,
        deltaLink: (String, String)?
    ) throws(OfflineError) {
        var changes: [(id: String, values: [String: PrimitiveValue]?, etag: String?)] = []
        for item in items {
            if item["@removed"] != nil || item["@odata.removed"] != nil {
                guard var id = item["@id"]?.stringValue ?? item["id"]?.stringValue else { continue }
                if id.hasPrefix(serviceRoot) { id.removeFirst(serviceRoot.count) }
                changes.append((id, nil, nil))
                continue
            }
            var values: [String: PrimitiveValue] = [:]
            for property in type.properties {
                guard let json = item[property.name] else { continue }
                do { values[property.name] = try PrimitiveValue(json: json, for: property) } catch {
                    throw OfflineError(.server, "The server sent an entity the model refuses: \(error.description)")
                }
            }
            changes.append(
                (
                    try Self.entityID(set: set.name, type: type, values: values), values,
                    item["@odata.etag"]?.stringValue
                ))
        }
        var updated = 0
        var removed = 0
        var kept = 0
        let translator = translator
        // New or changed entities replace the row with the same key; the statement is the same for every row.
        let replace: String
        do {
            replace =
                "INSERT OR REPLACE"
                + (try translator.insert(into: set.name, values: [:], systemValues: [(Self.etagColumn, .null)]).sql)
                .dropFirst("INSERT".count)
        } catch {
            throw OfflineError(.storage, error.message)
        }
        try write { db in
            let pending = Set(try String.fetchAll(db, sql: #"SELECT DISTINCT entityID FROM "$queue""#))
            let statement = try db.cachedStatement(sql: replace)
            for change in changes {
                if pending.contains(change.id) {
                    kept += 1
                    continue
                }
                guard let values = change.values else {
                    let (_, _, key) = try self.parseID(change.id)
                    let delete = try translator.delete(from: set.name, key: key)
                    try db.cachedStatement(sql: delete.sql).execute(arguments: delete.statementArguments)
                    removed += db.changesCount
                    continue
                }
                let arguments = try translator.insertArguments(
                    into: set.name, values: values, systemValues: [change.etag.map(SQLValue.text) ?? .null])
                try statement.execute(arguments: StatementArguments(arguments.map { $0.databaseValue }))
                updated += 1
            }
            if let (name, link) = deltaLink {
                try db.execute(
                    sql: #"INSERT OR REPLACE INTO "$deltaLinks" (query, link) VALUES (?, ?)"#, arguments: [name, link])
            }
        }
        report.updated += updated
        report.removed += removed
        report.keptLocal += kept
    }
}
