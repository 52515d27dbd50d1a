import BatonOData
import BatonSQL
import Foundation

extension DataService {
    /// Who a change counts as: its author (`CheckedBy`) and who uploaded it (`UploadedBy`).
    struct Attribution: Sendable {
        var author: String
        var uploader: String
        /// The author's role now (the signed-in user's, for their own unsigned change).
        var authorRole: User.Role
        /// The signed fields, for a change uploaded on its author's behalf (verified).
        var signed: SignedFields?
        /// The device the change was recorded on, when known: its request id is kept under (author, device), and
        /// changes queued after it there may build on the ETag it produces.
        var device: String?

        init(author: String, uploader: String, authorRole: User.Role, signed: SignedFields? = nil) {
            self.author = author
            self.uploader = uploader
            self.authorRole = authorRole
            self.signed = signed
        }
    }

    /// Applies a change; with repeatability headers, at most once (see ``changeRepeatably``).
    func change(
        _ url: ODataURL, request: DataRequest, in db: any SQLConnection, context: Context, audit: inout [AuditEntry]
    )
        async
        throws -> DataResponse
    {
        try await changeRepeatably(url, request: request, in: db, context: context, audit: &audit)
    }

    /// The entity set a change addresses, once its author may change it: ground staff change only
    /// ``DataServiceConfiguration/groundStaffWritableSets``. For a change uploaded on someone's behalf it is the
    /// author's role that counts, not the uploader's.
    func authorizedTarget(
        _ url: ODataURL, request: DataRequest, attribution: Attribution, context: Context, in db: any SQLConnection
    ) async throws -> Target {
        guard case .resource = url.path else {
            throw ServerError(
                .methodNotAllowed, "MethodNotAllowed", "\(request.method) is not allowed on this resource.")
        }
        let target = try await resolve(url, in: db)
        guard target.property == nil, !target.count else {
            throw ServerError(
                .notImplemented, "NotImplemented",
                "Changing a single property or a count is not implemented; PATCH the entity.")
        }
        guard attribution.authorRole != .groundStaff || configuration.groundStaffWritableSets.contains(target.set.name)
        else {
            let who =
                attribution.author == context.user
                ? "" : " ('\(attribution.author.prefix(scalars: 64))' is ground staff)"
            throw ServerError.forbidden("Only supervisors and admins change \(target.set.name)\(who).")
        }
        return target
    }

    func apply(
        _ target: Target, request: DataRequest, attribution: Attribution, in db: any SQLConnection, context: Context,
        audit: inout [AuditEntry]
    ) async throws -> DataResponse {
        let preferences = try preferences(request)
        if let stream = target.stream {
            return try await changeStream(
                target, name: stream, request: request, attribution: attribution, in: db, context: context,
                audit: &audit)
        }
        if target.value {
            // A media entity's bytes: replaced with PUT (its `$value` is read outside the data transaction).
            guard request.method == "PUT", target.single, target.type.hasStream, request.media != nil else {
                throw ServerError(
                    .methodNotAllowed, "MethodNotAllowed",
                    "A media entity's $value is replaced with PUT and the new bytes; its properties change with PATCH on the entity."
                )
            }
            return try await update(
                target, request: request, replace: false, attribution: attribution, preferences: preferences, in: db,
                context: context, audit: &audit)
        }
        switch request.method {
        case "POST":
            guard !target.single, target.conditions.isEmpty else {
                throw ServerError(
                    .notImplemented, "NotImplemented", "Create entities by POSTing to the entity set itself.")
            }
            return try await create(
                target, request: request, attribution: attribution, preferences: preferences, in: db, context: context,
                audit: &audit)
        case "PATCH", "PUT":
            guard target.single else {
                throw ServerError(
                    .methodNotAllowed, "MethodNotAllowed", "\(request.method) needs one entity: add its key.")
            }
            return try await update(
                target, request: request, replace: request.method == "PUT", attribution: attribution,
                preferences: preferences, in: db, context: context, audit: &audit)
        case "DELETE":
            guard target.single else {
                throw ServerError(.methodNotAllowed, "MethodNotAllowed", "DELETE needs one entity: add its key.")
            }
            return try await delete(
                target, request: request, attribution: attribution, in: db, context: context, audit: &audit)
        default:
            throw ServerError(
                .methodNotAllowed, "MethodNotAllowed", "\(request.method) is not supported by the data service.")
        }
    }

