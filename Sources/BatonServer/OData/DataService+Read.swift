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
                    joining: context.serviceRoot, "$metadata#", contextPath(target.set.name, select: url.query.select),
                    "/$entity", to: &body)
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
        if Self.wantsJSONMetadata(format: url.query.format, accept: request.header("Accept")) {
            return DataResponse(status: 200, body: .json(model.csdlJSONDocument))
        }
        return DataResponse(status: 200, body: .text(model.csdlXML, contentType: "application/xml"))
    }

    /// Whether `$metadata` answers in CSDL JSON rather than XML, its default: `$format` `json` or
    /// `application/json` (with parameters), else an `Accept` that weighs JSON above XML (RFC 9110 §12.5.1; a tie,
    /// `*/*` or a malformed value keep XML). Read by byte: Unicode lower-casing and `Character` search read a
    /// Kelvin sign as a `k`, and took `application/json, application/xml;q=0.1` for XML.
    static func wantsJSONMetadata(format: String?, accept: String?) -> Bool {
        if let format, !format.isEmpty {
            return HeaderScanner.sameName(format, "json") || HeaderScanner.mediaType(of: format) == "application/json"
        }
        guard let accept else { return false }
        let json = HeaderScanner.acceptWeight(accept, for: "application/json") ?? 0
        let xml = HeaderScanner.acceptWeight(accept, for: "application/xml") ?? 0
        return json > xml
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
