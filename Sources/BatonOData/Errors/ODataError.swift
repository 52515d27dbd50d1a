/// An error raised by the OData protocol core: a bad URL, filter, payload, batch, header or model.
///
/// The ``code`` is opaque and stable; ``message`` says what failed, quotes the offending token and suggests a
/// fix. ``position`` is the zero-based character offset in the input that was being parsed, when there is one.
/// Messages quote syntax (names, operators, literals) but never the values of a payload.
public struct ODataError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, opaque error code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's text, as it appears in an OData error body.
        public let rawValue: String
        init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The input does not follow the OData grammar.
        public static let syntax = Code("SyntaxError")
        /// A name (property, entity set, option, function) is not known to the model or the protocol.
        public static let unknownName = Code("UnknownName")
        /// Operand or value types do not fit together.
        public static let typeMismatch = Code("TypeMismatch")
        /// A valid OData construct that Baton does not implement.
        public static let notImplemented = Code("NotImplemented")
        /// A CSDL model is inconsistent.
        public static let invalidModel = Code("InvalidModel")
        /// A request or response body does not fit the model.
        public static let invalidPayload = Code("InvalidPayload")
        /// A `$batch` body is malformed.
        public static let invalidBatch = Code("InvalidBatch")
        /// An HTTP header value is malformed.
        public static let invalidHeader = Code("InvalidHeader")
        /// Input exceeds a safety limit (nesting depth, length).
        public static let limitExceeded = Code("LimitExceeded")
    }

    /// What kind of failure this is.
    public var code: Code
    /// A sentence that says what failed, quotes the offending token and suggests the fix.
    public var message: String
    /// The zero-based offset in the parsed input where the problem starts, if known.
    public var position: Int?
    /// The name of the element the error is about (a property, option or header), if any.
    public var target: String?

    /// Creates an error. Its message keeps its first ``maximumMessageScalars`` Unicode scalars and its target its
    /// first ``maximumTargetScalars``: the sites that quote outside text cut it to its first 80 scalars, and this is
    /// the backstop for a site that does not — an error never echoes a request's whole text.
    public init(_ code: Code, _ message: String, position: Int? = nil, target: String? = nil) {
        self.code = code
        self.message = message.bounded(toScalars: Self.maximumMessageScalars)
        self.position = position
        self.target = target?.bounded(toScalars: Self.maximumTargetScalars)
    }

    /// The most Unicode scalars an error's message keeps (one followed by `…` beyond it).
    public static let maximumMessageScalars = 1_024
    /// The most Unicode scalars an error's target keeps: a name, an option, a header or a request id.
    public static let maximumTargetScalars = 128

    public var description: String {
        if let position { return "\(message) (at position \(position))" }
        return message
    }
}
