import AsyncHTTPClient
import BatonOData
import Foundation
import JWTKit
import NIOCore
import Synchronization

/// Why a sign-in through an identity provider failed: shown to the person and recorded (never a token).
struct OpenIDError: Error, CustomStringConvertible, Equatable {
    var description: String
    init(_ description: String) { self.description = description }
}

/// What Baton reads of a provider's discovery document (OpenID Connect Discovery 1.0 §3).
struct ProviderMetadata: Codable, Sendable, Equatable {
    var issuer: String
    var authorizationEndpoint: String
    var tokenEndpoint: String
    var jwksURI: String
    var signingAlgorithms: [String]?
    /// RFC 9207: the provider sends `iss` with every authorization response.
    var sendsIssuer: Bool?

    enum CodingKeys: String, CodingKey {
        case issuer
        case authorizationEndpoint = "authorization_endpoint"
        case tokenEndpoint = "token_endpoint"
        case jwksURI = "jwks_uri"
        case signingAlgorithms = "id_token_signing_alg_values_supported"
        case sendsIssuer = "authorization_response_iss_parameter_supported"
    }

    /// The asymmetric algorithms Baton verifies ID tokens with; `none` and HMAC are never among them (an HMAC
    /// "keyed" with a provider's public key is the classic forgery).
    static let verifiable: Set<String> = [
        "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
    ]

    /// The algorithms an ID token may be signed with: those the provider announced that Baton verifies, RS256 when
    /// it announced none (OpenID Connect Discovery's default).
    var acceptedAlgorithms: Set<String> {
        Set(signingAlgorithms ?? ["RS256"]).intersection(Self.verifiable)
    }
}

/// The claims of a verified ID token: its subject, and every claim as JSON for the name and group claims.
struct IDTokenClaims: Sendable {
    var subject: String
    var claims: [String: JSONValue]

    /// A claim as one string (`preferred_username`, `email`, `name`).
    func string(_ name: String) -> String? { claims[name]?.stringValue }

    /// A claim as a list of strings (a group claim may be one string or an array).
    func strings(_ name: String) -> [String] {
        claims[name].flatMap { value in value.stringValue.map { [$0] } ?? value.arrayValue?.compactMap(\.stringValue) }
            ?? []
    }
}

/// The relying party's side of OpenID Connect Core 1.0: discovery and JWKS (cached), the code redemption with
/// `client_secret_basic`, and the ID token's validation.
final class OpenIDRelyingParty: Sendable {
    struct Cached: Sendable {
        var metadata: ProviderMetadata
        var fetchedAt: Date
        var jwks: JWKS?
        var jwksFetchedAt: Date?
    }

    let clock: ServerClock
    let cache = Mutex<[String: Cached]>([:])
    /// When each provider's discovery last failed.
    let failures = Mutex<[String: Date]>([:])
    /// How long a failed discovery is not tried again: 30 seconds.
    static let failureBackoff: TimeInterval = 30
    /// How long a discovery document is kept: an hour.
    static let metadataLifetime: TimeInterval = 3_600
    /// How often the JWKS may be fetched again for a key it does not hold: once a minute.
    static let jwksRefreshInterval: TimeInterval = 60
    /// How far `iat` and `exp` may be off Baton's clock.
    static let skew: TimeInterval = 120
    /// The most a provider's answer may weigh.
    static let answerLimit = 1 << 20

    init(clock: ServerClock) { self.clock = clock }

    /// The HTTP client for providers: it follows no redirect, so a provider's endpoint cannot send Baton's
    /// requests (and the client secret) on to another host. It lives as long as the process.
    static let client = HTTPClient(
        eventLoopGroup: HTTPClient.defaultEventLoopGroup,
        configuration: .init(redirectConfiguration: .disallow))

