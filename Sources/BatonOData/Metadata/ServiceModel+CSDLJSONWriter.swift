extension ServiceModel {
    /// The model as a CSDL JSON `$metadata` document; ``init(csdlJSON:)`` reads it back to an equal model.
    public var csdlJSONDocument: JSONValue {
        var schema: [(String, JSONValue)] = []
        if let alias { schema.append(("$Alias", .string(alias))) }
        for enumType in enumTypes {
            var members: [(String, JSONValue)] = [("$Kind", .string("EnumType"))]
            if enumType.underlyingType != .int32 {
                members.append(("$UnderlyingType", .string(enumType.underlyingType.rawValue)))
            }
            for member in enumType.members { members.append((member.name, .number(String(member.value)))) }
            schema.append((enumType.name, .object(members)))
        }
        for type in entityTypes {
            var members: [(String, JSONValue)] = [
                ("$Kind", .string("EntityType")), ("$Key", .array(type.key.map(JSONValue.string))),
            ]
            if type.hasStream { members.append(("$HasStream", .bool(true))) }
            for property in type.properties {
                var facets: [(String, JSONValue)] = []
                if let enumType = property.enumType {
                    facets.append(("$Type", .string(enumType.qualifiedName)))
                } else if property.type != .string {
                    facets.append(("$Type", .string(property.type.rawValue)))
                }
                if property.isNullable { facets.append(("$Nullable", .bool(true))) }
                if let maxLength = property.maxLength { facets.append(("$MaxLength", .number(String(maxLength)))) }
                if let precision = property.precision { facets.append(("$Precision", .number(String(precision)))) }
                if let scale = property.scale { facets.append(("$Scale", .number(String(scale)))) }
                if let defaultValue = property.defaultValue {
                    facets.append(("$DefaultValue", defaultValue.json(as: property.type)))
                }
                if property.isComputed { facets.append(("@Org.OData.Core.V1.Computed", .bool(true))) }
                members.append((property.name, .object(facets)))
            }
            for stream in type.streamProperties {
                members.append((stream, .object([("$Type", .string("Edm.Stream")), ("$Nullable", .bool(true))])))
            }
            for navigation in type.navigationProperties {
                var facets: [(String, JSONValue)] = [
                    ("$Kind", .string("NavigationProperty")), ("$Type", .string(navigation.targetType)),
                ]
                if navigation.isCollection { facets.append(("$Collection", .bool(true))) }
                if !navigation.isCollection && navigation.isNullable { facets.append(("$Nullable", .bool(true))) }
                if let partner = navigation.partner { facets.append(("$Partner", .string(partner))) }
                if !navigation.referentialConstraints.isEmpty {
                    facets.append(
                        (
                            "$ReferentialConstraint",
                            .object(
                                navigation.referentialConstraints.map { ($0.property, .string($0.referencedProperty)) })
                        ))
                }
                members.append((navigation.name, .object(facets)))
            }
            schema.append((type.name, .object(members)))
        }
        var container: [(String, JSONValue)] = [("$Kind", .string("EntityContainer"))]
        if supportsRepeatableRequests { container.append(("@Org.OData.Repeatability.V1.Supported", .bool(true))) }
        for set in entitySets {
            var members: [(String, JSONValue)] = [("$Collection", .bool(true)), ("$Type", .string(set.entityType))]
            if !set.navigationBindings.isEmpty {
                members.append(
                    (
                        "$NavigationPropertyBinding",
                        .object(set.navigationBindings.sorted { $0.key < $1.key }.map { ($0.key, .string($0.value)) })
                    ))
            }
            if !set.optimisticConcurrency.isEmpty {
                members.append(
                    (
                        "@Org.OData.Core.V1.OptimisticConcurrency",
                        .array(set.optimisticConcurrency.map(JSONValue.string))
                    ))
            }
            container.append((set.name, .object(members)))
        }
        schema.append((containerName, .object(container)))
        return .object([
            ("$Version", .string("4.01")),
            ("$EntityContainer", .string("\(namespace).\(containerName)")),
            (namespace, .object(schema)),
        ])
    }
}
