/// The resource a request URL addresses, relative to the service root.
public enum ResourcePath: Sendable, Hashable {
    /// The service document (empty path).
    case serviceDocument
    /// `$metadata`.
    case metadata
    /// `$batch`.
    case batch
    /// An entity set, entity, navigation target, property or count, as a chain of segments that starts with
    /// an entity set.
    case resource([PathSegment])
}

/// One segment of a resource path after the entity set.
public enum PathSegment: Sendable, Hashable {
    /// An entity set by name.
    case entitySet(String)
    /// A key predicate: key property name and value pairs, in key order.
    case key([KeyValue])
    /// A navigation property.
    case navigation(String)
    /// A primitive property.
    case property(String)
    /// `/$count`.
    case count
    /// `/$value`: the raw value of a primitive property, or the media resource of a media entity.
    case value
    /// A stream property (`Edm.Stream`): its media resource, the last segment.
    case stream(String)
}

/// One key property and its value.
public struct KeyValue: Sendable, Hashable {
    /// The key property's name.
    public var name: String
    /// The key's value, converted to the property's type.
    public var value: PrimitiveValue

    /// Creates a key value.
    public init(name: String, value: PrimitiveValue) {
        self.name = name
        self.value = value
    }
}

/// What a resource path leads to, worked out against the model.
public struct ResourceTarget: Sendable, Hashable {
    /// The entity set the addressed entities live in.
    public var entitySet: EntitySet
    /// Their entity type.
    public var entityType: EntityType
    /// Whether the path addresses a collection (rather than one entity or value).
    public var isCollection: Bool
}
