/// An entity type: a keyed structure of primitive properties and navigation properties.
public struct EntityType: Sendable, Hashable {
    /// The simple (unqualified) name.
    public var name: String
    /// The names of the key properties, in key order.
    public var key: [String]
    /// The structural properties, in declaration order.
    public var properties: [Property]
    /// The navigation properties, in declaration order.
    public var navigationProperties: [NavigationProperty]

    /// Creates an entity type.
    public init(
        name: String, key: [String], properties: [Property], navigationProperties: [NavigationProperty] = []
    ) {
        self.name = name
        self.key = key
        self.properties = properties
        self.navigationProperties = navigationProperties
    }

    /// The structural property named `name` (exact, case-sensitive match, as OData requires).
    public func property(named name: String) -> Property? {
        properties.first { $0.name == name }
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
        properties.map(\.name) + navigationProperties.map(\.name)
    }
}
