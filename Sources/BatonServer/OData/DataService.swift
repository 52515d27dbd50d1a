import BatonOData
import BatonSQL
import Foundation
import NIOCore

/// The OData v4.01 data service: executes ``DataRequest``s against the ``DataStore``. Transport-independent,
/// so `$batch` runs the same code for each of its requests: inside one transaction per atomicity group, per run of
/// consecutive other changes, and per run of consecutive reads.
final class DataService: Sendable {
    let store: DataStore
    let configuration: DataServiceConfiguration
    let clock: ServerClock
    /// The JSON writers of the read statements seen so far.
    let writers = RowJSONWriter.Cache()
    /// The SQL of the reads by key seen so far, by shape.
    let keyReads = SQLTextCache()
    /// The SQL text of updates by key, per shape (``SQLTextCache``).
    let updates = SQLTextCache()
    /// Where the audit entries of changes wait, committed with the change, for the audit log; on PostgreSQL the
    /// log itself, in the change's transaction.
    let outbox: AuditOutbox
    /// The changing requests each user has running on this instance.
    let changes: UserSlots
    /// The reads each user has running on this instance (each holds a database connection while it runs).
    let reads: UserSlots
    /// Media entities' bytes.
    let media: MediaStore
    /// ``changeColumns(_:)`` of each entity set's entities.
    let changeColumnsOfSets: [String: [String]?]
    /// When this instance last did the service-wide clean-ups changes do on the way.
    let chores = Chores()

    /// What writes a run's updates sent together (``SequencedConnection/merging``).
    var merging: SequencedConnection.Merging { SequencedConnection.Merging(translator: translator, cache: updates) }

    /// `auditLogWithTheData`: the audit log is in the store's own database (PostgreSQL), so a change's entries go
    /// into it in the change's transaction. `databaseConnections`: the instance's pool, which sizes the reads
    /// one user may have running when the configuration names no limit (``readsPerUser(databaseConnections:)``).
    init(
        store: DataStore, configuration: DataServiceConfiguration, clock: ServerClock, auditLogWithTheData: Bool,
        databaseConnections: Int = PostgresStorage.defaultConnections
    ) {
        self.store = store
        self.configuration = configuration
        self.clock = clock
        switch store.storage {
        case .sqlite(let storage):
            let file = URL(fileURLWithPath: storage.pool.path)
            media = MediaStore(backend: .files(file.deletingLastPathComponent().appendingPathComponent("media")))
        case .postgres(let storage):
            media = MediaStore(backend: .postgres(storage))
        }
        var changeColumns: [String: [String]?] = [:]
        for set in store.model.entitySets {
            guard let type = store.model.entityType(of: set) else { continue }
            changeColumns[set.name] = Self.changeColumns(set: set.name, type: type, configuration: configuration)
        }
        changeColumnsOfSets = changeColumns
        outbox = AuditOutbox(writesTheLog: auditLogWithTheData)
        changes = UserSlots(limit: configuration.maximumConcurrentChangesPerUser, for: "requests that change data")
        reads = UserSlots(
            limit: configuration.maximumConcurrentReadsPerUser
                ?? Self.readsPerUser(databaseConnections: databaseConnections),
            for: "reads")
    }

    /// The reads one user may have running on an instance with this many database connections, unless the
    /// configuration says otherwise: a quarter of them, so that one account never holds more than a quarter of
    /// the pool (with fewer than 4 connections, 1).
    static func readsPerUser(databaseConnections: Int) -> Int { max(1, databaseConnections / 4) }

    var model: ServiceModel { store.model }
    var translator: SQLTranslator {
        SQLTranslator(model: model, dialect: store.storage.dialect, now: ODataDateTimeOffset(clock.now()))
    }

