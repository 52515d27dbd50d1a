/// An error raised while translating a query to SQL or reading stored values.
public struct BatonSQLError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, opaque error code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's text.
        public let rawValue: String
        init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The query uses something the SQL translation does not support.
        public static let unsupported = Code("SQLUnsupported")
        /// A stored value does not decode as its declared type.
        public static let corruptValue = Code("SQLCorruptValue")
        /// The query names an entity set or property the model does not have.
        public static let unknownName = Code("SQLUnknownName")
        /// The query would translate to more SQL, or more parameters, than the translator allows.
        public static let limitExceeded = Code("LimitExceeded")
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed and how to fix it; never contains bound values.
    public var message: String

    /// Creates an error.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