    /// Refuses a change of a final entity (``DataServiceConfiguration/finalEntities``) by ground staff who are not
    /// its author: a final check is changed only by whoever recorded it, or by a supervisor or admin.
    func checkOwnership(_ target: Target, current: StoredEntity, attribution: Attribution) throws {
        if attribution.authorRole == .groundStaff, let authorProperty = configuration.authoredEntities[target.set.name],
            !(current.values[authorProperty] ?? .null).isIdentical(to: .string(attribution.author))
        {
            throw ServerError(
                .forbidden, "NotTheAuthor",
                "\(target.canonical ?? target.set.name) was recorded by someone else; only its author or a supervisor changes it."
            )
        }
        guard attribution.authorRole == .groundStaff, let rule = configuration.finalEntities[target.set.name],
            current.values[rule.statusProperty] == .string(rule.finalValue),
            current.values[rule.authorProperty] != .string(attribution.author)
        else { return }
        throw ServerError(
            .forbidden, "NotTheAuthor",
            "\(target.canonical ?? target.set.name) is \(rule.finalValue) and was recorded by someone else; only its author or a supervisor changes it."
        )
    }

    /// Sets the server-kept properties the type has: `ChangedAt`, `CheckedBy` (the author of the latest change),
    /// a media entity's `TakenBy` (its author, set when it is created and kept), `UploadedBy`, and from a media
    /// entity's stored bytes `ContentType`, `Size` and `SHA256`.
    func applyServerKept(
        _ values: inout [String: PrimitiveValue], type: EntityType, attribution: Attribution, creating: Bool,
        media: StoredMedia? = nil
    ) {
        for property in type.properties where property.isComputed {
            switch property.name {
            case "ChangedAt": values[property.name] = .dateTimeOffset(ODataDateTimeOffset(clock.now()))
            case "CheckedBy": values[property.name] = .string(attribution.author)
            case "TakenBy": if creating { values[property.name] = .string(attribution.author) }
            case "UploadedBy": values[property.name] = .string(attribution.uploader)
            case "ContentType": if let media { values[property.name] = .string(media.kind.rawValue) }
            case "Size": if let media { values[property.name] = .integer(media.size) }
            case "SHA256": if let media { values[property.name] = .string(media.sha256) }
            default: break
            }
        }
    }

    /// The media types a media entity accepts, for messages.
    static let mediaTypes = ImageKind.allCases.map(\.rawValue).joined(separator: ", ")

    func decode(_ request: DataRequest, as type: EntityType, mode: EntityPayload.Mode) throws -> EntityPayload {
        // A media entity's bytes come with their properties in `Slug`, or none.
        if request.media != nil, request.body.isEmpty { return EntityPayload(values: [:]) }
        do {
            if let json = request.json { return try EntityPayload(json: json, as: type, mode: mode, model: model) }
            return try EntityPayload(decoding: request.body, as: type, mode: mode, model: model)
        } catch {
            throw ServerError(error)
        }
    }

