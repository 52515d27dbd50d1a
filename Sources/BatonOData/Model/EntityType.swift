/// An entity type: a keyed structure of primitive properties and navigation properties.
public struct EntityType: Sendable, Hashable {
    /// The simple (unqualified) name.
    public var name: String
    /// The names of the key properties, in key order.
    public var key: [String]
    /// The structural properties, in declaration order.
    public var properties: [Property] {
        didSet { propertyIndex = Self.index(properties) }
    }
    /// Where each structural property is in ``properties``, by name: looked up for every column of every row.
    private var propertyIndex: [String: Int]
    /// The navigation properties, in declaration order.
    public var navigationProperties: [NavigationProperty]
    /// Whether its entities are media entities (CSDL `HasStream`): each has a media resource — a photo's bytes —
    /// read and replaced at `…/$value`, besides its properties.
    public var hasStream: Bool
    /// The stream properties (`Edm.Stream`), in declaration order: each names a media resource of its own — a
    /// photo's bytes — read and replaced at `…/Name`. They are not structural properties: no column, no value in a
    /// payload, only their annotations (`Name@odata.mediaReadLink`).
    public var streamProperties: [String]

    /// Creates an entity type.
    public init(
        name: String, key: [String], properties: [Property], navigationProperties: [NavigationProperty] = [],
        hasStream: Bool = false, streamProperties: [String] = []
    ) {
        self.name = name
        self.key = key
        self.properties = properties
        self.navigationProperties = navigationProperties
        self.hasStream = hasStream
        self.streamProperties = streamProperties
        propertyIndex = Self.index(properties)
    }

    /// Whether `name` is one of the ``streamProperties`` (exact match).
    public func isStreamProperty(_ name: String) -> Bool {
        streamProperties.contains { $0.utf8.elementsEqual(name.utf8) }
    }

    /// The structural property named `name` (exact, case-sensitive match, as OData requires).
    public func property(named name: String) -> Property? {
        guard let index = propertyIndex[name], properties[index].name.utf8.elementsEqual(name.utf8) else {
            return nil
        }
        return properties[index]
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