    /// The provider's discovery document, fetched at most once an hour; its `issuer` must be the registered one
    /// exactly (OpenID Connect Discovery 1.0 §4.3), and its endpoints must be `https` (or loopback `http`).
    func metadata(for provider: IdentityProvider) async throws(OpenIDError) -> ProviderMetadata {
        let now = clock.now()
        if let cached = cache.withLock({ $0[provider.name] }), cached.metadata.issuer == provider.issuer,
            now.timeIntervalSince(cached.fetchedAt) < Self.metadataLifetime
        {
            return cached.metadata
        }
        // A provider that just failed is not asked again for half a minute: a page of sign-in buttons pressed
        // while it is away does not make Baton wait on it once per press.
        if let failed = failures.withLock({ $0[provider.name] }), now.timeIntervalSince(failed) < Self.failureBackoff {
            throw OpenIDError("\(provider.displayName) could not be reached a moment ago; try again in a minute.")
        }
        do {
            let metadata = try await discover(provider)
            cache.withLock { $0[provider.name] = Cached(metadata: metadata, fetchedAt: now) }
            failures.withLock { $0[provider.name] = nil }
            return metadata
        } catch {
            failures.withLock { $0[provider.name] = now }
            throw error
        }
    }

    /// Fetches and checks the discovery document.
    func discover(_ provider: IdentityProvider) async throws(OpenIDError) -> ProviderMetadata {
        let base = provider.issuer.hasSuffix("/") ? String(provider.issuer.dropLast()) : provider.issuer
        let data = try await fetch(base + "/.well-known/openid-configuration", what: "discovery document")
        guard let metadata = try? JSONDecoder().decode(ProviderMetadata.self, from: data) else {
            throw OpenIDError("\(provider.displayName)'s discovery document is not valid JSON metadata.")
        }
        guard metadata.issuer == provider.issuer else {
            throw OpenIDError(
                "\(provider.displayName)'s discovery document names another issuer than \(provider.issuer).")
        }
        for endpoint in [metadata.authorizationEndpoint, metadata.tokenEndpoint, metadata.jwksURI]
        where !Self.isAcceptable(endpoint: endpoint, of: provider) {
            // What the provider wrote is not repeated: it reaches pages and the audit log.
            throw OpenIDError("An endpoint in \(provider.displayName)'s discovery document is not https.")
        }
        guard !metadata.acceptedAlgorithms.isEmpty else {
            throw OpenIDError(
                "\(provider.displayName) announces no ID token algorithm Baton verifies (RS256, ES256 …).")
        }
        return metadata
    }

    /// Whether a discovery document's endpoint may be used: `https`, or loopback `http` when the issuer itself is
    /// a loopback `http` one (a provider on the internet never points Baton at this machine's plain HTTP).
    static func isAcceptable(endpoint: String, of provider: IdentityProvider) -> Bool {
        guard let url = URLComponents(string: endpoint), url.host.map({ !$0.isEmpty }) == true, url.user == nil,
            url.password == nil, url.fragment == nil
        else { return false }
        return url.scheme == "https"
            || (BatonServer.isLoopbackHTTP(endpoint) && BatonServer.isLoopbackHTTP(provider.issuer))
    }

    /// The discovery document last fetched for `provider`, if any (however old).
    func cachedMetadata(for provider: IdentityProvider) -> ProviderMetadata? {
        cache.withLock { $0[provider.name] }.flatMap { $0.metadata.issuer == provider.issuer ? $0.metadata : nil }
    }

    /// The JWK that signed a token: from the cached set, or from a fresh one when the `kid` is unknown and the
    /// set was not fetched within the last minute.
    func key(for provider: IdentityProvider, kid: String?) async throws(OpenIDError) -> JWK {
        let metadata = try await metadata(for: provider)
        let now = clock.now()
        let cached = cache.withLock { $0[provider.name] }
        if let jwks = cached?.jwks, let key = Self.find(kid, in: jwks) { return key }
        if let fetched = cached?.jwksFetchedAt, now.timeIntervalSince(fetched) < Self.jwksRefreshInterval {
            throw OpenIDError("The ID token was signed with a key \(provider.displayName) does not publish.")
        }
        let data = try await fetch(metadata.jwksURI, what: "key set")
        // Each key on its own (one of a kind Baton does not use spoils none of the others); keys the provider
        // publishes for encryption (`use: enc`) never verify a signature.
        guard let keys = (try? JSONValue(parsing: Array(data)))?["keys"]?.arrayValue else {
            throw OpenIDError("\(provider.displayName)'s key set is not a valid JWKS.")
        }
        let jwks = JWKS(
            keys: keys.filter { $0["use"]?.stringValue != "enc" }.compactMap {
                try? JSONDecoder().decode(JWK.self, from: Data($0.serialized.utf8))
            })
        cache.withLock {
            $0[provider.name]?.jwks = jwks
            $0[provider.name]?.jwksFetchedAt = now
        }
        guard let key = Self.find(kid, in: jwks) else {
            throw OpenIDError("The ID token was signed with a key \(provider.displayName) does not publish.")
        }
        return key
    }

