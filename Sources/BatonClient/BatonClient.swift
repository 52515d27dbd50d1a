import BatonOData
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The device's client for baton-server: discovery, settings exchange, the signed-in user, device
/// registration, the device store key, and a connectivity check. Stateless; calls that need a user take
/// their access token (``AuthorizedSession`` keeps tokens fresh).
public struct BatonClient: Sendable {
    /// The server's base URL.
    public let serverURL: URL
    public let transport: any HTTPTransport
    /// Sent as `Baton-App-Version`, so the server can refuse retired versions.
    public let appVersion: String?

    public init(serverURL: URL, transport: any HTTPTransport = AsyncHTTPClientTransport(), appVersion: String? = nil) {
        self.serverURL = serverURL
        self.transport = transport
        self.appVersion = appVersion
    }

    /// Reads the server's discovery document and OAuth metadata.
    ///
    /// - Throws: ``BatonClientError``: `Unreachable`, `InvalidResponse` when the URL is not a baton-server.
    public func discover() async throws(BatonClientError) -> (ServerConfiguration, AuthorizationServerMetadata) {
        let configuration: ServerConfiguration = try await getJSON(
            url(".well-known/baton-configuration"), token: nil, doing: "read the server's configuration")
        guard let metadataURL = URL(string: configuration.oauthAuthorizationServer) else {
            throw BatonClientError(.invalidResponse, "The server's configuration names no OAuth metadata.")
        }
        let metadata: AuthorizationServerMetadata = try await getJSON(
            metadataURL, token: nil, doing: "read the server's OAuth metadata")
        return (configuration, metadata)
    }

    /// Whether the server answers `/health` within `timeout`.
    public func isReachable(timeout: Duration = .seconds(2)) async -> Bool {
        guard let url = try? url("health") else { return false }
        let response = try? await transport.send(ClientRequest(url: url, timeout: timeout))
        return response?.status == 200
    }

    /// The settings exchange: what the server wants of this device.
    public func settings(_ configuration: ServerConfiguration, token: String) async throws(BatonClientError)
        -> ClientSettings
    {
        try await getJSON(
            try endpoint(configuration.settingsEndpoint), token: token, doing: "read the settings",
            decoder: SettingsDocument.deviceDecoder())
    }

    /// The signed-in user.
    public func me(_ configuration: ServerConfiguration, token: String) async throws(BatonClientError) -> ServerUser {
        try await getJSON(try endpoint(configuration.userEndpoint), token: token, doing: "read the signed-in user")
    }

    /// Registers the user's P-256 signing key (X9.63 bytes) for this device.
    ///
    /// - Parameters:
    ///   - configuration: the server's endpoints (discovery).
    ///   - deviceID: this device's id.
    ///   - publicKey: the user's signing key (X9.63).
    ///   - deviceKey: the device's public key (X9.63), which a device's first registration must send.
    ///   - deviceProof: the device key's raw ECDSA signature over the join message (see the BatonServer article
    ///     "Uploading another user's changes"): a user of the device approves this registration. Without it
    ///     only a user already registered on the device may register again.
    ///   - departures: users who left the device without telling the server (``SignedDeparture``, signed with
    ///     the device key the server holds): their registrations end first, so the first user after them re-keys
    ///     the device. Default: none.
    ///   - token: the user's access token.
    /// - Throws: ``BatonClientError``; `Forbidden` with server code `DeviceProofRequired` when the device must
    ///   approve the registration.
    public func registerDevice(
        _ configuration: ServerConfiguration, deviceID: String, publicKey: Data, deviceKey: Data? = nil,
        deviceProof: Data? = nil, departures: [SignedDeparture] = [], token: String
    ) async throws(BatonClientError) {
        let url = try endpoint(configuration.deviceRegistrationEndpoint, deviceID: deviceID)
        struct Body: Encodable {
            var publicKey: String
            var deviceKey: String?
            var deviceProof: String?
            /// Users who left the device without telling the server: their registrations end first.
            var departures: [SignedDeparture]?
        }
        let body = try? JSONEncoder().encode(
            Body(
                publicKey: publicKey.base64EncodedString(), deviceKey: deviceKey?.base64EncodedString(),
                deviceProof: deviceProof?.base64EncodedString(), departures: departures.isEmpty ? nil : departures))
        let response = try await send(
            ClientRequest(
                method: "PUT", url: url, headers: [("Content-Type", "application/json")], body: Array(body ?? Data())),
            token: token)
        guard response.status == 200 else { throw Self.error(from: response, doing: "register this device") }
    }

    /// Removes the user's registration on this device — or, for an admin's token, `user`'s.
    public func unregisterDevice(
        _ configuration: ServerConfiguration, deviceID: String, user: String? = nil, token: String
    ) async throws(BatonClientError) {
        var url = try endpoint(configuration.deviceRegistrationEndpoint, deviceID: deviceID)
        if let user {
            var components = URLComponents(url: url, resolvingAgainstBaseURL: false)
            components?.queryItems = [URLQueryItem(name: "user", value: user)]
            url = components?.url ?? url
        }
        let response = try await send(ClientRequest(method: "DELETE", url: url), token: token)
        guard response.status == 204 || response.status == 200 else {
            throw Self.error(from: response, doing: "unregister this device")
        }
    }

    /// The device's store key (for the offline store), for a user registered on the device.
    public func storeKey(_ configuration: ServerConfiguration, deviceID: String, token: String)
        async throws(BatonClientError) -> Data
    {
        struct Answer: Decodable {
            var device: String
            var key: String
        }
        let answer: Answer = try await getJSON(
            try endpoint(configuration.deviceStoreKeyEndpoint, deviceID: deviceID), token: token,
            doing: "fetch the device's store key")
        guard answer.device == deviceID, let key = Data(base64Encoded: answer.key), key.count == 32 else {
            throw BatonClientError(.invalidResponse, "The server's store key is not a 256-bit key for this device.")
        }
        return key
    }

