import Foundation

/// A user's OAuth 2.0 tokens. Kept only in that user's secure store.
public struct OAuthTokens: Sendable, Hashable, Codable {
    public var accessToken: String
    public var refreshToken: String?
    /// When the access token expires.
    public var expiresAt: Date

    public init(accessToken: String, refreshToken: String?, expiresAt: Date) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.expiresAt = expiresAt
    }

    /// Whether the access token expires within `margin` of `now` (then it is refreshed before use).
    public func needsRefresh(at now: Date, margin: TimeInterval = 60) -> Bool {
        expiresAt.timeIntervalSince(now) <= margin
    }
}

/// The OAuth 2.0 client of the first-party device app: the password grant, rotation of refresh tokens, and
/// revocation (RFC 6749, RFC 7009), against the endpoints the server's metadata names.
public struct OAuthClient: Sendable {
    public let metadata: AuthorizationServerMetadata
    public let clientID: String
    let transport: any HTTPTransport
    let now: @Sendable () -> Date

    public init(
        metadata: AuthorizationServerMetadata, clientID: String, transport: any HTTPTransport,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.metadata = metadata
        self.clientID = clientID
        self.transport = transport
        self.now = now
    }

    /// Signs in with user name and password (the resource-owner password grant, for this first-party app).
    ///
    /// - Throws: ``BatonClientError``: `InvalidCredentials`, `Unreachable`, `InvalidResponse`.
    public func signIn(username: String, password: String) async throws(BatonClientError) -> OAuthTokens {
        try await token([
            ("grant_type", "password"), ("client_id", clientID), ("username", username), ("password", password),
        ])
    }

    /// Exchanges the refresh token for new tokens (the server rotates refresh tokens: the old one is spent).
    ///
    /// - Throws: ``BatonClientError``: `Unauthorized` when the refresh token is no longer valid.
    public func refresh(_ tokens: OAuthTokens) async throws(BatonClientError) -> OAuthTokens {
        guard let refreshToken = tokens.refreshToken else {
            throw BatonClientError(.unauthorized, "The session has no refresh token; sign in again.")
        }
        do {
            return try await token([
                ("grant_type", "refresh_token"), ("client_id", clientID), ("refresh_token", refreshToken),
            ])
        } catch  where error.code == .invalidCredentials {
            throw BatonClientError(
                .unauthorized, "The session has ended on the server; sign in again.", status: error.status,
                serverCode: error.serverCode)
        }
    }

    /// Revokes the refresh token (and with it its family) and the access token. Best effort: a server that
    /// cannot be reached is reported, an unknown token is not an error (RFC 7009).
    public func revoke(_ tokens: OAuthTokens) async throws(BatonClientError) {
        guard let endpoint = metadata.revocationEndpoint.flatMap(URL.init(string:)) else { return }
        var pairs = [(String, String)]()
        if let refresh = tokens.refreshToken { pairs.append(("token", refresh)) }
        pairs.append(("token", tokens.accessToken))
        for (name, value) in pairs {
            let response = try await transport.send(
                ClientRequest(
                    method: "POST", url: endpoint,
                    headers: [("Content-Type", "application/x-www-form-urlencoded")],
                    body: Self.form([(name, value), ("client_id", clientID)])))
            guard response.status == 200 else {
                throw BatonClient.error(from: response, doing: "revoke the session")
            }
        }
    }

    /// Starts a sign-in through a browser elsewhere (RFC 8628): the code to show the person and where they enter it.
    ///
    /// - Throws: ``BatonClientError``: `InvalidResponse` for a server without device authorization; the server's
    ///   refusal (`unauthorized_client` when its settings do not allow it).
    public func startDeviceAuthorization(scope: String? = nil) async throws(BatonClientError) -> DeviceAuthorization {
        guard let endpoint = metadata.deviceAuthorizationEndpoint.flatMap(URL.init(string:)) else {
            throw BatonClientError(.invalidResponse, "This server has no sign-in through a browser.")
        }
        var form = [("client_id", clientID)]
        if let scope { form.append(("scope", scope)) }
        let response = try await transport.send(
            ClientRequest(
                method: "POST", url: endpoint,
                headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")],
                body: Self.form(form)))
        guard response.status == 200,
            let started = try? JSONDecoder().decode(DeviceAuthorization.self, from: Data(response.body))
        else { throw BatonClient.error(from: response, doing: "start the sign-in through a browser") }
        return started
    }