    func create(
        _ target: Target, request: DataRequest, attribution: Attribution, preferences: Preferences,
        in db: any SQLConnection,
        context: Context,
        audit: inout [AuditEntry]
    ) async throws -> DataResponse {
        guard target.type.hasStream == (request.media != nil) else {
            throw request.media == nil
                ? ServerError(
                    .unsupportedMediaType, "MediaExpected",
                    "\(target.set.name) holds media entities: POST the photo's bytes (\(Self.mediaTypes)), with its properties in a Slug header."
                )
                : ServerError(.unsupportedMediaType, "NotAMediaEntity", "\(target.set.name) takes JSON, not media.")
        }
        let request = request.media != nil ? mediaProperties(request, type: target.type) : request
        var values = try decode(request, as: target.type, mode: .create).values
        applyServerKept(&values, type: target.type, attribution: attribution, creating: true, media: request.media)
        if let media = request.media {
            try await checkPrincipals(target, values: values, attribution: attribution, in: db)
            try await checkMediaQuota(
                target, adding: media, author: attribution.author, device: attribution.device, replacing: nil, in: db)
        }
        // A key travels in every URL and skip token: one longer than a token carries could only be paged by offset.
        let keyJSON = Self.keyJSON(target.type.key.map { values[$0] ?? .null }, type: target.type)
        guard keyJSON.utf8.count <= Self.maximumKeyBytes else {
            throw ServerError.badRequest(
                "The key of an entity of \(target.set.name) may take at most \(Self.maximumKeyBytes) bytes as JSON; this one takes \(keyJSON.utf8.count).",
                target: target.type.key.first)
        }
        let sequence = try await DataStore.nextSequence(db)
        let insert = try translator.insert(
            into: target.set.name, values: values,
            systemValues: DataStore.created(at: sequence, on: attribution.device))
        do {
            try await db.perform(insert.sql, insert.arguments)
        } catch let error as StorageError where error.kind == .uniqueViolation {
            throw ServerError.conflict("An entity of \(target.set.name) with this key already exists.")
        }
        let key = target.type.key.map { KeyValue(name: $0, value: values[$0] ?? .null) }
        let canonical = ResourcePath.canonicalURL(entitySet: target.set.name, key: key)
        var created = target
        created.conditions = key.compactMap { part in
            target.type.property(named: part.name).map {
                .comparison(
                    .eq, .property(PropertyPath(property: part.name, type: $0.type, isNullable: false)),
                    .literal(part.value))
            }
        }
        created.single = true
        created.canonical = canonical
        guard let entity = try await fetch(created, options: QueryOptions(), in: db).first else {
            throw ServerError(.internalServerError, "InternalError", "The created entity could not be read back.")
        }
        audit.append(auditEntry("entity-created", canonical, attribution: attribution, context: context))
        return written(
            entity, target: created, status: 201, preferences: preferences, context: context,
            defaultRepresentation: true)
    }

    /// Checks `If-Match` against the stored entity: 428 without it, 412 when it does not match, 404 when the
    /// entity does not exist. `columns` are the properties of the entity to read (``changeColumns(_:)``); all of
    /// them when `nil`. Returns the entity as stored, with those properties.
    ///
    /// The entity is taken from `prefetched` when it was read ahead there with the same columns (a `$batch`'s run,
    /// ``PreconditionRows``).
    func checkPrecondition(
        _ target: Target, request: DataRequest, columns: [String]? = nil, prefetched: PreconditionRows? = nil,
        in db: any SQLConnection
    ) async throws -> StoredEntity {
        guard let header = request.header("If-Match") else {
            throw ServerError(
                .preconditionRequired, "PreconditionRequired",
                "Changes need an If-Match header with the entity's ETag (or *), so concurrent changes are not lost.")
        }
        let condition: ETagCondition
        do { condition = try ETagCondition(parsing: header) } catch { throw ServerError(error) }
        let current: StoredEntity
        if let prefetched, let columns, let key = target.key,
            let entity = prefetched.take(set: target.set.name, key: key, columns: columns)
        {
            current = entity
        } else {
            var options = QueryOptions()
            options.select = columns
            // The server's own `$select`: it does not count against the places clients' `$select` shapes take.
            guard let entity = try await fetch(target, options: options, serversOwn: columns != nil, in: db).first
            else {
                throw ServerError.notFound("No entity at \(target.canonical ?? target.set.name).")
            }
            current = entity
        }
        guard condition.matches(current.etag) else {
            throw ServerError(
                .preconditionFailed, "PreconditionFailed",
                "The entity changed since you read it (its ETag is now \(current.etag.headerValue)); read it again and reapply your change."
            )
        }
        return current
    }

