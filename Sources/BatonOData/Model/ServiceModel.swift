/// An OData service model: one schema of entity types and one entity container of entity sets.
///
/// Load one from CSDL JSON with ``init(csdlJSON:)``, or use ``aircraftChecks`` — the model Baton ships.
/// A model is validated when it is created: every type resolves, every entity type has a key, every
/// navigation property, partner, constraint and binding points at something that exists.
public struct ServiceModel: Sendable, Hashable {
    /// What a model is made of, compared and hashed as the model.
    struct Parts: Sendable, Hashable {
        var namespace: String
        var alias: String?
        var containerName: String
        var entityTypes: [EntityType]
        var entitySets: [EntitySet]
        var supportsRepeatableRequests: Bool
        var enumTypes: [EnumType]
    }

    /// The parts in one shared, immutable box, with the lookups every request makes: a model is copied into every
    /// parser and translator of a request, and a copy is one reference. A change makes a new box.
    final class Storage: Sendable {
        let parts: Parts
        /// The position of each entity type by its simple, qualified and alias-qualified name, the first type first:
        /// the answer when the key found is the name asked for byte for byte (a `String` key also finds a name that
        /// is only canonically equivalent; those are looked up one by one, as before).
        let typeIndex: [String: Int]
        /// Every stream property name of every entity type, without repeats.
        let streamPropertyNames: [String]

        init(_ parts: Parts) {
            self.parts = parts
            var types: [String: Int] = [:]
            for (position, type) in parts.entityTypes.enumerated() {
                var names = [type.name, parts.namespace + "." + type.name]
                if let alias = parts.alias { names.append(alias + "." + type.name) }
                for name in names where types[name] == nil { types[name] = position }
            }
            typeIndex = types
            var streams: [String] = []
            for type in parts.entityTypes {
                for name in type.streamProperties where !streams.contains(where: { $0.hasSameBytes(as: name) }) {
                    streams.append(name)
                }
            }
            streamPropertyNames = streams
        }
    }

    private var storage: Storage

    private mutating func change(_ body: (inout Parts) -> Void) {
        var parts = storage.parts
        body(&parts)
        storage = Storage(parts)
    }

    /// The schema namespace (`Baton`).
    public var namespace: String {
        get { storage.parts.namespace }
        set { change { $0.namespace = newValue } }
    }
    /// The schema alias, if the CSDL declares one.
    public var alias: String? {
        get { storage.parts.alias }
        set { change { $0.alias = newValue } }
    }
    /// The entity container's simple name.
    public var containerName: String {
        get { storage.parts.containerName }
        set { change { $0.containerName = newValue } }
    }
    /// The entity types, in declaration order.
    public var entityTypes: [EntityType] {
        get { storage.parts.entityTypes }
        set { change { $0.entityTypes = newValue } }
    }
    /// The entity sets, in declaration order.
    public var entitySets: [EntitySet] {
        get { storage.parts.entitySets }
        set { change { $0.entitySets = newValue } }
    }
    /// Whether the service supports OASIS Repeatable Requests (`Repeatability.Supported`).
    public var supportsRepeatableRequests: Bool {
        get { storage.parts.supportsRepeatableRequests }
        set { change { $0.supportsRepeatableRequests = newValue } }
    }
    /// The enumeration types, in declaration order.
    public var enumTypes: [EnumType] {
        get { storage.parts.enumTypes }
        set { change { $0.enumTypes = newValue } }
    }

    /// Every stream property name of the model's entity types, without repeats.
    package var streamPropertyNames: [String] { storage.streamPropertyNames }

    /// Creates and validates a model.
    ///
    /// - Throws: ``ODataError`` with code `invalidModel` naming the first inconsistency.
    public init(
        namespace: String, alias: String? = nil, containerName: String = "Container",
        entityTypes: [EntityType], entitySets: [EntitySet], supportsRepeatableRequests: Bool = false,
        enumTypes: [EnumType] = []
    ) throws(ODataError) {
        storage = Storage(
            Parts(
                namespace: namespace, alias: alias, containerName: containerName, entityTypes: entityTypes,
                entitySets: entitySets, supportsRepeatableRequests: supportsRepeatableRequests, enumTypes: enumTypes))
        try validate()
    }

    public static func == (lhs: ServiceModel, rhs: ServiceModel) -> Bool {
        lhs.storage === rhs.storage || lhs.storage.parts == rhs.storage.parts
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(storage.parts) }

    /// The entity type with the given qualified (`Baton.Aircraft`), alias-qualified or simple name.
    ///
    /// Names are compared by their UTF-8 bytes, with no string built per type (an entity set's type is looked up on
    /// every request, by its qualified name).
    public func entityType(named name: String) -> EntityType? {
        let storage = storage
        let parts = storage.parts
        func matches(_ type: EntityType) -> Bool {
            name.hasSameBytes(as: type.name) || Self.name(name, qualifies: type.name, in: parts.namespace)
                || parts.alias.map { Self.name(name, qualifies: type.name, in: $0) } == true
        }
        // The name the index holds is the one asked for, byte for byte: that type is the first that answers to it.
        if let entry = storage.typeIndex.index(forKey: name), storage.typeIndex[entry].key.hasSameBytes(as: name) {
            return parts.entityTypes[storage.typeIndex[entry].value]
        }
        return parts.entityTypes.first(where: matches)
    }

    /// Whether `name` is `qualifier.simple`, byte for byte.
    static func name(_ name: String, qualifies simple: String, in qualifier: String) -> Bool {
        let bytes = name.utf8
        let prefix = qualifier.utf8.count
        guard bytes.count == prefix + 1 + simple.utf8.count, bytes.starts(with: qualifier.utf8) else { return false }
        let dot = bytes.index(bytes.startIndex, offsetBy: prefix)
        return bytes[dot] == UInt8(ascii: ".") && bytes[bytes.index(after: dot)...].elementsEqual(simple.utf8)
    }

    /// The entity set named `name`, compared byte for byte as every name of the model is (`==` takes canonically
    /// equivalent text as equal: a Kelvin sign for a `K`).
    public func entitySet(named name: String) -> EntitySet? {
        // Compared in turn: for the handful of sets a model has, cheaper than hashing the name (measured on a batch).
        storage.parts.entitySets.first { $0.name.hasSameBytes(as: name) }
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
