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
            let who = attribution.author == context.user ? "" : " ('\(attribution.author.prefix(64))' is ground staff)"
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
    /// entity does not exist.
    func checkPrecondition(_ target: Target, request: DataRequest, in db: any SQLConnection) async throws
        -> StoredEntity
    {
        guard let header = request.header("If-Match") else {
            throw ServerError(
                .preconditionRequired, "PreconditionRequired",
                "Changes need an If-Match header with the entity's ETag (or *), so concurrent changes are not lost.")
        }
        let condition: ETagCondition
        do { condition = try ETagCondition(parsing: header) } catch { throw ServerError(error) }
        guard let current = try await fetch(target, options: QueryOptions(), in: db).first else {
            throw ServerError.notFound("No entity at \(target.canonical ?? target.set.name).")
        }
        guard condition.matches(current.etag) else {
            throw ServerError(
                .preconditionFailed, "PreconditionFailed",
                "The entity changed since you read it (its ETag is now \(current.etag.headerValue)); read it again and reapply your change."
            )
        }
        return current
    }

    func update(
        _ target: Target, request: DataRequest, replace: Bool, attribution: Attribution, preferences: Preferences,
        in db: any SQLConnection,
        context: Context, audit: inout [AuditEntry]
    ) async throws -> DataResponse {
        try await checkSignedPrecondition(request, attribution: attribution, in: db)
        let current = try await checkPrecondition(target, request: request, in: db)
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
        let update = try translator.update(
            target.set.name, key: key, values: values, systemValues: [(DataStore.sequenceColumn, .integer(sequence))])
        do {
            try await db.perform(update.sql, update.arguments)
        } catch let error as StorageError where error.kind == .constraintViolation || error.kind == .uniqueViolation {
            throw ServerError.badRequest("The change leaves a required property empty.")
        }
        // The representation is read back (as stored); a minimal answer needs only the new ETag (the sequence).
        let entity: StoredEntity
        if preferences.returnPreference == "representation" {
            guard let stored = try await fetch(target, options: QueryOptions(), in: db).first else {
                throw ServerError(.internalServerError, "InternalError", "The changed entity could not be read back.")
            }
            entity = stored
        } else {
            entity = StoredEntity(values: current.values.merging(values) { $1 }, sequence: sequence)
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
        let current = try await checkPrecondition(target, request: request, in: db)
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
        try await DataStore.purgeTombstones(db, before: clock.now().addingTimeInterval(-configuration.deltaRetention))
        audit.append(auditEntry("entity-deleted", canonical, attribution: attribution, context: context))
        return DataResponse(status: 204)
    }

    /// The response to a successful create or update: the representation, or 204 with `return=minimal`
    /// (creates default to the representation, updates to minimal, as OData specifies).
    func written(
        _ entity: StoredEntity, target: Target, status: Int, preferences: Preferences, context: Context,
        defaultRepresentation: Bool
    ) -> DataResponse {
        let canonical = target.canonical ?? target.set.name
        var headers = [("ETag", entity.etag.headerValue)]
        if status == 201 {
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

    /// A media entity's annotations (OData JSON 4.01 §8.3): where its bytes are read and replaced, their type, and
    /// their ETag (the SHA-256) — from the values at hand (a `$select` without them leaves them out).
    static func mediaAnnotations(set: String, type: EntityType, values: [String: PrimitiveValue])
        -> [(String, JSONValue)]
    {
        guard type.hasStream || !type.streamProperties.isEmpty else { return [] }
        var members: [(String, JSONValue)] = []
        let key = type.key.map { KeyValue(name: $0, value: values[$0] ?? .null) }
        if !key.isEmpty, key.allSatisfy({ !$0.value.isNull }) {
            let canonical = ResourcePath.canonicalURL(entitySet: set, key: key)
            // Each stream property where its bytes are read and replaced (204 while it holds none).
            for stream in type.streamProperties {
                members.append(("\(stream)@odata.mediaReadLink", .string(canonical + "/" + stream)))
                members.append(("\(stream)@odata.mediaEditLink", .string(canonical + "/" + stream)))
            }
            guard type.hasStream else { return members }
            let link = canonical + "/$value"
            members.append(("@odata.mediaReadLink", .string(link)))
            members.append(("@odata.mediaEditLink", .string(link)))
        }
        guard type.hasStream else { return members }
        if case .string(let contentType)? = values["ContentType"] {
            members.append(("@odata.mediaContentType", .string(contentType)))
        }
        if case .string(let sha256)? = values["SHA256"] {
            members.append(("@odata.mediaEtag", .string("\"\(sha256)\"")))
        }
        return members
    }

    /// Refuses media that would take the photos `author` took past ``DataServiceConfiguration/mediaQuotaPerUser``
    /// (counting the entity's current bytes out when they are replaced): 413 `MediaQuotaExceeded`.
    func checkMediaQuota(
        _ target: Target, adding media: StoredMedia, author: String, device: String? = nil,
        replacing current: StoredEntity?, in db: any SQLConnection
    ) async throws {
        guard target.type.property(named: "TakenBy") != nil, target.type.property(named: "Size") != nil else { return }
        let used =
            try await db.fetchOne(
                "SELECT CAST(COALESCE(SUM(\(db.dialect.quote("Size"))), 0) AS bigint) FROM \(db.dialect.quote(target.set.name)) WHERE \(db.dialect.quote("TakenBy")) = ?",
                author)?[0].integer ?? 0
        let replaced: Int64 =
            if case .integer(let size)? = current?.values["Size"] { size } else { 0 }
        guard used - replaced + media.size <= configuration.mediaQuotaPerUser else {
            throw ServerError(
                .contentTooLarge, "MediaQuotaExceeded",
                "The photos '\(author.prefix(64))' took would hold more than \(configuration.mediaQuotaPerUser / (1024 * 1024)) MiB; remove some first."
            )
        }
        guard let device, current == nil else { return }
        let onDevice =
            try await db.fetchOne(
                "SELECT CAST(COALESCE(SUM(\(db.dialect.quote("Size"))), 0) AS bigint) FROM \(db.dialect.quote(target.set.name)) WHERE \(db.dialect.quote(DataStore.originColumn)) = ?",
                device)?[0].integer ?? 0
        guard onDevice + media.size <= configuration.mediaQuotaPerDevice else {
            throw ServerError(
                .contentTooLarge, "MediaQuotaExceeded",
                "The photos recorded on device '\(device.prefix(128))' would hold more than \(configuration.mediaQuotaPerDevice / (1024 * 1024)) MiB; remove some first."
            )
        }
    }

    /// A media request with what its properties may leave to the server, as OData's media creation does: a new
    /// key (a single `Edm.Guid` key), and the time its photo was taken (when it arrives).
    func mediaProperties(_ request: DataRequest, type: EntityType) -> DataRequest {
        var request = request
        var members = (try? JSONValue(parsing: request.body))?.objectMembers ?? []
        guard request.body.isEmpty || !members.isEmpty else { return request }
        var added = false
        if type.key.count == 1, let key = type.keyProperties.first, key.type == .guid,
            !members.contains(where: { $0.0 == key.name })
        {
            members.append((key.name, .string(UUID().uuidString.lowercased())))
            added = true
        }
        if type.property(named: "TakenAt")?.type == .dateTimeOffset, !members.contains(where: { $0.0 == "TakenAt" }) {
            members.append(("TakenAt", .string(ODataDateTimeOffset(clock.now()).description)))
            added = true
        }
        if added { request.body = JSONValue.object(members).serializedBytes }
        return request
    }

    /// Before a photo's bytes are stored, refuses what its change would be refused for anyway — a set ground staff
    /// may not change, properties the model refuses, a check that does not exist or is someone else's final one,
    /// a quota the declared length would pass; for a `PUT` of `$value`, a missing or stale `If-Match` and someone
    /// else's photo — so a refused upload stores nothing. The change checks all of it again when it is applied.
    /// An upload on another author's behalf is checked as far as it can be before its signature is (which covers
    /// the bytes): the rest when it is applied.
    ///
    /// A request sent again that was applied already (the same repeatability id and fingerprint, under the
    /// signed-in user's scope or its author's and device's) is not judged again: its stored answer is what it gets,
    /// whatever the quota or the photo's ETag say now.
    func admitMedia(_ request: DataRequest, context: Context, expectedSize: Int64?) async throws {
        let url = try parse(request.url)
        let author = request.header("Baton-Author") ?? context.user
        if let requestID = request.header("Repeatability-Request-ID") {
            let scopes = [context.user] + (request.header("Baton-Device").map { ["\(author)\n\($0)"] } ?? [])
            let fingerprint = Self.fingerprint(request)
            let applied = try await store.storage.read { db in
                try await db.fetchOne(
                    #"SELECT 1 FROM "$repeatability" WHERE requestID = ? AND fingerprint = ? AND scope IN (?, ?)"#,
                    requestID, fingerprint, scopes[0], scopes.count > 1 ? scopes[1] : scopes[0]) != nil
            }
            if applied { return }
        }
        let own = author == context.user
        let attribution = Attribution(author: context.user, uploader: context.user, authorRole: context.role)
        try await store.storage.read { db in
            let target = try await self.resolve(url, in: db)
            if own, context.role == .groundStaff, !self.configuration.groundStaffWritableSets.contains(target.set.name)
            {
                throw ServerError.forbidden("Only supervisors and admins change \(target.set.name).")
            }
            if request.method == "POST" {
                let values = try self.decode(
                    self.mediaProperties(request, type: target.type), as: target.type, mode: .create
                ).values
                try await self.checkPrincipals(target, values: values, attribution: own ? attribution : nil, in: db)
                if own, let expectedSize {
                    let media = StoredMedia(sha256: "", receivedSHA256: "", size: expectedSize, kind: .jpeg, slug: nil)
                    try await self.checkMediaQuota(target, adding: media, author: context.user, replacing: nil, in: db)
                }
            } else {
                let current = try await self.checkPrecondition(target, request: request, in: db)
                if own { try self.checkOwnership(target, current: current, attribution: attribution) }
            }
        }
    }

    /// Refuses a media entity whose required single-valued navigations lead nowhere — a photo belongs to a check
    /// that exists (a tablet uploads the check first) — or, for ground staff, to a final check someone else
    /// recorded (``checkOwnership(_:current:attribution:)``: only its author adds evidence to it).
    func checkPrincipals(
        _ target: Target, values: [String: PrimitiveValue], attribution: Attribution?, in db: any SQLConnection
    ) async throws {
        for navigation in target.type.navigationProperties
        where !navigation.isCollection && !navigation.isNullable && !navigation.referentialConstraints.isEmpty {
            guard let principalSet = model.targetSet(of: navigation, from: target.set),
                let principalType = model.entityType(of: principalSet)
            else { continue }
            let conditions = try navigationConditions(
                navigation, from: target.type, to: principalType, parent: values)
            let principal = Target(set: principalSet, type: principalType, conditions: conditions, single: true)
            if let found = try await fetch(principal, options: QueryOptions(), in: db).first {
                if let attribution { try checkOwnership(principal, current: found, attribution: attribution) }
                continue
            }
            let named = navigation.referentialConstraints.map {
                "\($0.property) \((values[$0.property] ?? .null).urlLiteral.prefix(80))"
            }.joined(separator: ", ")
            throw ServerError.badRequest(
                "No \(principalSet.name) entity for \(navigation.name) (\(named)); upload it first.",
                target: navigation.referentialConstraints.first?.property)
        }
    }
}
