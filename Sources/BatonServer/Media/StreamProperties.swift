import BatonOData
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Stream properties (`Edm.Stream`, OData 4.01 §11.2.10, §11.4.9.3) of a model's entity types: each a photo of its
/// own beside the entity's properties — `Inspections(…)/Photo` — read with `GET`, replaced with `PUT` and the
/// bytes (with `If-Match`: the entity's ETag), removed with `DELETE`.
///
/// Their bytes are kept as a media entity's are (``MediaStore``, checked and scrubbed the same way), and which
/// bytes a stream holds is a row of `$stream` (entity set, the entity's canonical URL, property, SHA-256, type,
/// size). A change of a stream is a change of its entity: it needs the entity's ETag, is judged as a `PATCH` of it
/// would be (who may change the set, someone else's final or authored entity, an author's signature), moves the
/// entity's ETag — so delta links carry it — and is audited.
extension DataService {
    /// The stream a `$stream` row records.
    struct StreamValue: Sendable {
        var sha256: String
        var kind: ImageKind
        var size: Int64
    }

    /// The stream `name` of the entity at `canonical`, if it holds bytes.
    func streamValue(set: String, canonical: String, name: String, in db: any SQLConnection) async throws
        -> StreamValue?
    {
        guard
            let row = try await db.fetchOne(
                #"SELECT sha256, contentType, size FROM "$stream" WHERE entitySet = ? AND entity = ? AND property = ?"#,
                set, canonical, name),
            let sha256 = row["sha256"].text, let kind = row["contentType"].text.flatMap(ImageKind.init(contentType:)),
            let size = row["size"].integer
        else { return nil }
        return StreamValue(sha256: sha256, kind: kind, size: size)
    }

