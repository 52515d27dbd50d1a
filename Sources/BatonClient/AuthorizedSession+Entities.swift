import BatonOData
import Foundation

/// Typed entities straight from the server, with the user's token: for an app (or a cockpit-like tool) that is
/// online. A tablet works through the offline store instead, which takes the same types.
extension AuthorizedSession {
    /// The entities of `type` on the server for a query (`$filter=TailNumber eq 'D-AIBL'&$top=20`), every page
    /// of a paged answer followed. A literal that may hold `&`, `#`, `%` or `+` goes through
    /// `ODataURL.queryValue` first, as for the offline store.
    ///
    /// - Throws: ``BatonClientError`` with the server's message (`ServerError` and its status for a query the
    ///   server refuses), `InvalidResponse` for a body that is not entities of `type`.
    public func entities<Entity: ODataEntity>(_ type: Entity.Type, _ query: String = "")
        async throws(BatonClientError) -> [Entity]
    {
        var next: URL? = try url(query.isEmpty ? Entity.entitySetName : Entity.entitySetName + "?" + encode(query))
        var entities: [Entity] = []
        var visited: Set<String> = []
        while let url = next {
            guard visited.insert(url.absoluteString).inserted else {
                throw BatonClientError(
                    .invalidResponse, "The server's pages of \(Entity.entitySetName) go round in a loop.")
            }
            let response = try await send(ClientRequest(url: url, headers: [("Accept", "application/json")]))
            guard response.status == 200 else {
                throw BatonClient.error(from: response, doing: "read \(Entity.entitySetName)")
            }
            let page = try Self.json(response.body)
            guard let items = page["value"]?.arrayValue else {
                throw BatonClientError(
                    .invalidResponse, "The server's answer for \(Entity.entitySetName) has no value.")
            }
            for item in items { entities.append(try Self.entity(item, as: type)) }
            next = try page["@odata.nextLink"]?.stringValue.map { link throws(BatonClientError) in
                try self.serviceLink(link)
            }
        }
        return entities
    }

    /// The entity of `type` with the id `id` (`ODataEntity/entityID`) on the server, or `nil` when it has none.
    public func entity<Entity: ODataEntity>(_ type: Entity.Type, id: String) async throws(BatonClientError)
        -> Entity?
    {
        let response = try await send(ClientRequest(url: try url(id), headers: [("Accept", "application/json")]))
        if response.status == 404 { return nil }
        guard response.status == 200 else {
            throw BatonClient.error(from: response, doing: "read an entity of \(Entity.entitySetName)")
        }
        return try Self.entity(try Self.json(response.body), as: type)
    }

    /// Creates `entity` on the server and returns it as the server stored it (computed properties set).
    ///
    /// - Throws: ``BatonClientError`` `ServerError` with the server's words (status 400 naming the property the
    ///   model refuses, 409 when it exists).
    public func create<Entity: ODataEntity>(_ entity: Entity) async throws(BatonClientError) -> Entity {
        let request = ClientRequest(
            method: "POST", url: try url(Entity.entitySetName),
            headers: [
                ("Content-Type", "application/json"), ("Accept", "application/json"),
                ("Prefer", "return=representation"),
            ],
            body: EntityPayload(values: entity.values).json(as: Entity.entityType).serializedBytes)
        let response = try await send(request)
        guard response.status == 201 else {
            throw BatonClient.error(from: response, doing: "create an entity of \(Entity.entitySetName)")
        }
        return try Self.entity(try Self.json(response.body), as: Entity.self)
    }

    /// Changes `entity` on the server to the values it holds (one `PATCH` of every property an app sets).
    ///
    /// - Parameters:
    ///   - entity: the entity, with its new values.
    ///   - ifMatch: the ETag the change is for; `*` changes whatever version the server has.
    /// - Throws: ``BatonClientError`` `ServerError` with status 412 when the server's version is another.
    public func update<Entity: ODataEntity>(_ entity: Entity, ifMatch: String = "*") async throws(BatonClientError) {
        var values = entity.values
        for part in Entity.entityType.key { values[part] = nil }
        let request = ClientRequest(
            method: "PATCH", url: try url(entity.entityID),
            headers: [("Content-Type", "application/json"), ("If-Match", ifMatch)],
            body: EntityPayload(values: values).json(as: Entity.entityType).serializedBytes)
        let response = try await send(request)
        guard response.status == 204 || response.status == 200 else {
            throw BatonClient.error(from: response, doing: "change an entity of \(Entity.entitySetName)")
        }
    }

    /// Deletes `entity` on the server.
    public func delete<Entity: ODataEntity>(_ entity: Entity, ifMatch: String = "*") async throws(BatonClientError) {
        let request = ClientRequest(method: "DELETE", url: try url(entity.entityID), headers: [("If-Match", ifMatch)])
        let response = try await send(request)
        guard response.status == 204 else {
            throw BatonClient.error(from: response, doing: "delete an entity of \(Entity.entitySetName)")
        }
    }

    /// A link the server sent (`@odata.nextLink`), absolute or relative to the service root — only inside the
    /// server's own OData service: the user's token goes nowhere else.
    func serviceLink(_ link: String) throws(BatonClientError) -> URL {
        let absolute = link.contains("://") ? link : configuration.odataServiceRoot + link
        guard absolute.hasPrefix(configuration.odataServiceRoot) else {
            throw BatonClientError(
                .invalidResponse, "The server sent a link outside its OData service; nothing was requested.")
        }
        return try self.absolute(absolute)
    }

    func url(_ relative: String) throws(BatonClientError) -> URL {
        try absolute(configuration.odataServiceRoot + relative)
    }

    func absolute(_ text: String) throws(BatonClientError) -> URL {
        guard let url = URL(string: text), url.scheme != nil else {
            throw BatonClientError(.invalidResponse, "The server's OData service root does not make a URL.")
        }
        try BatonClient.checkTransport(url)
        return url
    }

    /// A query as the offline store's `read(_:_:)` takes it — literals already percent-encoded with
    /// `ODataURL.queryValue` — made a URL's: spaces and other characters a URL cannot carry are encoded, `%` escapes
    /// are kept as they are (never encoded twice), `&` and `=` stay separators, `+` and `#` are encoded.
    func encode(_ query: String) -> String {
        let allowed = CharacterSet.urlQueryAllowed.union(CharacterSet(charactersIn: "%"))
            .subtracting(CharacterSet(charactersIn: "+#"))
        return query.addingPercentEncoding(withAllowedCharacters: allowed) ?? query
    }

    static func json(_ body: [UInt8]) throws(BatonClientError) -> JSONValue {
        do { return try JSONValue(parsing: body) } catch {
            throw BatonClientError(.invalidResponse, "The server's answer is not JSON: \(error.description)")
        }
    }

    static func entity<Entity: ODataEntity>(_ json: JSONValue, as type: Entity.Type) throws(BatonClientError)
        -> Entity
    {
        do { return try Entity(json: json) } catch {
            throw BatonClientError(
                .invalidResponse, "The server sent a \(Entity.self) that does not fit: \(error.message)")
        }
    }
}