    /// Who is asking, and how the response should look.
    struct Context: Sendable {
        /// The signed-in user.
        var user: String
        /// Their role.
        var role: User.Role
        /// The address a trusted load balancer reported (``ForwardedAddressMiddleware``), and the socket's peer.
        var forwardedAddress: String?
        var remoteAddress: SocketAddress?
        /// Their address, for the audit log: written out when asked for (a read never asks), once for all of a
        /// `$batch`'s changes (``writtenAddress``).
        var address: String {
            writtenAddress ?? BatonRequestContext.clientAddress(forwarded: forwardedAddress, remote: remoteAddress)
        }
        /// ``address``, written out by a `$batch` before its requests run: each change's audit entry asked for it
        /// again (the socket's address as text, a microsecond a change).
        var writtenAddress: String?
        /// The absolute service root URL, ending in `/`.
        var serviceRoot: String
        /// The negotiated OData version.
        var version: ODataVersion
        /// What on-behalf uploads in this request may rely on.
        var onBehalf = OnBehalfPolicy()
        /// The answer budget of the `$batch` this request belongs to.
        var budget: ResponseBudget?
        /// The entities the changes of this request's run of a `$batch` check their `If-Match` against, read ahead.
        var preconditions: PreconditionRows?
    }

    /// Runs one request and returns the response and the audit entries its changes produced.
    /// `EntitySet(key)`, or a page of `EntitySet` without `$count` or change tracking, with no `$expand` or delta
    /// token: the read is a single SELECT, atomic on its own.
    static func isSingleStatementRead(_ url: ODataURL, request: DataRequest) -> Bool {
        guard case .resource(let segments) = url.path, case .entitySet = segments.first, url.query.expand.isEmpty,
            url.query.deltaToken == nil
        else { return false }
        switch segments.count {
        case 1:
            // A page that starts change tracking reads the change log's position too, in the same snapshot.
            guard !url.query.count, let preferences = try? Preferences(parsing: request.headers("Prefer")) else {
                return false
            }
            return !preferences.trackChanges
        case 2:
            if case .key = segments[1] { return true }
            return false
        default: return false
        }
    }

    /// Whether a single-statement read has one of the few shapes the server itself writes per entity set (an entity
    /// by key, a page in key order, with or without `$top`, `$skip` and a next link's position), whose values are
    /// all bound: no `$filter`, `$search`, `$orderby` or `$select`, which let a client write statements without
    /// number. Only these are prepared on PostgreSQL (``ServerStorage/readStatement(prepared:_:)``).
    static func hasTheServersShape(_ url: ODataURL) -> Bool {
        url.query.filter == nil && url.query.search == nil && url.query.orderBy.isEmpty && url.query.select == nil
    }

    func execute(_ request: DataRequest, context: Context) async -> (DataResponse, [AuditEntry]) {
        do {
            let url = try parse(request.url)
            if request.method == "GET" {
                // The service document and $metadata come from the model alone.
                switch url.path {
                case .serviceDocument: return (serviceDocument(context), [])
                case .metadata: return (metadata(url, request: request), [])
                case .batch, .resource: break
                }
                let body: @Sendable (any SQLConnection) async throws -> DataResponse = { db in
                    try await self.read(url, request: request, in: db, context: context)
                }
                // An entity by key or a plain page is one SELECT: atomic on its own, without a transaction.
                let response =
                    Self.isSingleStatementRead(url, request: request)
                    ? try await store.storage.readStatement(prepared: Self.hasTheServersShape(url), body)
                    : try await store.storage.read(body)
                return (response, [])
            }
            let isolation: WriteIsolation =
                Self.isRowChecked(method: request.method, url: url, model: model) ? .rowChecked : .serializable
            return try await store.write(isolation: isolation) { db in
                var audit: [AuditEntry] = []
                let response = try await self.change(url, request: request, in: db, context: context, audit: &audit)
                try await self.outbox.stage(&audit, in: db)
                return (response, audit)
            }
        } catch let error as ServerError {
            return (.error(error), [])
        } catch let error as BatonSQLError {
            return (.error(ServerError(error)), [])
        } catch let error as StorageError where request.method == "GET" && error.dataExceptionState != nil {
            return (.error(.unevaluable(sqlState: error.dataExceptionState ?? "22000")), [])
        } catch let error as StorageError where error.kind == .unavailable {
            // The connection may have gone after the commit: the change's audit entries may wait in the outbox
            // (SQLite; on PostgreSQL they committed with it).
            if request.method != "GET" { outbox.noteBacklog() }
            return (
                .error(
                    .databaseUnavailable("The server cannot reach its database; send the request again.")), []
            )
        } catch {
            return (
                .error(
                    ServerError(.internalServerError, "InternalError", "The data service failed to handle the request.")
                ), []
            )
        }
    }