    /// One poll of the token endpoint for `authorization`: the tokens once the person approved, `nil` while the
    /// approval is pending. `slow_down` makes `interval` longer by 5 s, as RFC 8628 §3.5 asks.
    ///
    /// - Throws: ``BatonClientError`` with server code `access_denied` or `expired_token`, or the server's error.
    public func pollDeviceToken(_ authorization: DeviceAuthorization, interval: inout Int)
        async throws(BatonClientError) -> OAuthTokens?
    {
        do {
            return try await token([
                ("grant_type", DeviceAuthorization.grantType), ("client_id", clientID),
                ("device_code", authorization.deviceCode),
            ])
        } catch  where error.serverCode == "authorization_pending" {
            return nil
        } catch  where error.serverCode == "slow_down" {
            interval += 5
            return nil
        }
    }

    func token(_ form: [(String, String)]) async throws(BatonClientError) -> OAuthTokens {
        guard let endpoint = URL(string: metadata.tokenEndpoint) else {
            throw BatonClientError(.invalidResponse, "The server's token endpoint is not a URL.")
        }
        let sentAt = now()
        let response = try await transport.send(
            ClientRequest(
                method: "POST", url: endpoint,
                headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")],
                body: Self.form(form)))
        guard response.status == 200 else {
            let error = BatonClient.error(from: response, doing: "sign in")
            if response.status == 400 || response.status == 401, error.serverCode == "invalid_grant" {
                throw BatonClientError(
                    .invalidCredentials, "The user name or password is wrong, or the account is disabled.",
                    status: response.status, serverCode: error.serverCode)
            }
            throw error
        }
        struct Answer: Decodable {
            var accessToken: String
            var refreshToken: String?
            var expiresIn: Double
            var tokenType: String
            enum CodingKeys: String, CodingKey {
                case accessToken = "access_token", refreshToken = "refresh_token", expiresIn = "expires_in"
                case tokenType = "token_type"
            }
        }
        guard let answer = try? JSONDecoder().decode(Answer.self, from: Data(response.body)),
            answer.tokenType.lowercased() == "bearer"
        else { throw BatonClientError(.invalidResponse, "The token endpoint's answer is not an OAuth token response.") }
        return OAuthTokens(
            accessToken: answer.accessToken, refreshToken: answer.refreshToken,
            expiresAt: sentAt.addingTimeInterval(answer.expiresIn))
    }

    /// `application/x-www-form-urlencoded`.
    static func form(_ pairs: [(String, String)]) -> [UInt8] {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let text = pairs.map { name, value in
            let encoded = value.addingPercentEncoding(withAllowedCharacters: allowed) ?? ""
            return "\(name)=\(encoded)"
        }.joined(separator: "&")
        return Array(text.utf8)
    }
}

/// A sign-in through a browser elsewhere, as the server started it (RFC 8628 §3.2).
public struct DeviceAuthorization: Sendable, Hashable, Decodable {
    static let grantType = "urn:ietf:params:oauth:grant-type:device_code"
    /// The secret the device polls with; never shown.
    public var deviceCode: String
    /// What the person types on the page (`BDFH-KLMN`).
    public var userCode: String
    public var verificationURI: String
    /// The page with the code filled in (for a QR code or a link).
    public var verificationURIComplete: String?
    public var expiresIn: Int
    public var interval: Int

    enum CodingKeys: String, CodingKey {
        case deviceCode = "device_code", userCode = "user_code", verificationURI = "verification_uri"
        case verificationURIComplete = "verification_uri_complete", expiresIn = "expires_in", interval
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        deviceCode = try container.decode(String.self, forKey: .deviceCode)
        userCode = try container.decode(String.self, forKey: .userCode)
        verificationURI = try container.decode(String.self, forKey: .verificationURI)
        verificationURIComplete = try container.decodeIfPresent(String.self, forKey: .verificationURIComplete)
        expiresIn = try container.decode(Int.self, forKey: .expiresIn)
        interval = try container.decodeIfPresent(Int.self, forKey: .interval) ?? 5
    }
}
