/// An entity type: a keyed structure of primitive properties and navigation properties.
public struct EntityType: Sendable, Hashable {
    /// What an entity type is made of, compared and hashed as the type.
    struct Parts: Sendable, Hashable {
        var name: String
        var key: [String]
        var properties: [Property]
        var navigationProperties: [NavigationProperty]
        var hasStream: Bool
        var streamProperties: [String]
    }

    /// The parts in one shared, immutable box: an entity type is copied into every parsed URL, target and parser of a
    /// request, and a copy is one reference instead of six. A change makes a new box.
    final class Storage: Sendable {
        let parts: Parts
        /// Where each structural property is in `properties`, by name: looked up for every column of every row.
        let propertyIndex: [String: Int]

        init(_ parts: Parts) {
            self.parts = parts
            propertyIndex = EntityType.index(parts.properties)
        }
    }

    private var storage: Storage

    private mutating func change(_ body: (inout Parts) -> Void) {
        var parts = storage.parts
        body(&parts)
        storage = Storage(parts)
    }

    /// The simple (unqualified) name.
    public var name: String {
        get { storage.parts.name }
        set { change { $0.name = newValue } }
    }
    /// The names of the key properties, in key order.
    public var key: [String] {
        get { storage.parts.key }
        set { change { $0.key = newValue } }
    }
    /// The structural properties, in declaration order.
    public var properties: [Property] {
        get { storage.parts.properties }
        set { change { $0.properties = newValue } }
    }
    /// The navigation properties, in declaration order.
    public var navigationProperties: [NavigationProperty] {
        get { storage.parts.navigationProperties }
        set { change { $0.navigationProperties = newValue } }
    }
    /// Whether its entities are media entities (CSDL `HasStream`): each has a media resource — a photo's bytes —
    /// read and replaced at `…/$value`, besides its properties.
    public var hasStream: Bool {
        get { storage.parts.hasStream }
        set { change { $0.hasStream = newValue } }
    }
    /// The stream properties (`Edm.Stream`), in declaration order: each names a media resource of its own — a
    /// photo's bytes — read and replaced at `…/Name`. They are not structural properties: no column, no value in a
    /// payload, only their annotations (`Name@odata.mediaReadLink`).
    public var streamProperties: [String] {
        get { storage.parts.streamProperties }
        set { change { $0.streamProperties = newValue } }
    }

    /// Creates an entity type.
    public init(
        name: String, key: [String], properties: [Property], navigationProperties: [NavigationProperty] = [],
        hasStream: Bool = false, streamProperties: [String] = []
    ) {
        storage = Storage(
            Parts(
                name: name, key: key, properties: properties, navigationProperties: navigationProperties,
                hasStream: hasStream, streamProperties: streamProperties))
    }

    public static func == (lhs: EntityType, rhs: EntityType) -> Bool {
        lhs.storage === rhs.storage || lhs.storage.parts == rhs.storage.parts
    }

    public func hash(into hasher: inout Hasher) { hasher.combine(storage.parts) }

    /// Whether `name` is one of the ``streamProperties`` (exact match).
    public func isStreamProperty(_ name: String) -> Bool {
        streamProperties.contains { $0.hasSameBytes(as: name) }
    }

    /// The structural property named `name` (exact, case-sensitive match, as OData requires).
    public func property(named name: String) -> Property? {
        guard let index = storage.propertyIndex[name] else { return nil }
        let property = storage.parts.properties[index]
        return property.name.hasSameBytes(as: name) ? property : nil
    }

    /// Each property's position by name; the first one wins where a (refused) model repeats a name.
    static func index(_ properties: [Property]) -> [String: Int] {
        var index: [String: Int] = [:]
        for (position, property) in properties.enumerated() where index[property.name] == nil {
            index[property.name] = position
        }
        return index
    }

    /// The navigation property named `name`.
    public func navigationProperty(named name: String) -> NavigationProperty? {
        navigationProperties.first { $0.name == name }
    }

    /// The key properties, in key order.
    public var keyProperties: [Property] {
        key.compactMap { property(named: $0) }
    }

    /// Every member name, for "did you mean" suggestions.
    var memberNames: [String] {
        properties.map { $0.name } + streamProperties + navigationProperties.map { $0.name }
    }
}
