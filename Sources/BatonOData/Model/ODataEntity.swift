import Foundation

/// A Swift type for one entity type of a model: a struct with a typed stored property per structural property.
///
/// `baton-codegen` writes one per entity type of a CSDL JSON model (the aircraft-checks model's are the
/// `AircraftChecks` library); the offline store (`OfflineStore.create(_:)`, `read(_:_:)`) and the client
/// (`AuthorizedSession.entities(_:_:)`) take and return them. The dictionary API (`[String: PrimitiveValue]`)
/// stays for dynamic use; ``values`` and ``init(values:)`` translate between the two.
public protocol ODataEntity: Sendable, Hashable {
    /// The entity set the type's entities live in (`PreflightChecks`).
    static var entitySetName: String { get }
    /// The entity type as the model declares it: names, types and facets.
    static var entityType: EntityType { get }
    /// Reads an entity from property values, as the offline store and a decoded payload hold them. Properties the
    /// type does not declare are ignored.
    ///
    /// - Throws: ``ODataError`` `InvalidPayload` naming the first property that is missing or of another type.
    init(values: [String: PrimitiveValue]) throws(ODataError)
    /// The values of every property an app sets — each non-computed one, `null` for an absent optional. Computed
    /// (server-kept) properties are left out: the server sets them.
    var values: [String: PrimitiveValue] { get }
}

extension ODataEntity {
    /// The entity's key, in key order.
    public var key: [KeyValue] {
        let values = values
        return Self.entityType.key.map { KeyValue(name: $0, value: values[$0] ?? .null) }
    }

    /// The entity's canonical URL relative to the service root — `PreflightChecks(0f8f…)` — the id the offline
    /// store and the server use.
    public var entityID: String { ResourcePath.canonicalURL(entitySet: Self.entitySetName, key: key) }

    /// Reads an entity from a JSON object the server sent: every declared property, the computed ones included;
    /// annotations (`@odata.etag`, …) and undeclared members are skipped.
    ///
    /// - Throws: ``ODataError`` `InvalidPayload` naming the property whose value has the wrong type.
    public init(json: JSONValue) throws(ODataError) {
        guard let members = json.objectMembers else {
            throw ODataError(.invalidPayload, "An entity must be a JSON object, but this one is \(json.kindName)")
        }
        var values: [String: PrimitiveValue] = [:]
        for (name, value) in members where !name.contains("@") {
            guard let property = Self.entityType.property(named: name) else { continue }
            values[name] = try PrimitiveValue(json: value, for: property)
        }
        try self.init(values: values)
    }
}

/// A Swift value that stands for an Edm primitive value: what the properties of an ``ODataEntity`` are typed with.
///
/// | Edm type | Swift type |
/// | --- | --- |
/// | `Edm.String` | `String` |
/// | `Edm.Boolean` | `Bool` |
/// | `Edm.Byte`, `Edm.SByte`, `Edm.Int16`, `Edm.Int32`, `Edm.Int64` | `UInt8`, `Int8`, `Int16`, `Int32`, `Int64` |
/// | `Edm.Decimal` | `Decimal` |
/// | `Edm.Single`, `Edm.Double` | `Float`, `Double` |
/// | `Edm.Guid` | `UUID` |
/// | `Edm.DateTimeOffset` | `Date` (to the millisecond, in UTC) |
/// | `Edm.Date`, `Edm.TimeOfDay`, `Edm.Duration` | ``ODataDate``, ``ODataTimeOfDay``, ``ODataDuration`` |
/// | `Edm.Binary` | `Data` |
public protocol ODataPrimitive: Sendable, Hashable {
    /// The value, or `nil` when `value` is not of this type (or out of its range).
    init?(primitive value: PrimitiveValue)
    /// The value as the offline store and a payload hold it.
    var primitiveValue: PrimitiveValue { get }
}

extension String: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .string(let text) = value else { return nil }
        self = text
    }
    public var primitiveValue: PrimitiveValue { .string(self) }
}

extension Bool: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .boolean(let flag) = value else { return nil }
        self = flag
    }
    public var primitiveValue: PrimitiveValue { .boolean(self) }
}

extension Int64: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .integer(let number) = value else { return nil }
        self = number
    }
    public var primitiveValue: PrimitiveValue { .integer(self) }
}

extension Int32: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .integer(let number) = value, let exact = Int32(exactly: number) else { return nil }
        self = exact
    }
    public var primitiveValue: PrimitiveValue { .integer(Int64(self)) }
}

extension Int16: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .integer(let number) = value, let exact = Int16(exactly: number) else { return nil }
        self = exact
    }
    public var primitiveValue: PrimitiveValue { .integer(Int64(self)) }
}

extension Int8: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .integer(let number) = value, let exact = Int8(exactly: number) else { return nil }
        self = exact
    }
    public var primitiveValue: PrimitiveValue { .integer(Int64(self)) }
}

extension UInt8: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .integer(let number) = value, let exact = UInt8(exactly: number) else { return nil }
        self = exact
    }
    public var primitiveValue: PrimitiveValue { .integer(Int64(self)) }
}

