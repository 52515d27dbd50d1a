import BatonOData
import Foundation

/// The offline store with typed entities: the structs `baton-codegen` writes from the model (the aircraft-checks
/// model's are the `AircraftChecks` library). Each call is the dictionary call underneath, with the same checks.
extension OfflineStore {
    /// Creates `entity` on the device and queues its upload, signed by the current user
    /// (``create(in:values:)``). Its computed properties are ignored; the device shows its own until a download.
    ///
    /// - Returns: the entity's id (canonical URL).
    /// - Throws: ``OfflineError`` `BadRequest` naming the property the model refuses, `NotOpen` without a user.
    @discardableResult
    public func create<Entity: ODataEntity>(_ entity: Entity) throws(OfflineError) -> String {
        try create(in: Entity.entitySetName, values: entity.values)
    }

    /// Changes `entity` on the device to the values it holds (every property an app sets, sent as one `PATCH`)
    /// and queues the change (``update(_:values:)``).
    ///
    /// - Throws: ``OfflineError`` `NotFound` when the device does not have it, `BadRequest` naming the property
    ///   the model refuses.
    public func update<Entity: ODataEntity>(_ entity: Entity) throws(OfflineError) {
        var values = entity.values
        for part in Entity.entityType.key { values[part] = nil }
        try update(entity.entityID, values: values)
    }

    /// Deletes `entity` on the device and queues the deletion.
    public func delete<Entity: ODataEntity>(_ entity: Entity) throws(OfflineError) {
        try delete(entity.entityID)
    }

    /// The entities of `type` the device holds — your own unsynced changes included — with a query
    /// (`$filter=TailNumber eq 'D-AIBL'&$orderby=ChangedAt desc&$top=20`) executed locally.
    ///
    /// - Throws: ``OfflineError`` `BadRequest` for a query the model refuses.
    public func read<Entity: ODataEntity>(_ type: Entity.Type, _ query: String = "") throws(OfflineError)
        -> [Entity]
    {
        let url = query.isEmpty ? Entity.entitySetName : Entity.entitySetName + "?" + query
        return try read(url).map { local throws(OfflineError) in try Self.typed(local, as: type) }
    }

    /// The entity of `type` with the id `id` (``LocalEntity/id``, `ODataEntity/entityID`), or `nil` when the
    /// device does not have it.
    public func entity<Entity: ODataEntity>(_ type: Entity.Type, id: String) throws(OfflineError) -> Entity? {
        guard id.hasPrefix(Entity.entitySetName + "(") else {
            throw OfflineError(.badRequest, "That id is not an entity of \(Entity.entitySetName).")
        }
        return try read(id).first.map { local throws(OfflineError) in try Self.typed(local, as: type) }
    }

    static func typed<Entity: ODataEntity>(_ local: LocalEntity, as type: Entity.Type) throws(OfflineError)
        -> Entity
    {
        do { return try Entity(values: local.values) } catch {
            throw OfflineError(
                .badRequest, "An entity of \(Entity.entitySetName) does not fit \(Entity.self): \(error.message)",
                target: error.target)
        }
    }
}
