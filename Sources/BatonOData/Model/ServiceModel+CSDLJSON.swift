import Foundation

extension ServiceModel {
    /// Loads a model from a CSDL JSON document (OData CSDL JSON 4.01).
    ///
    /// Reads one schema with entity types (keys, primitive properties with `$Type`, `$Nullable`,
    /// `$MaxLength`, `$Precision`, `$Scale`, navigation properties with `$Partner` and
    /// `$ReferentialConstraint`) and one entity container with entity sets and `$NavigationPropertyBinding`.
    /// Understood annotations: `Core.Computed` on properties, `Core.OptimisticConcurrency` on entity sets,
    /// `Repeatability.Supported` on the container (alias or full `Org.OData.*.V1` names).
    ///
    /// - Throws: ``ODataError`` with code `syntax` for malformed JSON, `invalidModel` for anything else,
    ///   naming the element and what to change.
    public init(csdlJSON text: String) throws(ODataError) {
        let document = try JSONValue(parsing: text)
        guard let members = document.objectMembers else {
            throw ODataError(.invalidModel, "A CSDL JSON document must be a JSON object.")
        }
        let schemas = members.filter { !$0.0.hasPrefix("$") && !$0.0.hasPrefix("@") && $0.1.objectMembers != nil }
        guard schemas.count == 1, let (namespace, schema) = schemas.first, let schemaMembers = schema.objectMembers
        else {
            throw ODataError(
                .invalidModel, "Expected exactly one schema in the CSDL document, found \(schemas.count).")
        }
        let alias = schema["$Alias"]?.stringValue
        var entityTypes: [EntityType] = []
        var entitySets: [EntitySet] = []
        var containerName: String?
        var repeatable = false
        // Enumeration types first: entity types name them.
        var enumTypes: [EnumType] = []
        var enumsByName: [String: EnumType] = [:]
        for (name, element) in schemaMembers where element["$Kind"]?.stringValue == "EnumType" {
            let parsed = try Self.enumType(named: "\(namespace).\(name)", from: element)
            enumTypes.append(parsed)
            enumsByName["\(namespace).\(name)"] = parsed
            if let alias { enumsByName["\(alias).\(name)"] = parsed }
        }
        for (name, element) in schemaMembers where !name.hasPrefix("$") && !name.hasPrefix("@") {
            switch element["$Kind"]?.stringValue {
            case "EnumType":
                continue
            case "EntityType":
                entityTypes.append(try Self.entityType(named: name, from: element, enums: enumsByName))
            case "EntityContainer":
                containerName = name
                repeatable =
                    Self.annotation("Repeatability.Supported", in: element, vocabulary: "Org.OData.Repeatability.V1")?
                    .boolValue ?? false
                for (setName, set) in element.objectMembers ?? []
                where !setName.hasPrefix("$") && !setName.hasPrefix("@") {
                    entitySets.append(try Self.entitySet(named: setName, from: set))
                }
            case let kind?:
                throw ODataError(
                    .notImplemented,
                    "Schema element '\(name)' is of kind '\(kind)', which Baton does not support. "
                        + "Supported kinds: EntityType, EnumType, EntityContainer.", target: name)
            case nil:
                throw ODataError(.invalidModel, "Schema element '\(name)' has no \"$Kind\".", target: name)
            }
        }
        guard let containerName else {
            throw ODataError(.invalidModel, "The schema '\(namespace)' declares no EntityContainer.")
        }
        try self.init(
            namespace: namespace, alias: alias, containerName: containerName, entityTypes: entityTypes,
            entitySets: entitySets, supportsRepeatableRequests: repeatable, enumTypes: enumTypes)
    }