extension Decimal: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        switch value {
        case .decimal(let number): self = number
        case .integer(let number): self = Decimal(number)
        default: return nil
        }
    }
    public var primitiveValue: PrimitiveValue { .decimal(self) }
}

extension Double: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .double(let number) = value else { return nil }
        self = number
    }
    public var primitiveValue: PrimitiveValue { .double(self) }
}

extension Float: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .double(let number) = value, number.fitsSingle else { return nil }
        self = Float(number)
    }
    public var primitiveValue: PrimitiveValue { .double(Double(self)) }
}

extension UUID: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .guid(let id) = value else { return nil }
        self = id
    }
    public var primitiveValue: PrimitiveValue { .guid(self) }
}

extension Date: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .dateTimeOffset(let instant) = value else { return nil }
        // Whole milliseconds, as `ODataDateTimeOffset(_:)` keeps them, so a value read back compares equal.
        let (milliseconds, overflow) = Int64(instant.utcSecondsSinceEpoch).multipliedReportingOverflow(by: 1000)
        guard !overflow else { return nil }
        self = Date(timeIntervalSince1970: Double(milliseconds + instant.time.picoseconds / 1_000_000_000) / 1000)
    }
    public var primitiveValue: PrimitiveValue { .dateTimeOffset(ODataDateTimeOffset(self)) }
}

extension ODataDate: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .date(let date) = value else { return nil }
        self = date
    }
    public var primitiveValue: PrimitiveValue { .date(self) }
}

extension ODataTimeOfDay: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .timeOfDay(let time) = value else { return nil }
        self = time
    }
    public var primitiveValue: PrimitiveValue { .timeOfDay(self) }
}

extension ODataDuration: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .duration(let duration) = value else { return nil }
        self = duration
    }
    public var primitiveValue: PrimitiveValue { .duration(self) }
}

extension Data: ODataPrimitive {
    public init?(primitive value: PrimitiveValue) {
        guard case .binary(let bytes) = value else { return nil }
        self = Data(bytes)
    }
    public var primitiveValue: PrimitiveValue { .binary(Array(self)) }
}

/// Reads typed property values out of a dictionary for ``ODataEntity/init(values:)``, with errors that name the
/// property the way the server's payload checks do.
public struct EntityValueReader: Sendable {
    let values: [String: PrimitiveValue]
    let type: EntityType

    /// A reader of `values` for an entity of `type`.
    public init(_ values: [String: PrimitiveValue], of type: EntityType) {
        self.values = values
        self.type = type
    }

    /// The value of a non-nullable property.
    ///
    /// - Throws: ``ODataError`` `InvalidPayload` when it is missing, null or of another type.
    public func required<Value: ODataPrimitive>(_ name: String) throws(ODataError) -> Value {
        guard let value = values[name] else {
            throw ODataError(.invalidPayload, "Property '\(name)' is required; add it to the body", target: name)
        }
        guard let typed = Value(primitive: value) else { throw mismatch(name, value) }
        return typed
    }

    /// The value of a nullable (or computed) property; `nil` when absent or null.
    ///
    /// - Throws: ``ODataError`` `InvalidPayload` when it is of another type.
    public func optional<Value: ODataPrimitive>(_ name: String) throws(ODataError) -> Value? {
        guard let value = values[name], value != .null else { return nil }
        guard let typed = Value(primitive: value) else { throw mismatch(name, value) }
        return typed
    }

    func mismatch(_ name: String, _ value: PrimitiveValue) -> ODataError {
        if let enumType = type.property(named: name)?.enumType {
            return ODataError(
                .invalidPayload,
                "Property '\(name)' of '\(type.name)' expects a member of \(enumType.qualifiedName) ("
                    + enumType.members.map { $0.name }.joined(separator: ", ") + ")", target: name)
        }
        let expected = type.property(named: name)?.type.rawValue ?? "its declared type"
        let given = value.literalType?.rawValue ?? "null"
        return ODataError(
            .invalidPayload, "Property '\(name)' of '\(type.name)' expects \(expected), but the value is \(given)",
            target: name)
    }
}

extension PrimitiveValue {
    /// Whether two values are the same value written the same way: strings compare by Unicode scalar (a Kelvin sign
    /// is not a K, though Swift's `==` says so), other values by `==`. What a key comparison must use.
    public func isIdentical(to other: PrimitiveValue) -> Bool {
        if case .string(let left) = self, case .string(let right) = other {
            return left.unicodeScalars.elementsEqual(right.unicodeScalars)
        }
        return self == other
    }

    /// The value of JSON text for a property of `type` (generated code writes CSDL defaults this way); `nil` when the
    /// text is not a value of that type.
    public init?(jsonText: String, as type: EdmPrimitiveType) {
        guard let json = try? JSONValue(parsing: Array(jsonText.utf8)),
            let value = try? PrimitiveValue(json: json, for: Property(name: "value", type: type))
        else { return nil }
        self = value
    }

    /// `value`'s primitive value, or `null` for `nil`: an optional property of an ``ODataEntity``.
    public init(_ value: (some ODataPrimitive)?) {
        self = value?.primitiveValue ?? .null
    }
}
