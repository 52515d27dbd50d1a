import JWTKit

/// The claims of a Baton access token (an ES256 JWT).
struct AccessTokenClaims: JWTPayload, Equatable {
    var iss: IssuerClaim
    var sub: SubjectClaim
    var aud: AudienceClaim
    var scope: String
    var exp: ExpirationClaim
    var iat: IssuedAtClaim
    var jti: IDClaim
    var clientID: String
    /// The sign-in (refresh-token family) the token was issued for: revoking the family revokes the token.
    var family: String?

    enum CodingKeys: String, CodingKey {
        case iss, sub, aud, scope, exp, iat, jti
        case clientID = "client_id"
        case family = "fam"
    }

    /// Whether the token grants `wanted`: one of the space-separated scopes, compared byte for byte (a combining
    /// mark after a space cannot join two scopes into one), without building strings on every request. Empty
    /// pieces are dropped, so the empty scope is never granted.
    func grants(_ wanted: String) -> Bool {
        let bytes = scope.utf8
        var start = bytes.startIndex
        while start < bytes.endIndex {
            let end = bytes[start...].firstIndex(of: UInt8(ascii: " ")) ?? bytes.endIndex
            if start < end, bytes[start..<end].elementsEqual(wanted.utf8) { return true }
            start = end < bytes.endIndex ? bytes.index(after: end) : end
        }
        return false
    }

    /// Signature is checked by the key collection; time and audience are checked by ``TokenService`` with the
    /// injected clock.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