    /// `PUT` (with the stored bytes in `request.media`) or `DELETE` of a stream property: the entity's
    /// precondition and ownership as for a `PATCH`, then the `$stream` row, a new ETag, an audit entry.
    func changeStream(
        _ target: Target, name: String, request: DataRequest, attribution: Attribution, in db: any SQLConnection,
        context: Context, audit: inout [AuditEntry]
    ) async throws -> DataResponse {
        guard target.single else {
            throw ServerError.badRequest("A stream property is addressed through its entity's key: Set(key)/\(name).")
        }
        switch request.method {
        case "PUT" where request.media != nil, "DELETE": break
        default:
            throw ServerError(
                .methodNotAllowed, "MethodNotAllowed",
                "A stream property is read with GET, replaced with PUT and its bytes, and removed with DELETE.")
        }
        try await checkSignedPrecondition(request, attribution: attribution, in: db)
        let current = try await checkPrecondition(target, request: request, in: db)
        try checkOwnership(target, current: current, attribution: attribution)
        // Named by the key as stored (one entity has one name, however its URL spelled the key).
        let key = target.type.key.map { KeyValue(name: $0, value: current.values[$0] ?? .null) }
        let canonical = ResourcePath.canonicalURL(entitySet: target.set.name, key: key)
        if let media = request.media {
            let used =
                try await db.fetchOne(
                    #"SELECT CAST(COALESCE(SUM(size), 0) AS bigint) FROM "$stream" WHERE owner = ?"#,
                    attribution.author)?[0].integer ?? 0
            let replaced = try await streamValue(set: target.set.name, canonical: canonical, name: name, in: db)
            guard used - (replaced?.size ?? 0) + media.size <= configuration.mediaQuotaPerUser else {
                throw ServerError(
                    .contentTooLarge, "MediaQuotaExceeded",
                    "The streams '\(attribution.author.prefix(64))' stored would hold more than \(configuration.mediaQuotaPerUser / (1024 * 1024)) MiB; remove some first."
                )
            }
        }
        try await db.execute(
            #"DELETE FROM "$stream" WHERE entitySet = ? AND entity = ? AND property = ?"#, target.set.name, canonical,
            name)
        if let media = request.media {
            try await db.execute(
                #"""
                INSERT INTO "$stream" (entitySet, entity, property, sha256, contentType, size, owner)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """#, target.set.name, canonical, name, media.sha256, media.kind.rawValue, media.size,
                attribution.author)
        }
        // The entity changed: a new ETag, and delta links carry it.
        var values: [String: PrimitiveValue] = [:]
        applyServerKept(&values, type: target.type, attribution: attribution, creating: false)
        let sequence = try await DataStore.nextSequence(db)
        let update = try translator.update(
            target.set.name, key: key, values: values, systemValues: [(DataStore.sequenceColumn, .integer(sequence))])
        try await db.perform(update.sql, update.arguments)
        var entry = auditEntry("entity-updated", canonical, attribution: attribution, context: context)
        entry.detail =
            "\(request.media == nil ? "removed" : "replaced") stream \(name), uploaded by \(attribution.uploader)"
        audit.append(entry)
        return DataResponse(status: 204, headers: [("ETag", ETag(String(sequence)).headerValue)])
    }

    /// Removes the streams of an entity deleted (their bytes go with the media sweep).
    func removeStreams(set: String, canonical: String, in db: any SQLConnection) async throws {
        try await db.execute(#"DELETE FROM "$stream" WHERE entitySet = ? AND entity = ?"#, set, canonical)
    }

    /// A model's media entity types need the properties where the server records their bytes and who took them:
    /// `SHA256`, `ContentType` and `TakenBy` (`Edm.String`) and `Size` (`Edm.Int64`), each `Core.Computed` — the
    /// quotas count a person's photos by `TakenBy`.
    ///
    /// - Throws: ``ServerSetupError`` naming the type and what it lacks.
    static func checkMediaTypes(_ model: ServiceModel) throws(ServerSetupError) {
        for type in model.entityTypes where type.hasStream {
            let needed = [
                ("SHA256", EdmPrimitiveType.string), ("ContentType", .string), ("TakenBy", .string), ("Size", .int64),
            ]
            for (name, kind) in needed {
                guard let property = type.property(named: name), property.type == kind, property.isComputed else {
                    throw ServerSetupError(
                        "Media entity type '\(type.name)' (HasStream) needs a property '\(name)' of type \(kind.rawValue) annotated Core.Computed: the server records its bytes and who took them there."
                    )
                }
            }
        }
    }
}

extension ODataRoutes {
    /// `GET Set(key)/Name`: the entity is read as any read is (permissions, 404), then its stream's bytes are
    /// checked against their SHA-256 and streamed; 204 when the stream holds none.
    func readStream(
        _ name: String, url: String, request: Request, dataContext: DataService.Context, context: BatonRequestContext
    ) async throws -> Response {
        guard let parsed = try? service.parse(url), case .resource(let segments) = parsed.path, segments.count == 3,
            case .entitySet(let set) = segments[0], case .key(let key) = segments[1]
        else {
            throw ServerError.badRequest("A stream property is addressed through its entity's key: Set(key)/\(name).")
        }
        // The entity as the parsed URL names it (not the URL's text cut by characters).
        let entityURL = ResourcePath.canonicalURL(entitySet: set, key: key)
        let read = DataRequest(method: "GET", url: entityURL, headers: [("Accept", "application/json")], body: [])
        let answer = try await execute(read, context: dataContext, modelOnly: false, logger: context.logger)
        guard answer.status == 200, let entity = answer.jsonBody,
            let type = service.model.entitySet(named: set).flatMap(service.model.entityType(of:))
        else { return Self.httpResponse(answer, version: dataContext.version) }
        // Named by the key as stored, read back (one entity has one name, however the URL spelled its key).
        let stored = try key.map { given in
            guard let property = type.property(named: given.name), let json = entity[given.name] else { return given }
            return KeyValue(name: given.name, value: try PrimitiveValue(json: json, for: property))
        }
        let canonical = ResourcePath.canonicalURL(entitySet: set, key: stored)
        let service = service
        guard
            let stream = try await service.store.storage.read({ db in
                try await service.streamValue(set: set, canonical: canonical, name: name, in: db)
            })
        else { return Response(status: .noContent, headers: [.cacheControl: "private, no-cache"]) }
        let etag = "\"\(stream.sha256)\""
        var headers = Self.mediaHeaders(kind: stream.kind, entityURL: canonical + name, etag: etag)
        if let match = request.headers[.ifNoneMatch], match == etag || match == "*" {
            return Response(status: .notModified, headers: headers)
        }
        let reader = try await service.media.answerReader(stream.sha256, logger: context.logger)
        headers[.contentLength] = String(stream.size)
        return Response(status: .ok, headers: headers, body: reader.responseBody)
    }
}