    /// The properties an update or a delete reads of the entity it changes, besides its ETag: its key, and what
    /// decides who may change it (``checkOwnership(_:current:attribution:)``). `nil` — all of them — for a media
    /// entity or one with stream properties, whose checks read more. Reading and decoding every property of the
    /// entity was a tenth of a change in a `$batch`.
    ///
    /// Made once per entity set, when the service starts (``changeColumnsOfSets``): made per change, it was two
    /// hundredths of a change in a `$batch`.
    func changeColumns(_ target: Target) -> [String]? { changeColumns(of: target.set) }

    /// ``changeColumns(_:)`` of the entities of `set`.
    func changeColumns(of set: EntitySet) -> [String]? { changeColumnsOfSets[set.name] ?? nil }

    /// ``changeColumns(_:)`` of an entity of `set`, of `type`.
    static func changeColumns(set: String, type: EntityType, configuration: DataServiceConfiguration) -> [String]? {
        guard !type.hasStream, type.streamProperties.isEmpty else { return nil }
        var names = type.key
        if let author = configuration.authoredEntities[set] { names.append(author) }
        if let rule = configuration.finalEntities[set] {
            names += [rule.statusProperty, rule.authorProperty]
        }
        // A configured name the type does not have reads as null, as it did when every property was read.
        return names.filter { type.property(named: $0) != nil }
    }

    func update(
        _ target: Target, request: DataRequest, replace: Bool, attribution: Attribution, preferences: Preferences,
        in db: any SQLConnection,
        context: Context, audit: inout [AuditEntry]
    ) async throws -> DataResponse {
        try await checkSignedPrecondition(request, attribution: attribution, in: db)
        let current = try await checkPrecondition(
            target, request: request, columns: changeColumns(target), prefetched: context.preconditions, in: db)
        try checkOwnership(target, current: current, attribution: attribution)
        // A media entity's new bytes (`PUT …/$value`) change only what the server keeps about them.
        let payload =
            request.media != nil
            ? EntityPayload(values: [:]) : try decode(request, as: target.type, mode: replace ? .replace : .merge)
        for name in target.type.key
        where payload.values[name].map({ !$0.isIdentical(to: current.values[name] ?? .null) }) ?? false {
            throw ServerError.badRequest(
                "Key property '\(name)' cannot change; create a new entity instead.", target: name)
        }
        var values: [String: PrimitiveValue] = [:]
        for property in target.type.properties where !property.isComputed && !target.type.key.contains(property.name) {
            if let value = payload.values[property.name] {
                values[property.name] = value
            } else if replace {
                values[property.name] = .null
            }
        }
        applyServerKept(&values, type: target.type, attribution: attribution, creating: false, media: request.media)
        if target.type.hasStream {
            try await checkPrincipals(
                target, values: current.values.merging(values) { $1 }, attribution: attribution, in: db)
        }
        let key = target.type.key.map { KeyValue(name: $0, value: current.values[$0] ?? .null) }
        if let media = request.media {
            var owner = attribution.author
            if case .string(let takenBy)? = current.values["TakenBy"] { owner = takenBy }
            try await checkMediaQuota(target, adding: media, author: owner, replacing: current, in: db)
        }
        let sequence = try await DataStore.nextSequence(db)
        let systemValues: [(String, SQLValue)] = [(DataStore.sequenceColumn, .integer(sequence))]
        // Sent with the run's next updates of this set, in one statement, when the run merges them; a failure sends the
        // run (or the group) again, each update by itself.
        let deferred =
            !target.type.hasStream && target.type.streamProperties.isEmpty
            && preferences.returnPreference != "representation"
            && (db as? SequencedConnection)?.deferUpdate(
                target.set.name, SQLTranslator.RowUpdate(key: key, values: values, systemValues: systemValues)) == true
        if !deferred {
            let update = try translator.update(
                target.set.name, key: key, values: values, systemValues: systemValues, cache: updates)
            do {
                try await db.perform(update.sql, update.arguments)
            } catch let error as StorageError
                where error.kind == .constraintViolation || error.kind == .uniqueViolation
            {
                throw ServerError.badRequest("The change leaves a required property empty.")
            }
        }
        // The representation is read back (as stored); a minimal answer needs only the new ETag (the sequence).
        let entity: StoredEntity
        if preferences.returnPreference == "representation" {
            guard let stored = try await fetch(target, options: QueryOptions(), in: db).first else {
                throw ServerError(.internalServerError, "InternalError", "The changed entity could not be read back.")
            }
            entity = stored
        } else {
            // Any other answer to an update is minimal (204 and the new ETag): no values are written out.
            entity = StoredEntity(values: [:], sequence: sequence)
        }
        let canonical = target.canonical ?? ResourcePath.canonicalURL(entitySet: target.set.name, key: key)
        audit.append(auditEntry("entity-updated", canonical, attribution: attribution, context: context))
        return written(
            entity, target: target, status: 200, preferences: preferences, context: context,
            defaultRepresentation: false)
    }

