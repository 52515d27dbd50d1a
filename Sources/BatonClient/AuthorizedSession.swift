import Crypto
import Foundation

/// One user's authorised connection to the server: sends requests with a fresh access token, refreshing it
/// shortly before it expires (and once more when the server answers 401), and hands every new token pair to
/// `onTokensChanged` so the app can keep it in the user's secure store.
public actor AuthorizedSession {
    public nonisolated let client: BatonClient
    public nonisolated let configuration: ServerConfiguration
    public nonisolated let oauth: OAuthClient
    public private(set) var tokens: OAuthTokens
    let onTokensChanged: @Sendable (OAuthTokens) async -> Void
    /// A refresh in flight, so concurrent requests share one (refresh tokens are single-use).
    var refreshing: Task<OAuthTokens, any Error>?
    /// Set by ``invalidate()``: the session this connection belonged to is over.
    public private(set) var isInvalidated = false

    public init(
        client: BatonClient, configuration: ServerConfiguration, oauth: OAuthClient, tokens: OAuthTokens,
        onTokensChanged: @escaping @Sendable (OAuthTokens) async -> Void = { _ in }
    ) {
        self.client = client
        self.configuration = configuration
        self.oauth = oauth
        self.tokens = tokens
        self.onTokensChanged = onTokensChanged
    }

    /// Ends this connection for good: every later call throws `SessionInvalidated`, and the tokens are dropped
    /// from memory. A locked, closed or removed session invalidates its connection, so a copy kept anywhere sends
    /// nothing in the user's name.
    public func invalidate() {
        isInvalidated = true
        refreshing?.cancel()
        tokens = OAuthTokens(accessToken: "", refreshToken: nil, expiresAt: .distantPast)
    }

    func requireValid() throws(BatonClientError) {
        guard !isInvalidated else {
            throw BatonClientError(
                .sessionInvalidated, "This session was locked, closed or removed; open the user's session again.")
        }
    }

    /// A valid access token, refreshed first when it is about to expire.
    public func accessToken() async throws(BatonClientError) -> String {
        try requireValid()
        if tokens.needsRefresh(at: oauth.now()) { try await refresh() }
        return tokens.accessToken
    }

    /// Sends `request` with the user's token; on 401 refreshes once and retries.
    public func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
        try requireValid()
        let response = try await client.send(request, token: try await accessToken())
        guard response.status == 401 else { return response }
        try await refresh()
        return try await client.send(request, token: tokens.accessToken)
    }

    /// Sends a backup of discarded changes of this device with the user's token (see
    /// ``BatonClient/sendDiscardedChanges(_:deviceID:author:count:sealed:token:)``).
    ///
    /// - Throws: ``BatonClientError`` as that method does.
    @discardableResult
    public func sendDiscardedChanges(deviceID: String, author: String, count: Int, sealed: Data)
        async throws(BatonClientError) -> Int
    {
        try await client.sendDiscardedChanges(
            configuration, deviceID: deviceID, author: author, count: count, sealed: sealed,
            token: try await accessToken())
    }

    /// Sends usage events with this user's token, signed with the device key
    /// (``BatonClient/sendUsage(_:deviceID:events:token:deviceKey:)``).
    @discardableResult
    public func sendUsage(deviceID: String, events: [UsageEvent], deviceKey: P256.Signing.PrivateKey)
        async throws(BatonClientError) -> Int
    {
        try await client.sendUsage(
            configuration, deviceID: deviceID, events: events, token: try await accessToken(), deviceKey: deviceKey)
    }

    /// Sends the device's log with this user's token, signed with the device key
    /// (``BatonClient/sendLogs(_:deviceID:reason:lines:token:deviceKey:)``).
    public func sendLogs(deviceID: String, reason: String, lines: [String], deviceKey: P256.Signing.PrivateKey)
        async throws(BatonClientError)
    {
        try await client.sendLogs(
            configuration, deviceID: deviceID, reason: reason, lines: lines, token: try await accessToken(),
            deviceKey: deviceKey)
    }

    /// Refreshes the tokens now.
    public func refresh() async throws(BatonClientError) {
        try requireValid()
        if let refreshing {
            do {
                let fresh = try await refreshing.value
                try requireValid()
                tokens = fresh
            } catch {
                throw (error as? BatonClientError)
                    ?? BatonClientError(.unauthorized, "The session could not be renewed.")
            }
            return
        }
        let current = tokens
        let oauth = oauth
        let task = Task<OAuthTokens, any Error> { try await oauth.refresh(current) }
        refreshing = task
        defer { refreshing = nil }
        do {
            let fresh = try await task.value
            try requireValid()
            tokens = fresh
            await onTokensChanged(fresh)
        } catch {
            throw (error as? BatonClientError) ?? BatonClientError(.unauthorized, "The session could not be renewed.")
        }
    }

    /// Revokes the session on the server (sign out).
    public func revoke() async throws(BatonClientError) {
        try requireValid()
        try await oauth.revoke(tokens)
    }
}
