import HTTPTypes

/// An OAuth 2.0 error (RFC 6749 §5.2, RFC 7009), answered in OAuth's own JSON shape
/// (`{"error", "error_description"}`) because OAuth clients parse exactly that. Every other route answers
/// OData error bodies.
public struct OAuthError: Error, Sendable, Equatable {
    /// The RFC 6749 error code (`invalid_request`, `invalid_grant`, …).
    public var error: String
    /// A human-readable explanation; never contains a secret.
    public var description: String
    /// The HTTP status: 400, or 401 for `invalid_client`, 429 when throttled.
    public var status: HTTPResponse.Status
    /// Seconds to wait, for 429.
    public var retryAfter: Int?

    init(_ error: String, _ description: String, status: HTTPResponse.Status = .badRequest, retryAfter: Int? = nil) {
        self.error = error
        self.description = description
        self.status = status
        self.retryAfter = retryAfter
    }

    static func invalidRequest(_ description: String) -> OAuthError { OAuthError("invalid_request", description) }
    static func invalidGrant(_ description: String) -> OAuthError { OAuthError("invalid_grant", description) }
    static func invalidClient(_ description: String) -> OAuthError {
        OAuthError("invalid_client", description, status: .unauthorized)
    }
}
