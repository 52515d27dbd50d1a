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

    /// Whether the token grants `scope`.
    func grants(_ scope: String) -> Bool { self.scope.split(separator: " ").contains { $0 == scope } }

    /// Signature is checked by the key collection; time and audience are checked by ``TokenService`` with the
    /// injected clock.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
