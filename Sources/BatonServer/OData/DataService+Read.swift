import BatonOData
import BatonSQL
import Foundation

extension DataService {
    func read(_ url: ODataURL, request: DataRequest, in db: any SQLConnection, context: Context) async throws
        -> DataResponse
    {
        switch url.path {
        case .serviceDocument: return serviceDocument(context)
        case .metadata: return metadata(url, request: request)
        case .batch: throw ServerError(.methodNotAllowed, "MethodNotAllowed", "Send $batch requests with POST.")
        case .resource: break
        }
        let preferences = try preferences(request)
        let target = try await resolve(url, in: db)
        if target.stream != nil {
            throw ServerError.badRequest(
                "A stream property is read on its own (GET Set(key)/Name), not inside a $batch.")
        }
        // A photo's bytes are streamed by their own route, never inside a `$batch` (whose answer is JSON).
        if target.value, target.property == nil {
            throw ServerError(
                .notImplemented, "NotImplemented",
                "A media entity's $value is read on its own (GET …/$value), not inside a $batch.")
        }
        if url.query.deltaToken != nil {
            var page = try await delta(url, request: request, target: target, in: db, context: context)
            page.isDeltaPage = page.status == 200
            return page
        }
        if target.count {
            return await DataResponse(
                status: 200, headers: [("Content-Type", "text/plain")],
                body: .text(String(try count(target, options: url.query, in: db)), contentType: "text/plain"))
        }
        if target.single {
            if target.property == nil, url.query.expand.isEmpty {
                // The whole entity, written straight from its row.
                var body: [UInt8] = []
                body.reserveCapacity(512)
                body.append(contentsOf: #"{"@odata.context":"#.utf8)
                RowJSONWriter.string(
                    "\(context.serviceRoot)$metadata#\(contextPath(target.set.name, select: url.query.select))/$entity",
                    to: &body)
                let start = body.count
                let written = try await writeEntities(
                    target, options: url.query.withoutPaging, limit: 1, in: db, to: &body)
                guard let sequence = written.sequence else {
                    throw ServerError.notFound("No entity at '\(url.pathText(of: request.url))'.")
                }
                // The entity's own opening brace becomes the separator after the context.
                body[start] = UInt8(ascii: ",")
                return DataResponse(
                    status: 200, headers: [("ETag", ETag(String(sequence)).headerValue)], body: .rawJSON(body))
            }
            let rows = try await fetchRows(target, options: url.query.withoutPaging, in: db)
            guard let entity = try Self.entities(from: rows, type: target.type, dialect: db.dialect).first else {
                throw ServerError.notFound("No entity at '\(url.pathText(of: request.url))'.")
            }
            return try await single(entity, target: target, url: url, in: db, context: context)
        }
        return try await collection(
            target, url: url, request: request, preferences: preferences, in: db, context: context)
    }

    func preferences(_ request: DataRequest) throws -> Preferences {
        do { return try Preferences(parsing: request.headers("Prefer")) } catch { throw ServerError(error) }
    }

    func serviceDocument(_ context: Context) -> DataResponse {
        let sets: [JSONValue] = model.entitySets.map {
            .object([("name", .string($0.name)), ("kind", .string("EntitySet")), ("url", .string($0.name))])
        }
        return DataResponse(
            status: 200,
            body: .json(
                .object([("@odata.context", .string(context.serviceRoot + "$metadata")), ("value", .array(sets))])))
    }

    func metadata(_ url: ODataURL, request: DataRequest) -> DataResponse {
        let format = url.query.format?.lowercased() ?? ""
        let accept = request.header("Accept")?.lowercased() ?? ""
        if format == "json" || format.hasPrefix("application/json")
            || (format.isEmpty && accept.contains("application/json") && !accept.contains("xml"))
        {
            return DataResponse(status: 200, body: .json(model.csdlJSONDocument))
        }
        return DataResponse(status: 200, body: .text(model.csdlXML, contentType: "application/xml"))
    }

    func single(_ entity: StoredEntity, target: Target, url: ODataURL, in db: any SQLConnection, context: Context)
        async
        throws
        -> DataResponse
    {
        let headers = [("ETag", entity.etag.headerValue)]
        if let name = target.property, let property = target.type.property(named: name) {
            let value = entity.values[name] ?? .null
            if target.value {
                guard !value.isNull else { return DataResponse(status: 204, headers: headers) }
                let text: String = if case .string(let string) = value { string } else { value.urlLiteral }
                return DataResponse(
                    status: 200, headers: headers, body: .text(text, contentType: "text/plain; charset=utf-8"))
            }
            return DataResponse(
                status: 200, headers: headers,
                body: .json(
                    .object([
                        (
                            "@odata.context",
                            .string("\(context.serviceRoot)$metadata#\(target.canonical ?? target.set.name)/\(name)")
                        ),
                        ("value", value.json(as: property.type)),
                    ])))
        }
        var expanded = 0
        var json = try await entityJSON(
            entity, target: target, options: url.query, depth: 0, expanded: &expanded, in: db)
        if case .object(var members) = json {
            members.insert(
                (
                    "@odata.context",
                    .string(
                        "\(context.serviceRoot)$metadata#\(contextPath(target.set.name, select: url.query.select))/$entity"
                    )
                ), at: 0)
            json = .object(members)
        }
        return DataResponse(status: 200, headers: headers, body: .json(json))
    }

    func contextPath(_ set: String, select: [String]?) -> String {
        guard let select else { return set }
        return "\(set)(\(select.joined(separator: ",")))"
    }

    /// An entity as JSON with `@odata.etag`, selected properties and expanded navigation properties.
    ///
    /// `expanded` counts the entities that `$expand` has added to the whole answer so far; past
    /// ``DataServiceConfiguration/maximumExpandedEntities`` the read stops with a 400 `LimitExceeded`, so that one
    /// request cannot make an answer that grows with the square of the data.
    func entityJSON(
        _ entity: StoredEntity, target: Target, options: QueryOptions, depth: Int, expanded: inout Int,
        in db: any SQLConnection
    ) async throws -> JSONValue {
        // Key properties are always written, so clients can identify entities whatever they select.
        let select = options.select.map { selected in selected + target.type.key.filter { !selected.contains($0) } }
        var json = EntityPayload(values: entity.values).json(as: target.type, select: select, etag: entity.etag)
        guard !options.expand.isEmpty, case .object(var members) = json else { return json }
        guard depth < configuration.maximumExpandDepth else {
            throw ServerError.badRequest(
                "$expand nests deeper than \(configuration.maximumExpandDepth) levels.", target: "$expand")
        }
        for item in options.expand {
            guard let navigation = target.type.navigationProperty(named: item.navigationProperty),
                let nextSet = model.targetSet(of: navigation, from: target.set),
                let nextType = model.entityType(of: nextSet)
            else { continue }
            let conditions = try navigationConditions(
                navigation, from: target.type, to: nextType, parent: entity.values)
            let next = Target(set: nextSet, type: nextType, conditions: conditions, single: !navigation.isCollection)
            var limited = item.options
            let allowed = configuration.maximumExpandedEntities - expanded
            // One row more than is allowed tells that the limit was passed, without reading all of them.
            limited.top = min(item.options.top ?? Int.max, allowed + 1)
            let related = try await fetch(next, options: limited, in: db)
            expanded += related.count
            guard expanded <= configuration.maximumExpandedEntities else {
                throw ServerError(
                    .badRequest, "LimitExceeded",
                    "This read expands more than \(configuration.maximumExpandedEntities) entities; ask for fewer with $top, or with $top or $filter inside $expand.",
                    target: "$expand")
            }
            var jsons: [JSONValue] = []
            jsons.reserveCapacity(related.count)
            for entity in related {
                await jsons.append(
                    try entityJSON(
                        entity, target: next, options: item.options, depth: depth + 1, expanded: &expanded, in: db))
            }
            members.append((item.navigationProperty, navigation.isCollection ? .array(jsons) : (jsons.first ?? .null)))
        }
        json = .object(members)
        return json
    }

    func pageSize(_ preferences: Preferences) -> Int {
        min(preferences.maxPageSize ?? configuration.defaultPageSize, configuration.maximumPageSize)
    }

    func collection(
        _ target: Target, url: ODataURL, request: DataRequest, preferences: Preferences, in db: any SQLConnection,
        context: Context
    ) async throws -> DataResponse {
        let size = pageSize(preferences)
        let token = try url.query.skipToken.map { try Self.decodeSkipToken($0, type: target.type) }
        let offset = token?.offset ?? 0
        // Reads in key order continue after the last key served (a position that entities deleted or changed
        // before it do not move); reads with an $orderby continue at an offset.
        let keyed = url.query.orderBy.isEmpty
        if token?.after != nil, !keyed { throw Self.invalidSkipToken }
        // Change tracking: the delta link of the last page starts where the first page's snapshot stood, so a
        // change to an entity already paged past reaches the next delta.
        var tracked = token?.through
        switch (tracked, db.dialect) {
        case (.sequence?, .postgres), (.snapshot?, .sqlite): throw Self.invalidSkipToken
        default: break
        }
        if tracked == nil, preferences.trackChanges { tracked = try await Watermark.current(db) }
        var options = url.query
        let requestedTop = url.query.top
        let remaining = requestedTop.map { max(0, $0 - offset) }
        let pageLimit = min(size, remaining ?? size)
        if token?.after != nil {
            // The $skip was spent on the first page.
            options.skip = nil
        } else {
            // Saturating: a huge $skip plus a token offset must not overflow (an overflow would crash the server).
            let skip = (url.query.skip ?? 0).addingReportingOverflow(offset)
            options.skip = skip.overflow ? Int.max : skip.partialValue
        }
        // One row more than the page tells whether another page follows, without a second query.
        options.top = pageLimit + 1
        // Without $expand, entities are written straight from the rows.
        var values: [JSONValue] = []
        var raw: [UInt8]?
        let followed: Bool
        let consumed: Int
        var lastKey: [PrimitiveValue]?
        if url.query.expand.isEmpty {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(pageLimit * 400)
            let written = try await writeEntities(
                target, options: options, limit: pageLimit, after: token?.after, positioned: keyed, in: db, to: &bytes)
            (followed, consumed, lastKey) = (written.more, offset + written.count, written.lastKey)
            raw = bytes
        } else {
            var rows = try await fetchRows(target, options: options, after: token?.after, in: db)
            followed = rows.count > pageLimit
            if followed { rows.removeLast() }
            consumed = offset + rows.count
            var expanded = 0
            let entities = try Self.entities(from: rows, type: target.type, dialect: db.dialect)
            if keyed, let last = entities.last { lastKey = target.type.key.map { last.values[$0] ?? .null } }
            for entity in entities {
                await values.append(
                    try entityJSON(entity, target: target, options: url.query, depth: 0, expanded: &expanded, in: db))
            }
        }
        var nextLink: String?
        if followed, pageLimit > 0, requestedTop.map({ consumed < $0 }) ?? true {
            nextLink =
                context.serviceRoot
                + Self.replacingQueryOption(
                    in: request.url, names: ["skiptoken"],
                    with: (
                        "$skiptoken",
                        Self.encodeSkipToken(
                            offset: consumed, through: tracked, after: keyed ? lastKey : nil, type: target.type)
                    ))
        }
        var headers: [(String, String)] = []
        var applied: [Preference] = []
        if preferences.maxPageSize != nil { applied.append(Preference(name: "odata.maxpagesize", value: String(size))) }
        var deltaLink: String?
        if let through = tracked, nextLink == nil {
            // Pages after the first are read live: they may bring entities created after `through`, which the
            // client then holds (the token says so, for the entities that later leave its filter).
            let held = token == nil ? through : try await Watermark.current(db)
            deltaLink =
                context.serviceRoot
                + Self.replacingQueryOption(
                    in: request.url, names: ["skiptoken", "deltatoken", "top", "skip", "orderby", "count"],
                    with: ("$deltatoken", Self.encodeDeltaToken(through: through, held: held)))
            applied.append(Preference(name: "odata.track-changes"))
        } else if preferences.trackChanges {
            applied.append(Preference(name: "odata.track-changes"))
        }
        if !applied.isEmpty { headers.append(("Preference-Applied", Preferences.applied(applied))) }
        let payload = await ODataPayload.collection(
            context: context.serviceRoot + "$metadata#" + contextPath(target.set.name, select: url.query.select),
            entities: raw == nil ? values : [Self.marker],
            count: url.query.count ? try count(target, options: url.query, in: db) : nil, nextLink: nextLink,
            deltaLink: deltaLink)
        guard let raw else { return DataResponse(status: 200, headers: headers, body: .json(payload)) }
        return try Self.splicing(raw, into: payload, headers: headers)
    }

    // MARK: Delta

    func delta(_ url: ODataURL, request: DataRequest, target: Target, in db: any SQLConnection, context: Context)
        async throws
        -> DataResponse
    {
        guard !target.single, let tokenText = url.query.deltaToken, let token = Self.decodeDeltaToken(tokenText) else {
            throw ServerError.badRequest("The $deltatoken is not one this server issued.", target: "$deltatoken")
        }
        let (from, heldThrough) = token
        let now = try await Watermark.current(db)
        let gone = ServerError(
            .gone, "Gone",
            "The delta token is older than the \(Int(configuration.deltaRetention / 86_400))-day retention window; read the collection again."
        )
        let notIssued = ServerError.badRequest("The $deltatoken is not one this server issued.", target: "$deltatoken")
        let horizons = try await DataStore.horizons(db)
        switch (from, heldThrough, now) {
        case (.sequence(let from), .sequence(let held), .sequence(let value)):
            guard from >= horizons.sequence else { throw gone }
            guard held <= value else { throw notIssued }
        case (.sequence(let from), .sequence(let held), .snapshot):
            // A token from before PostgreSQL's writers took blocks of the sequence (see ``Watermark/window``).
            guard from >= horizons.sequence else { throw gone }
            guard held <= (try await DataStore.highestIssued(db)) else { throw notIssued }
        case (.snapshot(let from), .snapshot(let held), .snapshot(let current)):
            // The horizon is the newest forgotten tombstone's transaction: one the token's snapshot may not have
            // seen.
            guard Int64(from.xmin) > horizons.transaction else { throw gone }
            guard held.xmax <= current.xmax, from.xmax <= current.xmax else { throw notIssued }
        default: throw notIssued
        }
        // Pages walk the changes in sequence order from the last one served, not by position: a change served
        // on one page and changed again before the next moves past `through` (to the next delta) without
        // shifting what is left of this one.
        let skip = try url.query.skipToken.map(Self.decodeDeltaSkipToken)
        let through = skip?.through ?? now
        // A page's `through` is the first page's watermark: of this engine, not before `from`, not from the future.
        switch (from, through, now) {
        case (.sequence(let from), .sequence(let through), .sequence(let now)) where from <= through && through <= now:
            break
        case (.sequence, .snapshot(let through), .snapshot(let now)) where through.xmax <= now.xmax: break
        case (.snapshot(let from), .snapshot(let through), .snapshot(let now))
        where from.xmax <= through.xmax && through.xmax <= now.xmax:
            break
        default: throw Self.invalidSkipToken
        }
        let range = try from.window(through: through, after: skip?.after)
        let size = pageSize(try preferences(request))
        var options = url.query
        options.deltaToken = nil
        options.orderBy = []
        options.skip = nil
        // Without $expand, entities are written straight from the rows, as a page of a read is.
        var values: [JSONValue] = []
        var raw: [UInt8]?
        let last: (sequence: Int64, more: Bool)?
        if url.query.expand.isEmpty {
            options.top = size + 1
            var bytes: [UInt8] = []
            bytes.reserveCapacity(size * 400)
            let written = try await writeEntities(
                target, options: options, limit: size, range: range, in: db, to: &bytes)
            last = written.sequence.map { ($0, written.more) }
            raw = bytes
        } else {
            options.top = size
            let changed = try await fetchRange(target, options: options, range: range, in: db)
            var expanded = 0
            for entity in changed {
                await values.append(
                    try entityJSON(entity, target: target, options: url.query, depth: 0, expanded: &expanded, in: db))
            }
            last = changed.last.map { ($0.sequence, changed.count == size) }
        }
        let format: ODataPayload.DeltaFormat = context.version == .v40 ? .v40 : .v401
        let contextBase = context.serviceRoot + "$metadata"
        if skip == nil {
            // Deletions first: an entity deleted and created again within the range is deleted, then written.
            // Removals are not paged: past a bound, the client reads the collection again, in pages.
            let bound = configuration.maximumDeltaRemovals
            let tooMuch = ServerError(
                .gone, "Gone", "So much changed since this delta link that the collection is read again, in pages.")
            var removals: [JSONValue] = []
            let tombstones: [SQLRow]
            if let window = range.snapshots, let start = window.from {
                tombstones = try await db.fetchAll(
                    #"SELECT keyJSON FROM "$removed" WHERE entitySet = ? AND "$xid" >= pg_snapshot_xmin(?::pg_snapshot) AND NOT pg_visible_in_snapshot("$xid", ?::pg_snapshot) AND pg_visible_in_snapshot("$xid", ?::pg_snapshot) ORDER BY seq LIMIT ?"#,
                    target.set.name, start, start, window.through, Int64(bound + 1))
            } else if let window = range.snapshots {
                tombstones = try await db.fetchAll(
                    #"SELECT keyJSON FROM "$removed" WHERE entitySet = ? AND seq > ? AND pg_visible_in_snapshot("$xid", ?::pg_snapshot) ORDER BY seq LIMIT ?"#,
                    target.set.name, range.after, window.through, Int64(bound + 1))
            } else {
                tombstones = try await db.fetchAll(
                    #"SELECT keyJSON FROM "$removed" WHERE entitySet = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?"#,
                    target.set.name, range.after, range.through, Int64(bound + 1))
            }
            guard tombstones.count <= bound else { throw tooMuch }
            for row in tombstones {
                removals.append(
                    ODataPayload.removed(
                        id: row["keyJSON"].text ?? "", format: format, contextBase: contextBase,
                        entitySet: target.set.name))
            }
            // Entities that changed but no longer match the filter left the set: said to the clients that may
            // hold them. A device naming itself (`Baton-Device`, one the reader is registered on) holds what was
            // created up to its token and what it created itself; the others are not sent to it (they never
            // matched for it).
            if options.filter != nil || options.search != nil {
                var held = range
                if let device = request.header("Baton-Device"), context.onBehalf.uploaderDevices.contains(device) {
                    held.provenance =
                        switch heldThrough {
                        case .sequence(let watermark):
                            .init(
                                createdColumn: DataStore.createdColumn, watermark: watermark,
                                originColumn: DataStore.originColumn, origin: device)
                        case .snapshot(let snapshot):
                            .init(
                                createdColumn: DataStore.createdTransactionColumn, watermark: 0,
                                snapshot: snapshot.text,
                                originColumn: DataStore.originColumn, origin: device)
                        }
                }
                var unfiltered = QueryOptions()
                unfiltered.select = target.type.key
                unfiltered.top = bound + 1
                let all = try await fetchRange(target, options: unfiltered, range: held, in: db)
                guard all.count <= bound else { throw tooMuch }
                if !all.isEmpty {
                    var matching = options
                    matching.top = nil
                    matching.skip = nil
                    matching.select = target.type.key
                    let kept = await Set(
                        try fetchRange(target, options: matching, range: held, in: db).map {
                            keyURL($0, target: target)
                        })
                    for entity in all where !kept.contains(keyURL(entity, target: target)) {
                        removals.append(
                            ODataPayload.removed(
                                id: keyURL(entity, target: target), format: format, contextBase: contextBase,
                                entitySet: target.set.name, reason: "changed"))
                    }
                }
            }
            values = removals + values
        }
        var nextLink: String?
        var deltaLink: String?
        if let last, last.more {
            nextLink =
                context.serviceRoot
                + Self.replacingQueryOption(
                    in: request.url, names: ["skiptoken"],
                    with: ("$skiptoken", Self.encodeDeltaSkipToken(after: last.sequence, through: through)))
        } else {
            deltaLink =
                context.serviceRoot
                + Self.replacingQueryOption(
                    in: request.url, names: ["skiptoken", "deltatoken"], with: ("$deltatoken", through.token))
        }
        let payload = ODataPayload.collection(
            context: contextBase + "#\(target.set.name)/$delta", entities: values + (raw == nil ? [] : [Self.marker]),
            nextLink: nextLink, deltaLink: deltaLink)
        guard let raw else { return DataResponse(status: 200, body: .json(payload)) }
        return try Self.splicing(raw, into: payload, headers: [])
    }

    /// The element a payload holds where the rows' JSON goes (see ``splicing(_:into:headers:)``).
    static let marker = JSONValue.string("\u{0}")

    /// The payload's bytes with the rows' JSON (comma-separated entities) in place of its ``marker``, the last
    /// element of its `value`.
    static func splicing(_ raw: [UInt8], into payload: JSONValue, headers: [(String, String)]) throws -> DataResponse {
        let envelope = payload.serializedBytes
        guard let found = envelope.firstRange(of: Array(#""\u0000"]"#.utf8)) else {
            throw ServerError(.internalServerError, "InternalError", "The response could not be assembled.")
        }
        var start = found.lowerBound
        let end = found.upperBound - 1
        // No rows: the marker goes with the comma before it (when other elements precede it).
        if raw.isEmpty, start > envelope.startIndex, envelope[start - 1] == UInt8(ascii: ",") { start -= 1 }
        var body = Array(envelope[..<start])
        body.reserveCapacity(envelope.count + raw.count)
        body += raw
        body += envelope[end...]
        return DataResponse(status: 200, headers: headers, body: .rawJSON(body))
    }

    func fetchRange(_ target: Target, options: QueryOptions, range: ColumnRange, in db: any SQLConnection) async throws
        -> [StoredEntity]
    {
        var options = options
        options.filter = ODataExpression.conjunction(target.conditions + (options.filter.map { [$0] } ?? []))
        let query = try translator.select(
            from: target.set.name, options: options, extraColumns: [DataStore.sequenceColumn], range: range)
        return try await Self.entities(
            from: db.fetchAll(query.sql, query.arguments), type: target.type, dialect: db.dialect)
    }

    func keyURL(_ entity: StoredEntity, target: Target) -> String {
        ResourcePath.canonicalURL(
            entitySet: target.set.name,
            key: target.type.key.map { KeyValue(name: $0, value: entity.values[$0] ?? .null) })
    }

    // MARK: Tokens and links

    /// Where a read in pages stands: how many entities it served, the sequence value its change tracking starts
    /// at, and the key of the last entity served (for reads in key order).
    struct SkipToken {
        var offset: Int
        var through: Watermark?
        var after: [PrimitiveValue]?
    }

    /// An opaque skip token: base64url of `k<offset>:<through or ->:<the last key, as a JSON array>`, or of
    /// `offset[:through]` for reads that continue at an offset.
    static func encodeSkipToken(offset: Int, through: Watermark?, after: [PrimitiveValue]? = nil, type: EntityType)
        -> String
    {
        guard let after else {
            return base64URL(Data((through.map { "\(offset):\($0.token)" } ?? String(offset)).utf8))
        }
        let text = "k\(offset):\(through?.token ?? "-"):\(keyJSON(after, type: type))"
        // A key too long for a token (a string key of kilobytes) continues at the offset instead.
        guard text.utf8.count <= maximumKeyPosition else {
            return encodeSkipToken(offset: offset, through: through, after: nil, type: type)
        }
        return base64URL(Data(text.utf8))
    }

    /// A key's values (in the type's key order) as the JSON array a skip token carries.
    static func keyJSON(_ values: [PrimitiveValue], type: EntityType) -> String {
        JSONValue.array(zip(type.keyProperties, values).map { property, value in value.json(as: property.type) })
            .serialized
    }

    /// The longest key position a skip token carries, in bytes before base64: a longer one is not parsed (and
    /// never written: such a read continues at its offset).
    static let maximumKeyPosition = 8 * 1024

    /// The longest skip token read at all: a key position's, in base64.
    static let maximumSkipToken = (maximumKeyPosition + 2) / 3 * 4

    /// The longest key a create accepts, as JSON: with the offset and sequence it fits ``maximumKeyPosition``, so
    /// only keys stored some other way (written into the database directly) are ever paged by offset.
    static let maximumKeyBytes = 4 * 1024

    /// A delta token: where the client's copy stands (``Watermark``), and (when later) where it stood when it read
    /// the last entity it holds (`through.held`).
    static func encodeDeltaToken(through: Watermark, held: Watermark) -> String {
        held == through ? through.token : "\(through.token).\(held.token)"
    }

    /// The two watermarks of a delta token, or nil for one this server did not issue.
    static func decodeDeltaToken(_ token: String) -> (through: Watermark, held: Watermark)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, let through = Watermark(token: parts[0]) else { return nil }
        guard parts.count == 2 else { return (through, through) }
        guard let held = Watermark(token: parts[1]) else { return nil }
        switch (through, held) {
        case (.sequence(let through), .sequence(let held)) where held > through: break
        case (.snapshot(let through), .snapshot(let held)) where held != through && held.xmax >= through.xmax: break
        default: return nil
        }
        return (through, held)
    }

    /// A delta page's skip token: the last sequence served and the page set's `through`.
    static func encodeDeltaSkipToken(after: Int64, through: Watermark) -> String {
        base64URL(Data("s\(after):\(through.token)".utf8))
    }

    /// The last sequence served and `through`; a token from before sequence-order paging (a position) starts the
    /// delta over from its token (changes are sent again, none is skipped).
    static func decodeDeltaSkipToken(_ token: String) throws -> (after: Int64?, through: Watermark?) {
        guard token.utf8.count <= maximumSkipToken, let data = Data(base64URLEncoded: token) else {
            throw invalidSkipToken
        }
        let text = String(decoding: data, as: UTF8.self)
        guard text.hasPrefix("s") else { return (nil, try decodeSkipToken(token, type: nil).through) }
        let parts = text.dropFirst().split(separator: ":")
        guard parts.count == 2, let after = Int64(parts[0]), let through = Watermark(token: parts[1]), after >= 0
        else { throw invalidSkipToken }
        if case .sequence(let through) = through, after > through { throw invalidSkipToken }
        return (after, through)
    }

    /// A skip token's position; a key position must be a key of `type` (nil: none is accepted).
    static func decodeSkipToken(_ token: String, type: EntityType?) throws -> SkipToken {
        guard token.utf8.count <= maximumSkipToken, let data = Data(base64URLEncoded: token) else {
            throw invalidSkipToken
        }
        let text = String(decoding: data, as: UTF8.self)
        if text.hasPrefix("k") {
            let parts = text.dropFirst().split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard let type, parts.count == 3, let offset = Int(parts[0]), (0...maximumOffset).contains(offset),
                let members = (try? JSONValue(parsing: parts[2]))?.arrayValue, members.count == type.key.count
            else { throw invalidSkipToken }
            var through: Watermark?
            if parts[1] != "-" {
                guard let value = Watermark(token: parts[1]) else { throw invalidSkipToken }
                through = value
            }
            var after: [PrimitiveValue] = []
            for (name, member) in zip(type.key, members) {
                // The key's type only, not its facets: a key stored before the model tightened one (a shorter
                // MaxLength) is still a position this server wrote.
                guard let property = type.property(named: name),
                    let value = try? PrimitiveValue(
                        json: member, for: Property(name: name, type: property.type, isNullable: false)),
                    !value.isNull
                else { throw invalidSkipToken }
                after.append(value)
            }
            return SkipToken(offset: offset, through: through, after: after)
        }
        let parts = text.split(separator: ":")
        guard let offset = parts.first.flatMap({ Int($0) }), (0...maximumOffset).contains(offset), parts.count <= 2
        else {
            throw invalidSkipToken
        }
        if parts.count == 2 {
            guard let through = Watermark(token: parts[1]) else { throw invalidSkipToken }
            return SkipToken(offset: offset, through: through)
        }
        return SkipToken(offset: offset)
    }

    /// The largest offset a skip token may carry: far beyond any real collection, far below overflow.
    static let maximumOffset = 1 << 40

    static let invalidSkipToken = ServerError.badRequest(
        "The $skiptoken is not one this server issued; follow @odata.nextLink as given.", target: "$skiptoken")

    /// The relative URL with the named query options (with or without `$`, any case) removed and `option`
    /// appended.
    static func replacingQueryOption(in url: String, names: Set<String>, with option: (String, String)) -> String {
        let parts = url.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        var items = parts.count > 1 ? parts[1].split(separator: "&").map(String.init) : []
        items.removeAll { item in
            let name =
                (item.split(separator: "=", maxSplits: 1).first.map(String.init) ?? "").removingPercentEncoding ?? ""
            let bare = (name.hasPrefix("$") ? String(name.dropFirst()) : name).lowercased()
            return names.contains(bare)
        }
        items.append("\(option.0)=\(option.1)")
        return String(parts[0]) + "?" + items.joined(separator: "&")
    }
}

extension QueryOptions {
    /// The options without paging, for reads of one entity.
    var withoutPaging: QueryOptions {
        var options = self
        options.top = nil
        options.skip = nil
        return options
    }
}

extension ODataURL {
    /// The path part of a raw relative URL, for messages.
    func pathText(of raw: String) -> String {
        String(raw.split(separator: "?", maxSplits: 1).first ?? "")
    }
}
