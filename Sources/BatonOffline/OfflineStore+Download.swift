import BatonClient
import BatonOData
import BatonSQL
import BatonSQLGRDB
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
    ///   next download continues a delta from its next page, and a first download from the start).
    public func download(using session: AuthorizedSession, pageSize: Int = 1000) async throws(OfflineError)
        -> DownloadReport
    {
        var report = DownloadReport()
        let serviceRoot = session.configuration.odataServiceRoot
        // Memberships of queries this device no longer defines hold nothing.
        let names = definingQueries.map(\.name)
        try write { db in
            try db.execute(
                sql: #"DELETE FROM "$held" WHERE query NOT IN ("# + databaseQuestionMarks(count: names.count) + ")",
                arguments: StatementArguments(names))
        }
        for query in definingQueries {
            let row = try read { db in
                try Row.fetchOne(
                    db, sql: #"SELECT link, exact FROM "$deltaLinks" WHERE query = ?"#, arguments: [query.name])
            }
            let stored: String? = row?["link"]
            // A link stored before links were kept page by page may stand behind entities this device already
            // applied: its delta goes without naming the device, so it brings every removal.
            let exact = row.map { $0["exact"] as Bool } ?? true
            let (set, type, _) = try parseRead(query.url)
            let decoder = PageDecoder(
                query: query.name, set: set, type: type, dialect: translator.dialect, serviceRoot: serviceRoot,
                pageSize: pageSize, session: session, timeout: requestTimeout, device: exact ? deviceID : nil)
            var restarted = false
            // The ids a full download brought, to drop at its end what the server no longer has: after an expired
            // delta link, and on a first download where this device already holds entities of the query (a first
            // download cut short applied pages whose entities the server may have deleted since, and no delta
            // from the new read's snapshot would say so).
            let holds = stored == nil ? try count(query.url) > 0 : false
            var seen: Set<String>? = holds ? [] : nil
            // A full download's delta link is stored with its sweep: a crash between them reads in full again.
            var sweptLink: (query: String, link: String, exact: Bool)?
            // One page of lookahead: the next page is fetched, parsed and decoded off the store's actor while
            // this one is written, so the server's work, the device's decoding and its writes overlap.
            var upcoming: Task<Result<DecodedPage, OfflineError>, Never>? = decoder.start(
                stored ?? serviceRoot + query.url)
            defer { upcoming?.cancel() }
            while let task = upcoming {
                var page: DecodedPage
                switch await task.value {
                case .success(let decoded): page = decoded
                case .failure(let error): throw error
                }
                if page.expired {
                    guard !restarted else {
                        throw OfflineError(.server, "The server refuses even a full download of '\(query.name)'.")
                    }
                    // The delta link expired: start over with a full download of this query.
                    restarted = true
                    seen = []
                    try write { db in
                        try db.execute(sql: #"DELETE FROM "$deltaLinks" WHERE query = ?"#, arguments: [query.name])
                    }
                    upcoming = decoder.start(serviceRoot + query.url)
                    continue
                }
                upcoming = page.nextLink.map { decoder.start($0) }
                // Within a delta, each page applied moves the query's link on: a download cut short resumes with
                // the next page (the first page's removals were applied), not from the old token, which the
                // entities already applied have outgrown.
                if stored != nil, !restarted, let next = page.nextLink, page.deltaLink == nil {
                    page.deltaLink = (query.name, next, exact)
                }
                if seen != nil, let link = page.deltaLink {
                    sweptLink = link
                    page.deltaLink = nil
                }
                try apply(page, set: set, query: query.name, report: &report)
                if seen != nil { seen?.formUnion(page.changes.map(\.id)) }
                report.pages += 1
                self.report(
                    .download(query: query.name, entities: report.updated + report.removed, pages: report.pages))
            }
            if let seen { report.removed += try sweep(query, of: set, keeping: seen, storing: sweptLink) }
        }
        // The files of photos the server no longer has (their rows went with the pages).
        try sweepPhotoFiles()
        return report
    }

    /// Removes the entities of `query` on this device that a full download did not bring (deleted on the
    /// server while the delta link was too old to tell, or since a first download was cut short), except those
    /// with changes not uploaded yet, and stores the download's delta link in the same transaction.
    func sweep(
        _ query: DefiningQuery, of set: EntitySet, keeping seen: Set<String>,
        storing link: (query: String, link: String, exact: Bool)?
    ) throws(OfflineError) -> Int {
        let stale = try read(query.url).filter { !seen.contains($0.id) }.map(\.id)
        let translator = translator
        let shared = sharedSets.contains(set.name)
        return try write { db in
            // What is pending stays, decided in the transaction that deletes.
            let pending = try Self.pendingIDs(in: db)
            var removed = 0
            for id in stale where !pending.contains(id) {
                if shared, try Self.heldElsewhere(id, leaving: query.name, in: db) { continue }
                let (set, _, key) = try self.parseID(id)
                let delete = try translator.delete(from: set.name, key: key)
                try db.execute(sql: delete.sql, arguments: delete.statementArguments)
                removed += db.changesCount
            }
            if let (name, link, exact) = link { try Self.store(link, exact: exact, of: name, in: db) }
            return removed
        }
    }

    /// One page of a download, decoded into the insert statement's arguments (or removals).
    struct DecodedPage: Sendable {
        var changes: [(id: String, arguments: [DatabaseValue]?)] = []
        /// The removals that say the entity left the query's set (it still exists), not that it was deleted.
        var left: Set<String> = []
        var nextLink: String?
        /// The link to store for the query, and whether the device's copy stands exactly where its token says.
        var deltaLink: (query: String, link: String, exact: Bool)?
        /// HTTP 410: the delta link is too old.
        var expired = false
    }

    /// Fetches and decodes the pages of one defining query, away from the store's actor.
    struct PageDecoder: Sendable {
        let query: String
        let set: EntitySet
        let type: EntityType
        let dialect: SQLDialect
        let serviceRoot: String
        let pageSize: Int
        let session: AuthorizedSession
        let timeout: Duration
        /// This device (`Baton-Device`): a filtered delta then leaves out removals of entities it never held.
        let device: String?

        func start(_ link: String) -> Task<Result<DecodedPage, OfflineError>, Never> {
            // A detached task inherits no task-local values: the sync's trace is handed over by hand.
            let trace = RequestTrace.current
            return Task.detached {
                await RequestTrace.$current.withValue(trace) {
                    do throws(OfflineError) { return .success(try await page(link)) } catch { return .failure(error) }
                }
            }
        }

        func page(_ link: String) async throws(OfflineError) -> DecodedPage {
            // The user's token goes only to the server's own OData service: a next or delta link elsewhere (another
            // host, plain http, another path) is refused before any request.
            guard link.hasPrefix(serviceRoot), let url = URL(string: link) else {
                throw OfflineError(.server, "The server sent a link outside its OData service; nothing was requested.")
            }
            let response: ClientResponse
            do {
                response = try await session.send(
                    ClientRequest(
                        url: url,
                        headers: [
                            ("Accept", "application/json"),
                            ("Prefer", "odata.track-changes, odata.maxpagesize=\(pageSize)"),
                        ] + (device.map { [("Baton-Device", $0)] } ?? []), timeout: timeout))
            } catch {
                throw OfflineStore.offlineError(error, doing: "download '\(query)'")
            }
            if response.status == 410 { return DecodedPage(expired: true) }
            guard response.status == 200, let body = try? JSONValue(parsing: response.body),
                let items = body["value"]?.arrayValue
            else {
                throw OfflineError(.server, "Cannot download '\(query)': the server answered HTTP \(response.status).")
            }
            var page = DecodedPage(
                nextLink: body["@odata.nextLink"]?.stringValue,
                deltaLink: body["@odata.deltaLink"]?.stringValue.map { (query, $0, true) })
            (page.changes, page.left) = try decode(items)
            return page
        }

        /// Each entity goes from JSON straight to the row's arguments, in the insert statement's column order.
        func decode(_ items: [JSONValue]) throws(OfflineError) -> (
            changes: [(id: String, arguments: [DatabaseValue]?)], left: Set<String>
        ) {
            var changes: [(id: String, arguments: [DatabaseValue]?)] = []
            var left: Set<String> = []
            changes.reserveCapacity(items.count)
            for item in items {
                if let removed = item["@removed"] ?? item["@odata.removed"] {
                    guard var id = item["@id"]?.stringValue ?? item["id"]?.stringValue else { continue }
                    if id.hasPrefix(serviceRoot) { id.removeFirst(serviceRoot.count) }
                    changes.append((id, nil))
                    if removed["reason"]?.stringValue == "changed" { left.insert(id) }
                    continue
                }
                var arguments: [DatabaseValue] = []
                arguments.reserveCapacity(type.properties.count + 1)
                var key: [String: PrimitiveValue] = [:]
                for property in type.properties {
                    var value = PrimitiveValue.null
                    let json = item[property.name]
                    if let json {
                        do { value = try PrimitiveValue(json: json, for: property) } catch {
                            throw OfflineError(
                                .server, "The server sent an entity the model refuses: \(error.description)")
                        }
                    }
                    if type.key.contains(property.name) { key[property.name] = value }
                    // An accepted decimal is stored from its own text: formatting the Decimal again was a third
                    // of the decoding.
                    if case .decimal = value, case .number(let text)? = json {
                        arguments.append(
                            dialect.encodeDecimal(canonicalText: PrimitiveValue.canonicalDecimal(text)).databaseValue)
                    } else {
                        arguments.append(dialect.encode(value, as: property.type).databaseValue)
                    }
                }
                arguments.append(item["@odata.etag"]?.stringValue.map { $0.databaseValue } ?? .null)
                changes.append((try OfflineStore.entityID(set: set.name, type: type, values: key), arguments))
            }
            return (changes, left)
        }
    }

    func apply(_ page: DecodedPage, set: EntitySet, query: String, report: inout DownloadReport) throws(OfflineError) {
        let changes = page.changes
        let left = page.left
        let deltaLink = page.deltaLink
        let shared = sharedSets.contains(set.name)
        var updated = 0
        var removed = 0
        var kept = 0
        let translator = translator
        // New or changed entities replace the row with the same key; the statement is the same for every row.
        let hasStream = model.entityType(of: set)?.hasStream ?? false
        let replace: String
        do {
            replace =
                "INSERT OR REPLACE"
                + (try translator.insert(into: set.name, values: [:], systemValues: [(Self.etagColumn, .null)]).sql)
                .dropFirst("INSERT".count)
        } catch {
            throw OfflineError(.storage, error.message)
        }
        guard let values = replace.range(of: " VALUES ") else {
            throw OfflineError(.storage, "The insert statement has no VALUES clause")
        }
        let head = String(replace[..<values.lowerBound])
        // Every row binds one value per property and its ETag; at most 999 parameters a statement (SQLite's least
        // limit).
        let rowsPerStatement = max(1, min(64, 999 / ((model.entityType(of: set)?.properties.count ?? 0) + 1)))
        try write { db in
            let pending = try Self.pendingIDs(in: db)
            // New versions are written many to a statement, in the page's order (a delete writes those before it
            // first): SQLite prepares and starts one statement for up to `rowsPerStatement` rows instead of one
            // a row.
            var buffered: [DatabaseValue] = []
            var bufferedRows = 0
            func flush() throws {
                guard bufferedRows > 0 else { return }
                let width = buffered.count / bufferedRows
                let row = "(" + Array(repeating: "?", count: width).joined(separator: ", ") + ")"
                let sql = head + " VALUES " + Array(repeating: row, count: bufferedRows).joined(separator: ", ")
                try db.cachedStatement(sql: sql).execute(arguments: StatementArguments(buffered))
                buffered.removeAll(keepingCapacity: true)
                bufferedRows = 0
            }
            for change in changes {
                if shared {
                    if change.arguments != nil {
                        try db.cachedStatement(sql: #"INSERT OR IGNORE INTO "$held" (query, entityID) VALUES (?, ?)"#)
                            .execute(arguments: [query, change.id])
                    } else if !left.contains(change.id) {
                        try db.cachedStatement(sql: #"DELETE FROM "$held" WHERE entityID = ?"#)
                            .execute(arguments: [change.id])
                    } else if try Self.heldElsewhere(change.id, leaving: query, in: db) {
                        // Another defining query still holds it: its delta brings the entity's new version.
                        continue
                    }
                }
                if pending.contains(change.id) {
                    kept += 1
                    continue
                }
                guard let arguments = change.arguments else {
                    try flush()
                    let (_, _, key) = try self.parseID(change.id)
                    let delete = try translator.delete(from: set.name, key: key)
                    try db.cachedStatement(sql: delete.sql).execute(arguments: delete.statementArguments)
                    removed += db.changesCount
                    // A photo the server no longer has leaves the cache too (one waiting for its upload is queued,
                    // and kept above).
                    if hasStream {
                        try db.execute(
                            sql: #"DELETE FROM "$mediaPart" WHERE entityID = ?"#, arguments: [change.id])
                        try db.execute(
                            sql: #"DELETE FROM "$mediaInfo" WHERE entityID = ?"#, arguments: [change.id])
                    }
                    continue
                }
                buffered.append(contentsOf: arguments)
                bufferedRows += 1
                if bufferedRows == rowsPerStatement { try flush() }
                updated += 1
            }
            try flush()
            if let (name, link, exact) = deltaLink { try Self.store(link, exact: exact, of: name, in: db) }
        }
        report.updated += updated
        report.removed += removed
        report.keptLocal += kept
    }

    /// The entities with a change waiting in the upload queue: a download or sweep leaves them as they are.
    static func pendingIDs(in db: Database) throws -> Set<String> {
        Set(try String.fetchAll(db, sql: #"SELECT DISTINCT entityID FROM "$queue""#))
    }

    /// Drops `query`'s hold on an entity of a shared set and tells whether another defining query still holds it
    /// (an entity no query holds — one written before holds were kept — goes).
    static func heldElsewhere(_ id: String, leaving query: String, in db: Database) throws -> Bool {
        try db.cachedStatement(sql: #"DELETE FROM "$held" WHERE query = ? AND entityID = ?"#)
            .execute(arguments: [query, id])
        return try Bool.fetchOne(
            db, sql: #"SELECT EXISTS (SELECT 1 FROM "$held" WHERE entityID = ?)"#, arguments: [id]) ?? false
    }

    /// Stores the link the next download of a query starts from.
    static func store(_ link: String, exact: Bool, of query: String, in db: Database) throws {
        try db.execute(
            sql: #"INSERT OR REPLACE INTO "$deltaLinks" (query, link, exact) VALUES (?, ?, ?)"#,
            arguments: [query, link, exact])
    }
}