    /// Sends a backup of discarded changes (sealed with the device's store key) so an administrator can
    /// recover them. Returns the server's id for the backup.
    ///
    /// - Throws: ``BatonClientError``: `Unreachable` offline; `InvalidResponse` for a server without the
    ///   endpoint; the server's refusal otherwise (not registered on the device, not this device's backup).
    public func sendDiscardedChanges(
        _ configuration: ServerConfiguration, deviceID: String, author: String, count: Int, sealed: Data, token: String
    ) async throws(BatonClientError) -> Int {
        try await sendDiscardedChanges(
            configuration, deviceID: deviceID, author: author, count: count, sealed: sealed, as: .token(token))
    }

    // MARK: Plumbing

    /// Sends a request with the app version, the `traceparent` of the current ``RequestTrace`` and, when given, the
    /// bearer token.
    public func send(_ request: ClientRequest, token: String?) async throws(BatonClientError) -> ClientResponse {
        var request = request
        if let token { request.headers.append(("Authorization", "Bearer \(token)")) }
        if let appVersion { request.headers.append(("Baton-App-Version", appVersion)) }
        if let traceparent = RequestTrace.nextParentHeader() { request.headers.append(("traceparent", traceparent)) }
        let response = try await transport.send(request)
        if response.status == 403, Self.serverError(response)?.code == "AppVersionInactive" {
            throw BatonClientError(
                .appVersionInactive,
                Self.serverError(response)?.message ?? "This app version is no longer allowed; update the app.",
                status: 403, serverCode: "AppVersionInactive")
        }
        return response
    }

    func getJSON<T: Decodable>(
        _ url: URL, token: String?, doing action: String, decoder: JSONDecoder = JSONDecoder()
    ) async throws(BatonClientError) -> T {
        let response = try await send(ClientRequest(url: url, headers: [("Accept", "application/json")]), token: token)
        guard response.status == 200 else { throw Self.error(from: response, doing: action) }
        do {
            return try decoder.decode(T.self, from: Data(response.body))
        } catch {
            throw BatonClientError(.invalidResponse, "Cannot \(action): the server's answer is not what Baton expects.")
        }
    }

    func url(_ path: String) throws(BatonClientError) -> URL {
        try Self.checkTransport(serverURL)
        return serverURL.appendingPathComponent(path)
    }

    /// Refuses a URL that would send passwords and tokens in the clear: `https://` anywhere, `http://` only to
    /// this machine (127.0.0.0/8, `::1`, `localhost`).
    ///
    /// - Throws: ``BatonClientError`` `InvalidServerURL`.
    public static func checkTransport(_ url: URL) throws(BatonClientError) {
        guard let scheme = url.scheme?.lowercased(), let host = url.host?.lowercased(), !host.isEmpty else {
            throw BatonClientError(.invalidServerURL, "The server URL must be https://host[:port].")
        }
        if scheme == "https" { return }
        let loopback = host == "localhost" || host == "::1" || host == "[::1]" || Self.isIPv4Loopback(host)
        guard scheme == "http", loopback else {
            throw BatonClientError(
                .invalidServerURL,
                "Use https:// for \(host): passwords and tokens are never sent unencrypted (http:// only to this machine)."
            )
        }
    }

    /// Whether `host` is an IPv4 address in 127.0.0.0/8, as `inet_pton` reads one (four decimal numbers,
    /// `127.0.0.1`): a name that only starts with `127.` (`127.example.org`) is anybody's host.
    static func isIPv4Loopback(_ host: String) -> Bool {
        var address = [UInt8](repeating: 0, count: 4)
        return inet_pton(AF_INET, host, &address) == 1 && address[0] == 127
    }

    func endpoint(_ template: String, deviceID: String? = nil) throws(BatonClientError) -> URL {
        var text = template
        if let deviceID {
            let encoded = deviceID.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? deviceID
            text = text.replacingOccurrences(of: "{deviceID}", with: encoded)
        }
        guard let url = URL(string: text) else {
            throw BatonClientError(.invalidResponse, "The server's configuration has an endpoint that is not a URL.")
        }
        try Self.checkTransport(url)
        return url
    }

    static func serverError(_ response: ClientResponse) -> (code: String, message: String)? {
        struct OData: Decodable {
            struct Inner: Decodable {
                var code: String
                var message: String
            }
            var error: Inner
        }
        struct OAuth: Decodable {
            var error: String
            var errorDescription: String?
            enum CodingKeys: String, CodingKey {
                case error, errorDescription = "error_description"
            }
        }
        let data = Data(response.body)
        if let odata = try? JSONDecoder().decode(OData.self, from: data) {
            return (odata.error.code, odata.error.message)
        }
        if let oauth = try? JSONDecoder().decode(OAuth.self, from: data) {
            return (oauth.error, oauth.errorDescription ?? oauth.error)
        }
        return nil
    }

    /// The error for an unexpected status, with the server's own message when it sent one.
    static func error(from response: ClientResponse, doing action: String) -> BatonClientError {
        let server = serverError(response)
        let detail = server.map { ": \($0.message)" } ?? " (HTTP \(response.status))."
        let code: BatonClientError.Code
        switch response.status {
        case 401: code = .unauthorized
        case 403: code = server?.code == "AppVersionInactive" ? .appVersionInactive : .forbidden
        default: code = .server
        }
        return BatonClientError(
            code, "Cannot \(action)\(detail)", status: response.status, serverCode: server?.code)
    }
}