    static func enumType(named name: String, from element: JSONValue) throws(ODataError) -> EnumType {
        if element["$IsFlags"]?.boolValue == true {
            throw ODataError(
                .notImplemented, "Enumeration type '\(name)' is a flags type, which Baton does not support.",
                target: name)
        }
        let underlyingName = element["$UnderlyingType"]?.stringValue ?? "Edm.Int32"
        guard let underlying = EdmPrimitiveType(rawValue: underlyingName), underlying.isIntegral else {
            throw ODataError(
                .invalidModel, "The underlying type of '\(name)' must be an Edm integer type.", target: name)
        }
        var members: [EnumType.Member] = []
        for (member, value) in element.objectMembers ?? [] where !member.hasPrefix("$") && !member.contains("@") {
            guard case .number(let text) = value, let number = Int64(text) else {
                throw ODataError(
                    .invalidModel, "Member '\(member)' of '\(name)' must have an integer value.", target: member)
            }
            guard !members.contains(where: { $0.name == member }) else {
                throw ODataError(.invalidModel, "'\(name)' declares member '\(member)' twice.", target: member)
            }
            members.append(EnumType.Member(name: member, value: number))
        }
        guard !members.isEmpty else {
            throw ODataError(.invalidModel, "Enumeration type '\(name)' has no members.", target: name)
        }
        return EnumType(qualifiedName: name, members: members, underlyingType: underlying)
    }

    /// The model Baton ships: aircraft, flights and pre-flight checks (see docs/ARCHITECTURE.md).
    public static var aircraftChecks: ServiceModel {
        get throws(ODataError) {
            guard let url = Bundle.module.url(forResource: "AircraftChecks.csdl", withExtension: "json"),
                let data = try? Data(contentsOf: url)
            else {
                throw ODataError(.invalidModel, "The bundled model AircraftChecks.csdl.json is missing.")
            }
            return try ServiceModel(csdlJSON: String(decoding: data, as: UTF8.self))
        }
    }

    static func annotation(_ term: String, in element: JSONValue, vocabulary: String) -> JSONValue? {
        let simple = term.split(separator: ".").last.map(String.init) ?? term
        return element["@\(term)"] ?? element["@\(vocabulary).\(simple)"]
    }