    /// The key named `kid`, or the only signing key when the token names none.
    static func find(_ kid: String?, in jwks: JWKS) -> JWK? {
        let signing = jwks.keys.filter { $0.keyType == .rsa || $0.keyType == .ecdsa }
        guard let kid else { return signing.count == 1 ? signing[0] : nil }
        return signing.first { $0.keyIdentifier?.string == kid }
    }

    /// Redeems an authorization code at the token endpoint with `client_secret_basic` (RFC 6749 §2.3.1) and
    /// returns the ID token.
    func redeem(
        code: String, verifier: String, redirectURI: String, provider: IdentityProvider, secret: String
    ) async throws(OpenIDError) -> String {
        let metadata = try await metadata(for: provider)
        var request = HTTPClientRequest(url: metadata.tokenEndpoint)
        request.method = .POST
        let user = Self.formEncoded(provider.clientID) + ":" + Self.formEncoded(secret)
        request.headers.add(name: "Authorization", value: "Basic " + Data(user.utf8).base64EncodedString())
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.headers.add(name: "Accept", value: "application/json")
        let form = [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI),
            ("code_verifier", verifier),
        ].map { "\($0.0)=\(Self.formEncoded($0.1))" }.joined(separator: "&")
        request.body = .bytes(ByteBuffer(string: form))
        let (status, data) = try await send(request, what: "token endpoint")
        let answer = try? JSONValue(parsing: Array(data))
        guard status == 200, let idToken = answer?["id_token"]?.stringValue, !idToken.isEmpty else {
            let error = answer?["error"]?.stringValue.map { " (\($0.printableASCII))" } ?? ""
            throw OpenIDError("\(provider.displayName) did not redeem the sign-in code: HTTP \(status)\(error).")
        }
        return idToken
    }

    /// Validates an ID token (OpenID Connect Core 1.0 §3.1.3.7): an algorithm Baton verifies that the provider
    /// announced, a signature by a key of the provider's JWKS, `iss`, `aud` (and `azp` when present or needed),
    /// `exp` and `iat` within ``skew``, and the `nonce` this browser's sign-in sent.
    func validate(
        _ token: String, provider: IdentityProvider, nonce: String
    ) async throws(OpenIDError) -> IDTokenClaims {
        let metadata = try await metadata(for: provider)
        let header = try Self.header(of: token)
        guard metadata.acceptedAlgorithms.contains(header.alg) else {
            throw OpenIDError(
                "The ID token's algorithm \(header.alg.printableASCII) is not one Baton accepts from \(provider.displayName)."
            )
        }
        let jwk = try await key(for: provider, kid: header.kid)
        return try await Self.verify(
            token, header: header, key: jwk, issuer: provider.issuer, clientID: provider.clientID, nonce: nonce,
            now: clock.now())
    }

    /// The checks of ``validate(_:provider:nonce:)`` once the key is known (tests call it with their own keys).
    static func verify(
        _ token: String, header: (alg: String, kid: String?), key: JWK, issuer: String, clientID: String,
        nonce: String, now: Date
    ) async throws(OpenIDError) -> IDTokenClaims {
        let family: JWK.KeyType = header.alg.hasPrefix("ES") ? .ecdsa : .rsa
        guard ProviderMetadata.verifiable.contains(header.alg), key.keyType == family,
            key.algorithm.map({ $0.rawValue == header.alg }) ?? true
        else {
            throw OpenIDError("The ID token's algorithm \(header.alg.printableASCII) does not fit the provider's key.")
        }
        var named = key
        if named.keyIdentifier == nil { named.keyIdentifier = JWKIdentifier(string: "only-key") }
        do {
            let keys = JWTKeyCollection()
            try await keys.add(jwk: named, isDefault: true)
            _ = try await keys.verify(Array(token.utf8), as: SignatureOnly.self)
        } catch {
            throw OpenIDError("The ID token's signature does not verify with the provider's key.")
        }
        let claims = try payload(of: token)
        guard claims["iss"]?.stringValue == issuer else {
            throw OpenIDError("The ID token was issued by someone else than \(issuer).")
        }
        let audiences = IDTokenClaims(subject: "", claims: claims).strings("aud")
        guard audiences.contains(clientID) else { throw OpenIDError("The ID token is meant for another client.") }
        // Core §3.1.3.7: with several audiences `azp` must be there; when it is there, it must be Baton.
        if audiences.count > 1 || claims["azp"] != nil {
            guard claims["azp"]?.stringValue == clientID else {
                throw OpenIDError("The ID token does not name Baton as its authorized party (azp).")
            }
        }
        guard case .number(let expText) = claims["exp"], let exp = Double(expText),
            case .number(let iatText) = claims["iat"], let iat = Double(iatText)
        else {
            throw OpenIDError("The ID token has no exp or iat.")
        }
        let time = now.timeIntervalSince1970
        guard exp + skew > time else { throw OpenIDError("The ID token has expired.") }
        guard iat - skew < time else { throw OpenIDError("The ID token was issued in the future.") }
        guard let sent = claims["nonce"]?.stringValue, sameSecret(sent, nonce) else {
            throw OpenIDError("The ID token's nonce is not the one this sign-in sent.")
        }
        guard let sub = claims["sub"]?.stringValue, (1...255).contains(sub.utf8.count) else {
            throw OpenIDError("The ID token has no subject.")
        }
        return IDTokenClaims(subject: sub, claims: claims)
    }

    /// jwt-kit checks the signature; Baton checks the claims itself, against its own clock.
    struct SignatureOnly: JWTPayload {
        func verify(using algorithm: some JWTAlgorithm) async throws {}
        init(from decoder: any Decoder) throws {}
        func encode(to encoder: any Encoder) throws {}
    }

    /// A JWT part: base64url of a JSON object, read by the project's strict parser.
    static func object(_ part: Substring) -> [String: JSONValue]? {
        guard let data = Data(base64URLEncoded: String(part)),
            let members = (try? JSONValue(parsing: Array(data)))?.objectMembers
        else { return nil }
        return Dictionary(members) { first, _ in first }
    }

    static func header(of token: String) throws(OpenIDError) -> (alg: String, kid: String?) {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard token.utf8.count <= 16_384, parts.count == 3, let header = object(parts[0]),
            let alg = header["alg"]?.stringValue
        else { throw OpenIDError("The ID token is not a signed JWT.") }
        return (alg, header["kid"]?.stringValue)
    }

    static func payload(of token: String) throws(OpenIDError) -> [String: JSONValue] {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let claims = object(parts[1]) else {
            throw OpenIDError("The ID token's claims are not a JSON object.")
        }
        return claims
    }

    /// `application/x-www-form-urlencoded` of one value, byte by byte.
    static func formEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x2E, 0x5F, 0x7E: out.unicodeScalars.append(.init(byte))
            default: out += String(format: "%%%02X", byte)
            }
        }
        return out
    }

    func fetch(_ url: String, what: String) async throws(OpenIDError) -> Data {
        var request = HTTPClientRequest(url: url)
        request.headers.add(name: "Accept", value: "application/json")
        let (status, data) = try await send(request, what: what)
        guard status == 200 else { throw OpenIDError("The provider's \(what) answered HTTP \(status).") }
        return data
    }

    func send(_ request: HTTPClientRequest, what: String) async throws(OpenIDError) -> (UInt, Data) {
        do {
            let response = try await Self.client.execute(request, timeout: .seconds(10))
            let body = try await response.body.collect(upTo: Self.answerLimit)
            return (response.status.code, Data(buffer: body))
        } catch {
            throw OpenIDError("The provider's \(what) cannot be reached.")
        }
    }
}
