import BatonOData
import BatonSQL
import Foundation

extension DataService {
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
                "The photos '\(author.prefix(scalars: 64))' took would hold more than \(configuration.mediaQuotaPerUser / (1024 * 1024)) MiB; remove some first."
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
                "The photos recorded on device '\(device.prefix(scalars: 128))' would hold more than \(configuration.mediaQuotaPerDevice / (1024 * 1024)) MiB; remove some first."
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
                "\($0.property) \((values[$0.property] ?? .null).urlLiteral.prefix(scalars: 80))"
            }.joined(separator: ", ")
            throw ServerError.badRequest(
                "No \(principalSet.name) entity for \(navigation.name) (\(named)); upload it first.",
                target: navigation.referentialConstraints.first?.property)
        }
    }
}
