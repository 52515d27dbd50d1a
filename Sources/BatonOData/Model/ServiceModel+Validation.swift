extension ServiceModel {
    /// Checks that every name is declared once and every reference in the model resolves. Names are told apart as
    /// Swift's `String` tells them apart, so two that are canonically equivalent (`Café` composed and decomposed)
    /// count as one: the server keys its caches of SQL text and columns by name, and would take one for the other.
    /// The model's initialisers run it; a model changed through its properties afterwards is checked again by calling
    /// it (the server does, as it starts).
    ///
    /// - Throws: ``ODataError`` with code `invalidModel`, naming what to fix.
    public func validate() throws(ODataError) {
        func fail(_ message: String, _ target: String) -> ODataError {
            ODataError(.invalidModel, message, target: target)
        }
        var typeNames: Set<String> = []
        for type in entityTypes {
            guard typeNames.insert(type.name).inserted else {
                throw fail("Entity type '\(type.name)' is declared twice. Rename one of them.", type.name)
            }
            guard !type.key.isEmpty else {
                throw fail(
                    "Entity type '\(type.name)' has no key. Add \"$Key\": [\"<property>\"] to its declaration.",
                    type.name)
            }
            var memberNames: Set<String> = []
            for name in type.memberNames where !memberNames.insert(name).inserted {
                throw fail("Entity type '\(type.name)' declares the member '\(name)' twice.", name)
            }
            for keyName in type.key {
                guard let property = type.property(named: keyName) else {
                    throw fail(
                        "Key property '\(keyName)' of entity type '\(type.name)' is not a property of that type.",
                        keyName)
                }
                guard !property.isNullable else {
                    throw fail(
                        "Key property '\(type.name)/\(keyName)' is nullable. Keys must be \"$Nullable\": false.",
                        keyName)
                }
            }
            for navigation in type.navigationProperties {
                guard let target = entityType(named: navigation.targetType) else {
                    throw fail(
                        "Navigation property '\(type.name)/\(navigation.name)' points at unknown type "
                            + "'\(navigation.targetType)'. Declare that entity type or fix the name.",
                        navigation.name)
                }
                if let partner = navigation.partner, target.navigationProperty(named: partner) == nil {
                    throw fail(
                        "Navigation property '\(type.name)/\(navigation.name)' names partner '\(partner)', "
                            + "which '\(target.name)' does not declare.",
                        navigation.name)
                }
                for constraint in navigation.referentialConstraints {
                    guard type.property(named: constraint.property) != nil else {
                        throw fail(
                            "Referential constraint of '\(type.name)/\(navigation.name)' names unknown property "
                                + "'\(constraint.property)'.",
                            constraint.property)
                    }
                    guard target.property(named: constraint.referencedProperty) != nil else {
                        throw fail(
                            "Referential constraint of '\(type.name)/\(navigation.name)' names unknown property "
                                + "'\(target.name)/\(constraint.referencedProperty)'.",
                            constraint.referencedProperty)
                    }
                }
            }
        }
        var setNames: Set<String> = []
        for set in entitySets {
            guard setNames.insert(set.name).inserted else {
                throw fail("Entity set '\(set.name)' is declared twice.", set.name)
            }
            guard let type = entityType(named: set.entityType) else {
                throw fail(
                    "Entity set '\(set.name)' has unknown type '\(set.entityType)'. Declare that entity type.",
                    set.name)
            }
            for (path, targetSet) in set.navigationBindings {
                guard type.navigationProperty(named: path) != nil else {
                    throw fail(
                        "Entity set '\(set.name)' binds unknown navigation property '\(path)' of '\(type.name)'.",
                        path)
                }
                guard entitySet(named: targetSet) != nil else {
                    throw fail(
                        "Entity set '\(set.name)' binds '\(path)' to unknown entity set '\(targetSet)'.", targetSet)
                }
            }
            for name in set.optimisticConcurrency where type.property(named: name) == nil {
                throw fail(
                    "Core.OptimisticConcurrency of entity set '\(set.name)' names unknown property '\(name)'.", name)
            }
        }
    }
}
