/// The property values of one entity, decoded from or encoded to an OData JSON body.
public struct EntityPayload: Sendable, Hashable {
    /// How a request body is checked.
    public enum Mode: Sendable, Hashable {
        /// `POST`: every non-nullable, non-computed property must be present.
        case create
        /// `PATCH`: any subset of properties.
        case merge
        /// `PUT`: every non-nullable, non-computed, non-key property must be present.
        case replace
    }

    /// The values by property name.
    public var values: [String: PrimitiveValue]
    /// Computed properties the client sent; services ignore them (Core.Computed), and report them here.
    public var ignoredComputed: [String]

    /// Creates a payload from values.
    public init(values: [String: PrimitiveValue], ignoredComputed: [String] = []) {
        self.values = values
        self.ignoredComputed = ignoredComputed
    }

    /// Decodes a request body for an entity of `type`.
    ///
    /// Instance annotations (`@odata.type`, `@odata.etag`, …) are skipped. Unknown properties, wrong JSON
    /// kinds, nulls for non-nullable properties, strings over MaxLength and decimals beyond Precision/Scale
    /// are errors naming the property.
    ///
    /// - Throws: ``ODataError`` (`syntax` for malformed JSON, `invalidPayload` otherwise, `notImplemented`
    ///   for navigation properties in the body).
    public init(
        decoding body: [UInt8], as type: EntityType, mode: Mode, model: ServiceModel? = nil, serviceRoot: String? = nil
    ) throws(ODataError) {
        try self.init(json: try JSONValue(parsing: body), as: type, mode: mode, model: model, serviceRoot: serviceRoot)
    }

    /// Decodes an entity body already parsed (a request inside a JSON `$batch`), exactly as
    /// ``init(decoding:as:mode:model:serviceRoot:)`` decodes its bytes.
    public init(
        json: JSONValue, as type: EntityType, mode: Mode, model: ServiceModel? = nil, serviceRoot: String? = nil
    ) throws(ODataError) {
        guard let members = json.objectMembers else {
            throw ODataError(.invalidPayload, "An entity body must be a JSON object, but this one is \(json.kindName)")
        }
        var values: [String: PrimitiveValue] = [:]
        var bound: [String: PrimitiveValue] = [:]
        var ignored: [String] = []
        for (name, value) in members {
            if name.hasSuffix("@odata.bind") {
                let navigation = String(name.dropLast("@odata.bind".count))
                for (property, key) in try Self.bind(
                    navigation, to: value, type: type, model: model, serviceRoot: serviceRoot)
                {
                    bound[property] = key
                }
                continue
            }
            if name.hasPrefix("@") || name.contains("@") { continue }
            guard let property = type.property(named: name) else {
                if type.navigationProperty(named: name) != nil {
                    throw ODataError(
                        .notImplemented, "Deep insert or update through '\(name)' is not implemented", target: name)
                }
                if type.isStreamProperty(name) {
                    throw ODataError(
                        .invalidPayload,
                        "'\(name)' is a stream: PUT its bytes to the entity's URL followed by /\(name), not in a payload.",
                        target: name)
                }
                throw ODataError(
                    .invalidPayload,
                    "'\(type.name)' has no property '\(name)'.\(suggest(name, type.properties.map { $0.name }))",
                    target: name)
            }
            if property.isComputed {
                ignored.append(name)
                continue
            }
            values[name] = try PrimitiveValue(json: value, for: property)
        }
        for (property, value) in bound {
            if let given = values[property], given != value {
                throw ODataError(
                    .invalidPayload,
                    "Property '\(property)' contradicts the navigation property bound in the same body",
                    target: property)
            }
            values[property] = value
        }
        if mode != .merge {
            // A left-out property with a default gets it (OData: a create or replace sets what the body omits to
            // its default value).
            for property in type.properties
            where values[property.name] == nil && !property.isComputed && !type.key.contains(property.name) {
                if let defaultValue = property.defaultValue { values[property.name] = defaultValue }
            }
            for property in type.properties
            where !property.isNullable && !property.isComputed && values[property.name] == nil
                && !(mode == .replace && type.key.contains(property.name))
            {
                throw ODataError(
                    .invalidPayload, "Property '\(property.name)' is required; add it to the body",
                    target: property.name)
            }
        }
        self.init(values: values, ignoredComputed: ignored)
    }

    /// Resolves `Nav@odata.bind: "Set(key)"` for a single-valued navigation property into the values of the
    /// dependent properties its referential constraint names.
    static func bind(
        _ name: String, to value: JSONValue, type: EntityType, model: ServiceModel?, serviceRoot: String?
    ) throws(ODataError) -> [(String, PrimitiveValue)] {
        guard let navigation = type.navigationProperty(named: name) else {
            throw ODataError(
                .invalidPayload, "'\(type.name)' has no navigation property '\(name)' to bind", target: name)
        }
        guard !navigation.isCollection else {
            throw ODataError(
                .notImplemented, "Binding collection-valued navigation properties ('\(name)') is not implemented",
                target: name)
        }
        guard let model, var reference = value.stringValue else {
            throw ODataError(
                .invalidPayload, "'\(name)@odata.bind' must be an entity URL like Aircraft('D-AIBL')", target: name)
        }
        if let serviceRoot, reference.hasPrefix(serviceRoot) {
            reference = String(reference.dropFirst(serviceRoot.count))
        }
        if reference.contains("/") {
            // An absolute or root-relative URL: keep its last segment that names an entity set.
            let path = reference.split(separator: "/")
            reference =
                path.last { segment in model.entitySet(named: String(segment.prefix { $0 != "(" })) != nil }.map(
                    String.init)
                ?? reference
        }
        let url = try ODataURL(parsing: reference, model: model)
        guard case .resource(let segments) = url.path, segments.count == 2, case .key(let key) = segments[1],
            let target = url.target,
            model.qualifiedName(of: target.entityType) == navigation.targetType
                || target.entityType.name == navigation.targetType.split(separator: ".").last.map(String.init)
        else {
            throw ODataError(
                .invalidPayload, "'\(name)@odata.bind' must name one \(navigation.targetType) by its key", target: name)
        }
        return try navigation.referentialConstraints.map { constraint throws(ODataError) in
            guard let part = key.first(where: { $0.name == constraint.referencedProperty }) else {
                throw ODataError(
                    .notImplemented, "Binding '\(name)' needs a constraint on the target's key", target: name)
            }
            return (constraint.property, part.value)
        }
    }

    /// The entity as a JSON object with `odata.metadata=minimal` control information.
    ///
    /// - Parameters:
    ///   - type: the entity type; properties are written in declaration order.
    ///   - select: the properties to write, or `nil` for all.
    ///   - context: the `@odata.context` URL, for a top-level entity.
    ///   - etag: the entity's ETag, written as `@odata.etag`.
    /// - Returns: the JSON object.
    public func json(
        as type: EntityType, select: [String]? = nil, context: String? = nil, etag: ETag? = nil
    ) -> JSONValue {
        var members: [(String, JSONValue)] = []
        if let context { members.append(("@odata.context", .string(context))) }
        if let etag { members.append(("@odata.etag", .string(etag.headerValue))) }
        for property in type.properties where select?.contains(property.name) ?? true {
            guard let value = values[property.name] else { continue }
            members.append((property.name, value.json(as: property.type)))
        }
        return .object(members)
    }
}
