/// What went wrong talking to baton-server: an opaque code, a message that says what failed, and for server
/// answers the HTTP status and the server's own error code.
public struct BatonClientError: Error, Sendable, Equatable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// No response: no route, refused, timed out. The app works on offline.
        public static let unreachable = Code("Unreachable")
        /// The user name or password is wrong, or the user is disabled.
        public static let invalidCredentials = Code("InvalidCredentials")
        /// The server no longer accepts the session (token revoked or expired, refresh failed): sign in again.
        public static let unauthorized = Code("Unauthorized")
        /// The server refuses this app version; the app must be updated.
        public static let appVersionInactive = Code("AppVersionInactive")
        /// The user may not do this.
        public static let forbidden = Code("Forbidden")
        /// The server answered with an error not covered above.
        public static let server = Code("ServerError")
        /// The server's answer is not what the protocol says.
        public static let invalidResponse = Code("InvalidResponse")
        /// The session this client belonged to was locked, closed or removed: it sends nothing any more.
        public static let sessionInvalidated = Code("SessionInvalidated")
        /// The server URL is not usable.
        public static let invalidServerURL = Code("InvalidServerURL")
    }

    public var code: Code
    public var message: String
    /// The HTTP status, for server answers.
    public var status: Int?
    /// The server's error code (OData error `code` or OAuth `error`), for server answers.
    public var serverCode: String?

    public init(_ code: Code, _ message: String, status: Int? = nil, serverCode: String? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.serverCode = serverCode
    }

    public var description: String { message }
}
