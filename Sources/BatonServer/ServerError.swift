import BatonOData
import HTTPTypes

/// An error the server reports to a client: an HTTP status and an OData error body.
///
/// Messages say what failed and how to fix it; they never contain a secret, a password, a token or a
/// stored value.
public struct ServerError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The HTTP status.
    public var status: HTTPResponse.Status
    /// The OData error code (`Unauthorized`, `NotFound`, …).
    public var code: String
    /// What failed and how to fix it.
    public var message: String
    /// The element the error is about, if any.
    public var target: String?
    /// Extra response headers (`WWW-Authenticate`, `Retry-After`).
    public var headers: [(HTTPField.Name, String)] = []

    /// Creates an error, its message and target bounded as an `ODataError`'s are (the backstop for a
    /// site that quotes outside text without cutting it).
    public init(_ status: HTTPResponse.Status, _ code: String, _ message: String, target: String? = nil) {
        self.status = status
        self.code = code
        self.message = message.bounded(toScalars: ODataError.maximumMessageScalars)
        self.target = target?.bounded(toScalars: ODataError.maximumTargetScalars)
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    public static func == (lhs: ServerError, rhs: ServerError) -> Bool {
        lhs.status == rhs.status && lhs.code == rhs.code && lhs.message == rhs.message && lhs.target == rhs.target
    }

    static func badRequest(_ message: String, target: String? = nil) -> ServerError {
        ServerError(.badRequest, "BadRequest", message, target: target)
    }

    static func notFound(_ message: String) -> ServerError { ServerError(.notFound, "NotFound", message) }

    /// 503 `DatabaseUnavailable`: the database is away; the client sends the request again (and a balancer
    /// tries another instance).
    static func databaseUnavailable(
        _ message: String = "The server cannot reach its database; send the request again."
    ) -> ServerError {
        ServerError(.serviceUnavailable, "DatabaseUnavailable", message)
    }

    static func forbidden(_ message: String) -> ServerError { ServerError(.forbidden, "Forbidden", message) }

    static func conflict(_ message: String, target: String? = nil) -> ServerError {
        ServerError(.conflict, "Conflict", message, target: target)
    }

    /// 401 with an RFC 6750 `WWW-Authenticate` challenge.
    static func unauthorized(_ message: String, error: String? = "invalid_token") -> ServerError {
        var failure = ServerError(.unauthorized, "Unauthorized", message)
        var challenge = "Bearer realm=\"baton\""
        if let error {
            challenge +=
                ", error=\"\(error)\", error_description=\"\(message.replacingOccurrences(of: "\"", with: "'"))\""
        }
        failure.headers = [(.wwwAuthenticate, challenge)]
        return failure
    }
}
