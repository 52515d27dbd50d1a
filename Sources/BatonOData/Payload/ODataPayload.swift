/// Builders for the top-level OData JSON response shapes (JSON Format 4.01, `odata.metadata=minimal`).
public enum ODataPayload {
    /// A collection: `{"@odata.context", "@odata.count"?, "value": [...], "@odata.nextLink"?,
    /// "@odata.deltaLink"?}`.
    public static func collection(
        context: String, entities: [JSONValue], count: Int? = nil, nextLink: String? = nil, deltaLink: String? = nil
    ) -> JSONValue {
        var members: [(String, JSONValue)] = [("@odata.context", .string(context))]
        if let count { members.append(("@odata.count", .number(String(count)))) }
        members.append(("value", .array(entities)))
        if let nextLink { members.append(("@odata.nextLink", .string(nextLink))) }
        if let deltaLink { members.append(("@odata.deltaLink", .string(deltaLink))) }
        return .object(members)
    }

    /// The shape of removed entries in a delta payload.
    public enum DeltaFormat: Sendable {
        /// OData 4.01: `{"@removed": {"reason": "deleted"}, "@id": …}`.
        case v401
        /// OData 4.0: `{"@odata.context": "…/$deletedEntity", "id": …, "reason": "deleted"}`.
        case v40
    }

    /// A removed entity in a delta response.
    ///
    /// - Parameters:
    ///   - id: the entity id (its canonical URL, e.g. `PreflightChecks(guid)`).
    ///   - format: the OData version's shape.
    ///   - contextBase: the metadata URL of the service, for 4.0's `$deletedEntity` context.
    ///   - entitySet: the entity set name, for 4.0's context.
    ///   - reason: `deleted`, or `changed` when the entity left the tracked (filtered) set.
    /// - Returns: the JSON object for the removed entry.
    public static func removed(
        id: String, format: DeltaFormat, contextBase: String, entitySet: String, reason: String = "deleted"
    ) -> JSONValue {
        switch format {
        case .v401:
            .object([("@removed", .object([("reason", .string(reason))])), ("@id", .string(id))])
        case .v40:
            .object([
                ("@odata.context", .string("\(contextBase)#\(entitySet)/$deletedEntity")), ("id", .string(id)),
                ("reason", .string(reason)),
            ])
        }
    }

    /// An error body: `{"error": {"code", "message", "target"?, "details"?}}`.
    public static func error(_ error: ODataError, details: [ODataError] = []) -> JSONValue {
        func body(_ error: ODataError) -> [(String, JSONValue)] {
            var members: [(String, JSONValue)] = [
                ("code", .string(error.code.rawValue)), ("message", .string(error.description)),
            ]
            if let target = error.target { members.append(("target", .string(target))) }
            return members
        }
        var members = body(error)
        if !details.isEmpty { members.append(("details", .array(details.map { .object(body($0)) }))) }
        return .object([("error", .object(members))])
    }

    /// Reads an error body back: code, message and target.
    ///
    /// - Throws: ``ODataError`` (`invalidPayload`) when the JSON is not an OData error body.
    public static func decodeError(_ json: JSONValue) throws(ODataError) -> (
        code: String, message: String, target: String?
    ) {
        guard let error = json["error"], let code = error["code"]?.stringValue,
            let message = error["message"]?.stringValue
        else {
            throw ODataError(.invalidPayload, "Not an OData error body: expected {\"error\":{\"code\",\"message\"}}")
        }
        return (code, message, error["target"]?.stringValue)
    }
}
