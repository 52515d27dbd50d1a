/// What went wrong in the offline store: an opaque code and a message that says what failed.
public struct OfflineError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The store is not open for a user.
        public static let notOpen = Code("NotOpen")
        /// The request (URL, query, values) is not valid for the model.
        public static let badRequest = Code("BadRequest")
        /// No such entity in the store.
        public static let notFound = Code("NotFound")
        /// The store's files cannot be read or written.
        public static let storage = Code("Storage")
        /// The server cannot be reached; local work goes on.
        public static let offline = Code("Offline")
        /// The server refused the session or answered in a way sync cannot use.
        public static let server = Code("Server")
        /// The user still has changes on this device that are not on the server.
        public static let pendingChanges = Code("PendingChanges")
    }

    public var code: Code
    public var message: String
    /// The property a `BadRequest` is about, when it is about one (as the server's error `target`).
    public var target: String?

    public init(_ code: Code, _ message: String, target: String? = nil) {
        self.code = code
        self.message = message
        self.target = target
    }

    public var description: String { message }
}
