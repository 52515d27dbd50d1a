/// A structural property of an entity type, with an Edm primitive type and its facets.
public struct Property: Sendable, Hashable {
    /// The property's name, unique within its entity type.
    public var name: String
    /// The property's primitive type.
    public var type: EdmPrimitiveType
    /// Whether the property may be null. Defaults to `true` (CSDL XML's default; in CSDL JSON an absent
    /// `$Nullable` means `false`, and the loader follows that). Key properties must not be nullable.
    public var isNullable: Bool
    /// The maximum length of a string or binary value, if limited.
    public var maxLength: Int?
    /// The number of significant digits of a decimal, or of fractional-second digits of a temporal value.
    public var precision: Int?
    /// The number of digits right of the decimal point; `nil` means unspecified (CSDL's default, 0, applies
    /// only when `$Scale` is written).
    public var scale: Int?
    /// Whether the server computes the value (`Core.Computed`): clients may not set it.
    public var isComputed: Bool
    /// The value a create (or a replace) stores when the body leaves the property out (CSDL `DefaultValue`).
    /// Default: none, so a non-nullable property must be sent.
    public var defaultValue: PrimitiveValue?
    /// The enumeration type of an enumeration property: its ``type`` is then `Edm.String` and its values are member
    /// names.
    public var enumType: EnumType?

    /// Creates a property. Every facet defaults to CSDL's default.
    public init(
        name: String, type: EdmPrimitiveType, isNullable: Bool = true, maxLength: Int? = nil,
        precision: Int? = nil, scale: Int? = nil, isComputed: Bool = false, defaultValue: PrimitiveValue? = nil,
        enumType: EnumType? = nil
    ) {
        self.enumType = enumType
        self.name = name
        self.type = type
        self.isNullable = isNullable
        self.maxLength = maxLength
        self.precision = precision
        self.scale = scale
        self.isComputed = isComputed
        self.defaultValue = defaultValue
    }
}
