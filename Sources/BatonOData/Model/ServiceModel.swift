/// An OData service model: one schema of entity types and one entity container of entity sets.
///
/// Load one from CSDL JSON with ``init(csdlJSON:)``, or use ``aircraftChecks`` — the model Baton ships.
/// A model is validated when it is created: every type resolves, every entity type has a key, every
/// navigation property, partner, constraint and binding points at something that exists.
public struct ServiceModel: Sendable, Hashable {
    /// The schema namespace (`Baton`).
    public var namespace: String
    /// The schema alias, if the CSDL declares one.
    public var alias: String?
    /// The entity container's simple name.
    public var containerName: String
    /// The entity types, in declaration order.
    public var entityTypes: [EntityType]
    /// The entity sets, in declaration order.
    public var entitySets: [EntitySet]
    /// Whether the service supports OASIS Repeatable Requests (`Repeatability.Supported`).
    public var supportsRepeatableRequests: Bool
    /// The enumeration types, in declaration order.
    public var enumTypes: [EnumType]

    /// Creates and validates a model.
    ///
    /// - Throws: ``ODataError`` with code `invalidModel` naming the first inconsistency.
    public init(
        namespace: String, alias: String? = nil, containerName: String = "Container",
        entityTypes: [EntityType], entitySets: [EntitySet], supportsRepeatableRequests: Bool = false,
        enumTypes: [EnumType] = []
    ) throws(ODataError) {
        self.enumTypes = enumTypes
        self.namespace = namespace
        self.alias = alias
        self.containerName = containerName
        self.entityTypes = entityTypes
        self.entitySets = entitySets
        self.supportsRepeatableRequests = supportsRepeatableRequests
        try validate()
    }

    /// The entity type with the given qualified (`Baton.Aircraft`), alias-qualified or simple name.
    ///
    /// Names are compared by their UTF-8 bytes, with no string built per type (an entity set's type is looked up on
    /// every request, by its qualified name).
    public func entityType(named name: String) -> EntityType? {
        entityTypes.first { type in
            name.utf8.elementsEqual(type.name.utf8) || Self.name(name, qualifies: type.name, in: namespace)
                || alias.map { Self.name(name, qualifies: type.name, in: $0) } == true
        }
    }

    /// Whether `name` is `qualifier.simple`, byte for byte.
    static func name(_ name: String, qualifies simple: String, in qualifier: String) -> Bool {
        let bytes = name.utf8
        let prefix = qualifier.utf8.count
        guard bytes.count == prefix + 1 + simple.utf8.count, bytes.starts(with: qualifier.utf8) else { return false }
        let dot = bytes.index(bytes.startIndex, offsetBy: prefix)
        return bytes[dot] == UInt8(ascii: ".") && bytes[bytes.index(after: dot)...].elementsEqual(simple.utf8)
    }

    /// The entity set named `name`.
    public func entitySet(named name: String) -> EntitySet? {
        entitySets.first { $0.name == name }
    }

    /// The entity type of an entity set.
    public func entityType(of set: EntitySet) -> EntityType? {
        entityType(named: set.entityType)
    }

    /// The namespace-qualified name of an entity type.
    public func qualifiedName(of type: EntityType) -> String {
        "\(namespace).\(type.name)"
    }

    /// The entity set that holds the targets of `navigation` reached from `set`, if bound.
    public func targetSet(of navigation: NavigationProperty, from set: EntitySet) -> EntitySet? {
        if let bound = set.navigationBindings[navigation.name] { return entitySet(named: bound) }
        let targetName = entityType(named: navigation.targetType)?.name
        return entitySets.first { entityType(named: $0.entityType)?.name == targetName }
    }
}
