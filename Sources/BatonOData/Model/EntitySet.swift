/// An entity set: the addressable collection of entities of one type.
public struct EntitySet: Sendable, Hashable {
    /// The name used in URLs (`Aircraft`, `PreflightChecks`).
    public var name: String
    /// The qualified name of the entity type.
    public var entityType: String
    /// For each navigation property path, the entity set its targets live in.
    public var navigationBindings: [String: String]
    /// The properties whose change changes the ETag (`Core.OptimisticConcurrency`). Empty means the server
    /// derives ETags from the whole entity.
    public var optimisticConcurrency: [String]

    /// Creates an entity set.
    public init(
        name: String, entityType: String, navigationBindings: [String: String] = [:],
        optimisticConcurrency: [String] = []
    ) {
        self.name = name
        self.entityType = entityType
        self.navigationBindings = navigationBindings
        self.optimisticConcurrency = optimisticConcurrency
    }
}