    func parse(_ url: String) throws(ServerError) -> ODataURL {
        do {
            return try ODataURL(parsing: url, model: model)
        } catch {
            if error.code == .unknownName, error.position == 0 || error.position == 1 {
                throw ServerError(.notFound, error.code.rawValue, error.description, target: error.target)
            }
            throw ServerError(error)
        }
    }

    // MARK: Addressing

    /// What a resource path addresses, resolved against the data.
    struct Target {
        var set: EntitySet
        var type: EntityType
        /// Conditions from keys and navigation, to AND with `$filter`. Changing them drops ``key``: a read by key
        /// alone ignores them.
        var conditions: [ODataExpression] { didSet { key = nil } }
        /// Whether the path addresses one entity (a key or a single-valued navigation).
        var single: Bool
        var property: String?
        var count = false
        var value = false
        /// A stream property of the addressed entity (`Set(key)/Photo`).
        var stream: String?
        /// The canonical URL of the addressed entity, when `single`: made when first asked for (a read by key never
        /// asks).
        var canonical: String? {
            get { canonicalText ?? canonicalKey.map { ResourcePath.canonicalURL(entitySet: set.name, key: $0) } }
            set {
                canonicalText = newValue
                canonicalKey = nil
            }
        }
        var canonicalText: String?
        /// The key ``canonical`` is made of, when the path ended in `Set(key)`.
        var canonicalKey: [KeyValue]?
        /// The key, when the path is `Set(key)` and its conditions are the key's alone (set after them).
        var key: [KeyValue]?
    }

    func resolve(_ url: ODataURL, in db: any SQLConnection) async throws -> Target {
        guard case .resource(let segments) = url.path, case .entitySet(let name)? = segments.first,
            let set = model.entitySet(named: name), let type = model.entityType(of: set)
        else { throw ServerError.notFound("No resource at that path.") }
        var target = Target(set: set, type: type, conditions: [], single: false)
        for segment in segments.dropFirst() {
            switch segment {
            case .key(let values):
                let first = target.conditions.isEmpty
                target.conditions += ODataExpression.keyConditions(values, of: target.type)
                target.key = first ? values : nil
                target.single = true
                target.canonicalText = nil
                target.canonicalKey = values
            case .navigation(let name):
                guard let navigation = target.type.navigationProperty(named: name),
                    let nextSet = model.targetSet(of: navigation, from: target.set),
                    let nextType = model.entityType(of: nextSet)
                else { throw ServerError.notFound("No navigation '\(name)'.") }
                let parents = try await fetch(target, options: QueryOptions(), in: db)
                guard let parent = parents.first, target.single else {
                    throw ServerError.notFound("The entity that '\(name)' starts from does not exist.")
                }
                let conditions = try navigationConditions(
                    navigation, from: target.type, to: nextType, parent: parent.values)
                target = Target(set: nextSet, type: nextType, conditions: conditions, single: !navigation.isCollection)
                if target.single, let found = try await fetch(target, options: QueryOptions(), in: db).first {
                    target.canonical = ResourcePath.canonicalURL(
                        entitySet: nextSet.name,
                        key: nextType.key.map { KeyValue(name: $0, value: found.values[$0] ?? .null) })
                }
            case .property(let name): target.property = name
            case .count: target.count = true
            case .value: target.value = true
            case .stream(let name): target.stream = name
            case .entitySet: break
            }
        }
        return target
    }

