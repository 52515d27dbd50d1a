/// The system query options of a request, parsed and bound to the target entity type.
public struct QueryOptions: Sendable, Hashable {
    /// `$filter`, a boolean expression.
    public var filter: ODataExpression?
    /// `$select`: the selected property names, or `nil` for all (no `$select`, or `*`).
    public var select: [String]?
    /// `$expand`: the navigation properties to expand, each with its own nested options.
    public var expand: [ExpandItem] = []
    /// `$orderby`, in priority order.
    public var orderBy: [OrderByItem] = []
    /// `$top`.
    public var top: Int?
    /// `$skip`.
    public var skip: Int?
    /// `$count=true`.
    public var count: Bool = false
    /// `$search`.
    public var search: SearchExpression?
    /// `$skiptoken`, opaque to the client.
    public var skipToken: String?
    /// `$deltatoken`, opaque to the client.
    public var deltaToken: String?
    /// `$format`, as given (`json`, `application/json;odata.metadata=minimal`, `xml`).
    public var format: String?
    /// Custom query options (names that do not start with `$` or `@`), in order.
    public var customOptions: [CustomOption] = []

    /// No options.
    public init() {}
}

/// One custom query option.
public struct CustomOption: Sendable, Hashable {
    /// The option's (decoded) name.
    public var name: String
    /// The option's (decoded) value.
    public var value: String

    /// Creates a custom option.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// One `$orderby` item.
public struct OrderByItem: Sendable, Hashable {
    /// The expression to sort by.
    public var expression: ODataExpression
    /// Whether the order is descending.
    public var descending: Bool

    /// Creates an item.
    public init(_ expression: ODataExpression, descending: Bool = false) {
        self.expression = expression
        self.descending = descending
    }
}

/// One `$expand` item: a navigation property and the options applied to the expanded entities.
public struct ExpandItem: Sendable, Hashable {
    /// The navigation property to expand.
    public var navigationProperty: String
    /// The qualified name of its target entity type.
    public var targetType: String
    /// Whether it leads to a collection.
    public var isCollection: Bool
    /// Nested options (`$filter`, `$select`, `$expand`, `$orderby`, `$top`, `$skip`, `$count`).
    public var options: QueryOptions
}

/// A `$search` expression: terms and phrases combined with `AND`, `OR` and `NOT`.
public indirect enum SearchExpression: Sendable, Hashable {
    /// A word or a quoted phrase, matched case-insensitively.
    case term(String)
    case not(SearchExpression)
    case and(SearchExpression, SearchExpression)
    case or(SearchExpression, SearchExpression)
}
