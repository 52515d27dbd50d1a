import BatonOData
import BatonSQL
import Foundation

extension DataService {
    // MARK: Delta

    func delta(_ url: ODataURL, request: DataRequest, target: Target, in db: any SQLConnection, context: Context)
        async throws
        -> DataResponse
    {
        guard !target.single, let tokenText = url.query.deltaToken, let token = Self.decodeDeltaToken(tokenText) else {
            throw ServerError.badRequest("The $deltatoken is not one this server issued.", target: "$deltatoken")
        }
        let (from, heldThrough) = token
        let (now, horizons) = try await Watermark.currentWithHorizons(db)
        // Made only when thrown: built on every page, the three errors of this read were 1% of a delta page's CPU.
        func gone() -> ServerError {
            ServerError(
                .gone, "Gone",
                "The delta token is older than the \(Int(configuration.deltaRetention / 86_400))-day retention window; read the collection again."
            )
        }
        func notIssued() -> ServerError {
            ServerError.badRequest("The $deltatoken is not one this server issued.", target: "$deltatoken")
        }
        switch (from, heldThrough, now) {
        case (.sequence(let from), .sequence(let held), .sequence(let value)):
            guard from >= horizons.sequence else { throw gone() }
            guard held <= value else { throw notIssued() }
        case (.sequence(let from), .sequence(let held), .snapshot):
            // A token from before PostgreSQL's writers took blocks of the sequence (see ``Watermark/window``).
            guard from >= horizons.sequence else { throw gone() }
            guard held <= (try await DataStore.highestIssued(db)) else { throw notIssued() }
        case (.snapshot(let from), .snapshot(let held), .snapshot(let current)):
            // The horizon is the newest forgotten tombstone's transaction: one the token's snapshot may not have
            // seen.
            guard Int64(from.xmin) > horizons.transaction else { throw gone() }
            guard held.xmax <= current.xmax, from.xmax <= current.xmax else { throw notIssued() }
        default: throw notIssued()
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
            func tooMuch() -> ServerError {
                ServerError(
                    .gone, "Gone", "So much changed since this delta link that the collection is read again, in pages.")
            }
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
            guard tombstones.count <= bound else { throw tooMuch() }
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
                guard all.count <= bound else { throw tooMuch() }
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
        // Searched from the end by byte (the marker is the value's last element; Foundation's generic
        // `firstRange(of:)` was a fiftieth of a delta page).
        guard let start0 = Self.lastMarker(in: envelope) else {
            throw ServerError(.internalServerError, "InternalError", "The response could not be assembled.")
        }
        var start = start0
        let end = start0 + markerBytes.count - 1
        // No rows: the marker goes with the comma before it (when other elements precede it).
        if raw.isEmpty, start > envelope.startIndex, envelope[start - 1] == UInt8(ascii: ",") { start -= 1 }
        var body = Array(envelope[..<start])
        body.reserveCapacity(envelope.count + raw.count)
        body += raw
        body += envelope[end...]
        return DataResponse(status: 200, headers: headers, body: .rawJSON(body))
    }

    /// The serialized ``marker`` and the `]` that closes the value after it.
    static let markerBytes = Array(#""\u0000"]"#.utf8)

    /// Where the last ``markerBytes`` start in `envelope`.
    static func lastMarker(in envelope: [UInt8]) -> Int? {
        let count = markerBytes.count
        guard envelope.count >= count else { return nil }
        var start = envelope.count - count
        while start >= 0 {
            if envelope[start] == markerBytes[0], envelope[start..<(start + count)].elementsEqual(markerBytes) {
                return start
            }
            start -= 1
        }
        return nil
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
}