    /// Conditions on the target type that select the entities a navigation property leads to from `parent`.
    func navigationConditions(
        _ navigation: NavigationProperty, from source: EntityType, to target: EntityType,
        parent: [String: PrimitiveValue]
    ) throws -> [ODataExpression] {
        // (property on target, property on source)
        var pairs = navigation.referentialConstraints.map { ($0.referencedProperty, $0.property) }
        if pairs.isEmpty, let partner = navigation.partner.flatMap(target.navigationProperty(named:)) {
            pairs = partner.referentialConstraints.map { ($0.property, $0.referencedProperty) }
        }
        guard !pairs.isEmpty else {
            throw ServerError(
                .notImplemented, "NotImplemented",
                "Navigation '\(navigation.name)' has no referential constraint to follow.")
        }
        return pairs.compactMap { targetName, sourceName in
            target.property(named: targetName).map {
                .comparison(
                    .eq, .property(PropertyPath(property: targetName, type: $0.type, isNullable: $0.isNullable)),
                    .literal(parent[sourceName] ?? .null))
            }
        }
    }

    // MARK: Fetching

    /// A stored entity: its values and its sequence (ETag).
    struct StoredEntity {
        var values: [String: PrimitiveValue]
        var sequence: Int64
        var etag: ETag { ETag(String(sequence)) }
    }

    /// The stored entities `target` addresses. `serversOwn` says whether `options`' `$select` is the server's own
    /// choice, not a client's (``SQLTranslator/select(from:key:select:extraColumns:cache:serversOwn:)``).
    func fetch(_ target: Target, options: QueryOptions, serversOwn: Bool = false, in db: any SQLConnection)
        async throws -> [StoredEntity]
    {
        try await Self.entities(
            from: fetchRows(target, options: options, serversOwn: serversOwn, in: db), type: target.type,
            dialect: db.dialect)
    }

    /// The rows a read selects (model properties, then `$seq`), with the target's conditions applied.
    func fetchRows(
        _ target: Target, options: QueryOptions, after: [PrimitiveValue]? = nil, serversOwn: Bool = false,
        in db: any SQLConnection
    ) async throws -> [SQLRow] {
        let query = try selection(target, options: options, after: after, serversOwn: serversOwn)
        return try await db.fetchAll(query.sql, query.arguments)
    }

    /// The `select` of a read of `target` (model properties, then `$seq`): for an entity by key with no filter or
    /// paging, its text once per shape (``SQLTextCache``); otherwise translated in full with the target's conditions.
    func selection(
        _ target: Target, options: QueryOptions, range: ColumnRange? = nil, after: [PrimitiveValue]? = nil,
        serversOwn: Bool = false
    ) throws -> SQLQuery {
        if let key = target.key, range == nil, after == nil, options.filter == nil, options.search == nil,
            options.orderBy.isEmpty, options.top == nil, options.skip == nil
        {
            return try translator.select(
                from: target.set.name, key: key, select: options.select, extraColumns: [DataStore.sequenceColumn],
                cache: keyReads, serversOwn: serversOwn)
        }
        var options = options
        options.filter = ODataExpression.conjunction(target.conditions + (options.filter.map { [$0] } ?? []))
        return try translator.select(
            from: target.set.name, options: options, extraColumns: [DataStore.sequenceColumn], range: range,
            after: after)
    }