    func delete(
        _ target: Target, request: DataRequest, attribution: Attribution, in db: any SQLConnection, context: Context,
        audit: inout [AuditEntry]
    ) async throws -> DataResponse {
        try await checkSignedPrecondition(request, attribution: attribution, in: db)
        let current = try await checkPrecondition(
            target, request: request, columns: changeColumns(target), prefetched: context.preconditions, in: db)
        try checkOwnership(target, current: current, attribution: attribution)
        let key = target.type.key.map { KeyValue(name: $0, value: current.values[$0] ?? .null) }
        let delete = try translator.delete(from: target.set.name, key: key)
        try await db.perform(delete.sql, delete.arguments)
        let sequence = try await DataStore.nextSequence(db)
        let canonical = ResourcePath.canonicalURL(entitySet: target.set.name, key: key)
        if !target.type.streamProperties.isEmpty {
            try await removeStreams(set: target.set.name, canonical: canonical, in: db)
        }
        try await db.execute(
            #"INSERT INTO "$removed" (seq, entitySet, keyJSON, removedAt) VALUES (?, ?, ?, ?)"#, sequence,
            target.set.name, canonical, clock.now())
        if chores.isDue(.tombstones, window: configuration.deltaRetention, at: clock.now()) {
            try await DataStore.purgeTombstones(
                db, before: clock.now().addingTimeInterval(-configuration.deltaRetention))
        }
        audit.append(auditEntry("entity-deleted", canonical, attribution: attribution, context: context))
        return DataResponse(status: 204)
    }

    /// The response to a successful create or update: the representation, or 204 with `return=minimal`
    /// (creates default to the representation, updates to minimal, as OData specifies).
    func written(
        _ entity: StoredEntity, target: Target, status: Int, preferences: Preferences, context: Context,
        defaultRepresentation: Bool
    ) -> DataResponse {
        var headers = [("ETag", entity.etag.headerValue)]
        if status == 201 {
            // Made only for a creation's headers: an update's answer names no URL (0.7% of a batch change's samples).
            let canonical = target.canonical ?? target.set.name
            headers.append(("Location", context.serviceRoot + canonical))
            headers.append(("OData-EntityId", context.serviceRoot + canonical))
        }
        let wantsRepresentation = preferences.returnPreference.map { $0 == "representation" } ?? defaultRepresentation
        if let choice = preferences.returnPreference {
            headers.append(
                ("Preference-Applied", "return=\(choice == "representation" ? "representation" : "minimal")"))
        }
        guard wantsRepresentation else { return DataResponse(status: 204, headers: headers) }
        var json = EntityPayload(values: entity.values).json(as: target.type, etag: entity.etag)
        if case .object(var members) = json {
            members.insert(
                ("@odata.context", .string("\(context.serviceRoot)$metadata#\(target.set.name)/$entity")), at: 0)
            members += Self.mediaAnnotations(set: target.set.name, type: target.type, values: entity.values)
            json = .object(members)
        }
        return DataResponse(status: status, headers: headers, body: .json(json))
    }

    func auditEntry(_ action: String, _ subject: String, attribution: Attribution, context: Context) -> AuditEntry {
        AuditEntry(
            at: clock.now(), actor: attribution.author, action: action, subject: subject, address: context.address,
            detail: "uploaded by \(attribution.uploader)")
    }
}
