/// A CSDL enumeration type: named members with integer values (`IsFlags` types are not supported).
///
/// An enumeration property's value is its member's name — the JSON payload form — so a payload, the stored row
/// and a filter (`Status eq 'final'`, which OData 4.01 allows without the type's prefix) all see the same text;
/// a name that is not a member is refused. The property's ``Property/type`` is `Edm.String` and its
/// ``Property/enumType`` this type.
public struct EnumType: Sendable, Hashable {
    /// One member: its name and value.
    public struct Member: Sendable, Hashable {
        public var name: String
        public var value: Int64
        public init(name: String, value: Int64) {
            self.name = name
            self.value = value
        }
    }

    /// The namespace-qualified name (`Baton.CheckStatus`).
    public var qualifiedName: String
    /// The members, in declaration order.
    public var members: [Member]
    /// The integer type of the members' values (`Edm.Int32` unless the model says otherwise).
    public var underlyingType: EdmPrimitiveType

    public init(qualifiedName: String, members: [Member], underlyingType: EdmPrimitiveType = .int32) {
        self.qualifiedName = qualifiedName
        self.members = members
        self.underlyingType = underlyingType
    }

    /// The simple name (`CheckStatus`).
    public var name: String { qualifiedName.split(separator: ".").last.map(String.init) ?? qualifiedName }

    /// The member named `name` (names compare exactly, by Unicode scalar).
    public func member(named name: String) -> Member? {
        members.first { Array($0.name.unicodeScalars) == Array(name.unicodeScalars) }
    }
}