    static func entityType(named name: String, from element: JSONValue, enums: [String: EnumType] = [:])
        throws(ODataError) -> EntityType
    {
        var key: [String] = []
        if let keyValue = element["$Key"] {
            guard let items = keyValue.arrayValue else {
                throw ODataError(.invalidModel, "\"$Key\" of '\(name)' must be an array of property names.")
            }
            for item in items {
                if let name = item.stringValue {
                    key.append(name)
                } else if let aliased = item.objectMembers, aliased.count == 1, let path = aliased[0].1.stringValue {
                    key.append(path)
                } else {
                    throw ODataError(.invalidModel, "\"$Key\" of '\(name)' holds an entry that is not a name.")
                }
            }
        }
        var properties: [Property] = []
        var navigations: [NavigationProperty] = []
        var streams: [String] = []
        for (member, value) in element.objectMembers ?? [] where !member.hasPrefix("$") && !member.hasPrefix("@") {
            let target = "\(name)/\(member)"
            guard value.objectMembers != nil else {
                throw ODataError(.invalidModel, "Member '\(target)' must be a JSON object.", target: member)
            }
            let kind = value["$Kind"]?.stringValue ?? "Property"
            let typeName = value["$Type"]?.stringValue ?? "Edm.String"
            let nullable = value["$Nullable"]?.boolValue ?? false  // CSDL JSON: absent means false
            let isCollection = value["$Collection"]?.boolValue ?? false
            switch kind {
            case "Property" where typeName == "Edm.Stream":
                // A stream property: bytes of its own, kept beside the entity, never a value in its payload.
                guard !isCollection, value["$DefaultValue"] == nil else {
                    throw ODataError(
                        .invalidModel,
                        "Stream property '\(target)' takes no $Collection and no $DefaultValue: its bytes are PUT to its own URL.",
                        target: member)
                }
                streams.append(member)
            case "Property":
                let enumType = enums[typeName]
                guard let type = enumType == nil ? EdmPrimitiveType(rawValue: typeName) : .string else {
                    throw ODataError(
                        .invalidModel,
                        "Property '\(target)' has unknown type '\(typeName)'. Use an Edm primitive type such as "
                            + "Edm.String, Edm.Int32, Edm.Decimal or Edm.DateTimeOffset.", target: member)
                }
                if isCollection {
                    throw ODataError(
                        .notImplemented, "Property '\(target)' is a collection; Baton supports single values only.",
                        target: member)
                }
                var property = Property(
                    name: member, type: type, isNullable: nullable,
                    maxLength: try intFacet("$MaxLength", value, target),
                    precision: try intFacet("$Precision", value, target),
                    scale: try intFacet("$Scale", value, target),
                    isComputed: annotation("Core.Computed", in: value, vocabulary: "Org.OData.Core.V1")?.boolValue
                        ?? false, enumType: enumType)
                if let given = value["$DefaultValue"] {
                    do {
                        property.defaultValue = try PrimitiveValue(json: given, for: property)
                    } catch {
                        throw ODataError(
                            .invalidModel,
                            "The $DefaultValue of '\(target)' is not a valid \(typeName): \(error.message)",
                            target: member)
                    }
                }
                properties.append(property)
            case "NavigationProperty":
                var constraints: [NavigationProperty.ReferentialConstraint] = []
                for (dependent, principal) in value["$ReferentialConstraint"]?.objectMembers ?? [] {
                    guard let principal = principal.stringValue else {
                        throw ODataError(
                            .invalidModel, "Referential constraint '\(dependent)' of '\(target)' must be a string.",
                            target: member)
                    }
                    constraints.append(.init(property: dependent, referencedProperty: principal))
                }
                guard value["$Type"] != nil else {
                    throw ODataError(
                        .invalidModel, "Navigation property '\(target)' needs a \"$Type\".", target: member)
                }
                navigations.append(
                    NavigationProperty(
                        name: member, targetType: typeName, isCollection: isCollection, isNullable: nullable,
                        partner: value["$Partner"]?.stringValue, referentialConstraints: constraints))
            default:
                throw ODataError(
                    .invalidModel, "Member '\(target)' has unknown \"$Kind\" '\(kind)'.", target: member)
            }
        }
        var hasStream = false
        if let stream = element["$HasStream"] {
            guard let flag = stream.boolValue else {
                throw ODataError(.invalidModel, "\"$HasStream\" of '\(name)' must be true or false.", target: name)
            }
            hasStream = flag
        }
        return EntityType(
            name: name, key: key, properties: properties, navigationProperties: navigations, hasStream: hasStream,
            streamProperties: streams)
    }

    static func intFacet(_ name: String, _ value: JSONValue, _ target: String) throws(ODataError) -> Int? {
        guard let facet = value[name] else { return nil }
        if case .number(let text) = facet, let number = Int(text), number >= 0 { return number }
        if name == "$MaxLength", facet.stringValue == "max" { return nil }
        throw ODataError(.invalidModel, "Facet \(name) of '\(target)' must be a non-negative integer.", target: target)
    }

    static func entitySet(named name: String, from element: JSONValue) throws(ODataError) -> EntitySet {
        guard element["$Collection"]?.boolValue == true, let type = element["$Type"]?.stringValue else {
            throw ODataError(
                .notImplemented,
                "Container member '\(name)' is not an entity set (\"$Collection\": true with a \"$Type\"). "
                    + "Singletons, action and function imports are not supported.", target: name)
        }
        var bindings: [String: String] = [:]
        for (path, target) in element["$NavigationPropertyBinding"]?.objectMembers ?? [] {
            guard let target = target.stringValue else {
                throw ODataError(.invalidModel, "Binding '\(path)' of entity set '\(name)' must be a string.")
            }
            bindings[path] = target
        }
        var concurrency: [String] = []
        if let paths = annotation("Core.OptimisticConcurrency", in: element, vocabulary: "Org.OData.Core.V1") {
            for path in paths.arrayValue ?? [] {
                if let path = path.stringValue {
                    concurrency.append(path)
                } else if let path = path["$PropertyPath"]?.stringValue {
                    concurrency.append(path)
                }
            }
        }
        return EntitySet(
            name: name, entityType: type, navigationBindings: bindings, optimisticConcurrency: concurrency)
    }
}