    /// Runs a read's `select` and writes up to `limit` entities, comma-separated, straight from SQLite's buffers
    /// (see ``RowJSONWriter``). With `after`, the read continues in key order after that key.
    ///
    /// - Returns: how many entities were written, whether more rows followed, the last entity's sequence, and
    ///   (when `positioned`) the key of the last entity of a full page, where the next page starts.
    func writeEntities(
        _ target: Target, options: QueryOptions, limit: Int, range: ColumnRange? = nil,
        after: [PrimitiveValue]? = nil, positioned: Bool = false, in db: any SQLConnection, to out: inout [UInt8]
    ) async throws -> (count: Int, more: Bool, sequence: Int64?, lastKey: [PrimitiveValue]?) {
        let query = try selection(target, options: options, range: range, after: after)
        var writer: RowJSONWriter?
        var count = 0
        var more = false
        var sequence: Int64?
        var lastKey: [PrimitiveValue]?
        // Asked once, not once a row.
        let dialect = db.dialect
        let annotatesMedia = target.type.hasStream || !target.type.streamProperties.isEmpty
        try await db.forEachRow(query.sql, query.arguments) { row in
            guard count < limit else {
                more = true
                return false
            }
            if count > 0 { out.append(UInt8(ascii: ",")) }
            if writer == nil {
                writer = writers.writer(for: query.sql) { RowJSONWriter(names: row.columnNames, type: target.type) }
            }
            sequence = try writer?.write(row, dialect: dialect, to: &out)
            if annotatesMedia { try Self.appendMediaAnnotations(row, target: target, dialect: dialect, to: &out) }
            count += 1
            if positioned, count == limit { lastKey = try Self.key(of: row, type: target.type, dialect: dialect) }
            return true
        }
        return (count, more, sequence, lastKey)
    }

    /// Adds a media entity's annotations to the entity just written (before its closing brace).
    static func appendMediaAnnotations(
        _ row: any SQLCursor, target: Target, dialect: SQLDialect, to out: inout [UInt8]
    ) throws {
        var values: [String: PrimitiveValue] = [:]
        for (index, name) in row.columnNames.enumerated()
        where target.type.key.contains(name) || name == "ContentType" || name == "SHA256" {
            guard let property = target.type.property(named: name) else { continue }
            values[name] = try dialect.decode(row.value(at: index), as: property.type, column: name)
        }
        let members = mediaAnnotations(set: target.set.name, type: target.type, values: values)
        guard !members.isEmpty, out.last == UInt8(ascii: "}") else { return }
        out.removeLast()
        for (name, value) in members {
            out.append(UInt8(ascii: ","))
            out.append(contentsOf: JSONValue.string(name).serializedBytes)
            out.append(UInt8(ascii: ":"))
            out.append(contentsOf: value.serializedBytes)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// The key values of the entity on a row.
    static func key(of row: any SQLCursor, type: EntityType, dialect: SQLDialect) throws -> [PrimitiveValue] {
        let names = row.columnNames
        return try type.key.map { name in
            guard let index = names.firstIndex(of: name), let property = type.property(named: name) else {
                throw BatonSQLError(.unknownName, "The read did not select the key property '\(name)'")
            }
            return try dialect.decode(row.value(at: index), as: property.type, column: name)
        }
    }

    /// Decodes rows of a `select` whose last column is `$seq`, reading columns by position (looking columns up
    /// by name costs more than decoding them).
    static func entities(from rows: [SQLRow], type: EntityType, dialect: SQLDialect = .sqlite) throws
        -> [StoredEntity]
    {
        guard let first = rows.first else { return [] }
        let names = first.columns
        let columns: [(Int, Property)] = names.enumerated().compactMap { index, name in
            type.property(named: name).map { (index, $0) }
        }
        let sequenceIndex = names.count - 1
        return try rows.map { row in
            var values: [String: PrimitiveValue] = [:]
            values.reserveCapacity(columns.count)
            for (index, property) in columns {
                values[property.name] = try dialect.decode(row[index], as: property.type, column: property.name)
            }
            return StoredEntity(values: values, sequence: row[sequenceIndex].integer ?? 0)
        }
    }

    func count(_ target: Target, options: QueryOptions, in db: any SQLConnection) async throws -> Int {
        var options = options
        options.filter = ODataExpression.conjunction(target.conditions + (options.filter.map { [$0] } ?? []))
        options.top = nil
        options.skip = nil
        let query = try translator.count(from: target.set.name, options: options)
        return Int(try await db.fetchAll(query.sql, query.arguments).first?[0].integer ?? 0)
    }
}
