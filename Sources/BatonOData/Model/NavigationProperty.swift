/// A navigation property: a relationship from one entity type to another.
public struct NavigationProperty: Sendable, Hashable {
    /// The property's name, unique within its entity type.
    public var name: String
    /// The qualified name of the target entity type.
    public var targetType: String
    /// Whether the property leads to a collection of entities.
    public var isCollection: Bool
    /// Whether a single-valued navigation may be null.
    public var isNullable: Bool
    /// The name of the partner navigation property on the target type, if any.
    public var partner: String?
    /// Pairs of (property on this type, property on the target type) that relate the two.
    public var referentialConstraints: [ReferentialConstraint]

    /// A dependent property of this type and the principal property of the target that it refers to.
    public struct ReferentialConstraint: Sendable, Hashable {
        /// The property on the declaring (dependent) type.
        public var property: String
        /// The property on the target (principal) type.
        public var referencedProperty: String

        /// Creates a constraint.
        public init(property: String, referencedProperty: String) {
            self.property = property
            self.referencedProperty = referencedProperty
        }
    }

    /// Creates a navigation property.
    public init(
        name: String, targetType: String, isCollection: Bool = false, isNullable: Bool = true,
        partner: String? = nil, referentialConstraints: [ReferentialConstraint] = []
    ) {
        self.name = name
        self.targetType = targetType
        self.isCollection = isCollection
        self.isNullable = isNullable
        self.partner = partner
        self.referentialConstraints = referentialConstraints
    }
}
