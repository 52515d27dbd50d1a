import BatonClient
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

/// The client against a real baton-server on loopback.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct BatonClientTests {
    static let password = "correct-horse-battery-1"

    func withServer(
        settings: [String: String] = [:], _ body: (LiveServer, BatonClient) async throws -> Void
    ) async throws {
        let server = try await LiveServer.start(settings: settings)
        try await server.addUser("alice", displayName: "Alice Adler", password: Self.password)
        do {
            try await body(server, BatonClient(serverURL: server.url, appVersion: "1.0"))
        } catch {
            await server.shutDown()
            throw error
        }
        await server.shutDown()
    }

    func signIn(_ client: BatonClient, now: @escaping @Sendable () -> Date = { Date() }) async throws -> (
        ServerConfiguration, OAuthClient, OAuthTokens
    ) {
        let (configuration, metadata) = try await client.discover()
        let oauth = OAuthClient(
            metadata: metadata, clientID: configuration.clientID, transport: client.transport, now: now)
        return (configuration, oauth, try await oauth.signIn(username: "alice", password: Self.password))
    }

    @Test func discoversSignsInAndReadsSettingsAndUser() async throws {
        try await withServer(settings: ["passcode.min-length": "10"]) { server, client in
            #expect(await client.isReachable(timeout: .seconds(15)))
            let (configuration, _, tokens) = try await signIn(client)
            #expect(configuration.issuer == server.url.absoluteString)
            #expect(tokens.refreshToken != nil)
            #expect(tokens.expiresAt > Date())
            let settings = try await client.settings(configuration, token: tokens.accessToken)
            #expect(settings.passcode.minLength == 10)
            let me = try await client.me(configuration, token: tokens.accessToken)
            #expect(me == ServerUser(name: "alice", displayName: "Alice Adler", role: "ground-staff"))
        }
    }

    @Test(arguments: [
        ("https://baton.example.org", true), ("http://127.0.0.1:8080", true), ("http://localhost:8080", true),
        ("http://[::1]:8080", true), ("http://baton.example.org", false), ("http://10.1.2.3:8080", false),
        ("ftp://baton.example.org", false), ("http://127.1.2.3:8080", true),
        // Names that only start like a loopback address are anybody's host.
        ("http://127.evil.example", false), ("http://127.0.0.1.evil.example:8080", false),
        ("http://127.0.0.256", false), ("http://127.0.0", false),
    ])
    func passwordsAndTokensGoUnencryptedOnlyToThisMachine(url: String, allowed: Bool) throws {
        let parsed = try #require(URL(string: url))
        if allowed {
            try BatonClient.checkTransport(parsed)
        } else {
            let error = #expect(throws: BatonClientError.self) { try BatonClient.checkTransport(parsed) }
            #expect(error?.code == .invalidServerURL)
        }
    }

    @Test func wrongPasswordIsInvalidCredentials() async throws {
        try await withServer { _, client in
            let (configuration, metadata) = try await client.discover()
            let oauth = OAuthClient(metadata: metadata, clientID: configuration.clientID, transport: client.transport)
            let error = await #expect(throws: BatonClientError.self) {
                try await oauth.signIn(username: "alice", password: "wrong-password-123")
            }
            #expect(error?.code == .invalidCredentials)
            #expect(error?.message.contains("wrong-password") == false)
        }
    }

    @Test func registersTheDeviceAndFetchesItsStoreKey() async throws {
        try await withServer { server, client in
            let (configuration, _, tokens) = try await signIn(client)
            // Not registered yet: the store key is refused.
            let refused = await #expect(throws: BatonClientError.self) {
                try await client.storeKey(configuration, deviceID: "tablet-7", token: tokens.accessToken)
            }
            #expect(refused?.code == .forbidden)
            let key = P256.Signing.PrivateKey()
            // Without the device's proof a new device is not registered.
            let unproven = await #expect(throws: BatonClientError.self) {
                try await client.registerDevice(
                    configuration, deviceID: "tablet-7", publicKey: key.publicKey.x963Representation,
                    token: tokens.accessToken)
            }
            #expect(unproven?.serverCode == "DeviceProofRequired")
            let deviceKey = P256.Signing.PrivateKey()
            let keyID = Data(SHA256.hash(data: key.publicKey.x963Representation)).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
            let join = Data(["baton-device-join-v1", "tablet-7", "alice", keyID].joined(separator: "\n").utf8)
            try await client.registerDevice(
                configuration, deviceID: "tablet-7", publicKey: key.publicKey.x963Representation,
                deviceKey: deviceKey.publicKey.x963Representation,
                deviceProof: try deviceKey.signature(for: join).rawRepresentation, token: tokens.accessToken)
            let storeKey = try await client.storeKey(configuration, deviceID: "tablet-7", token: tokens.accessToken)
            #expect(storeKey.count == 32)
            #expect(
                try await client.storeKey(configuration, deviceID: "tablet-7", token: tokens.accessToken) == storeKey)
            let keys = try await server.server.devices.signingKeys(device: "tablet-7", user: "alice")
            #expect(keys.count == 1)
            try await client.unregisterDevice(configuration, deviceID: "tablet-7", token: tokens.accessToken)
            await #expect(throws: BatonClientError.self) {
                try await client.storeKey(configuration, deviceID: "tablet-7", token: tokens.accessToken)
            }
        }
    }

    @Test func refreshesBeforeExpiryAndSavesTheNewTokens() async throws {
        try await withServer { _, client in
            let clock = TestClock(Date())
            let (configuration, oauth, tokens) = try await signIn(client, now: clock.closure)
            let saved = SavedTokens()
            let session = AuthorizedSession(
                client: client, configuration: configuration, oauth: oauth, tokens: tokens,
                onTokensChanged: { await saved.record($0) })
            #expect(try await session.accessToken() == tokens.accessToken)
            #expect(await saved.all.isEmpty)
            // 30 seconds before expiry the token is refreshed first.
            clock.advance(by: tokens.expiresAt.timeIntervalSince(clock.now) - 30)
            let fresh = try await session.accessToken()
            #expect(fresh != tokens.accessToken)
            #expect(await saved.all.count == 1)
            #expect(await saved.all.first?.refreshToken != tokens.refreshToken)
            let me = try await session.send(
                ClientRequest(url: try #require(URL(string: configuration.userEndpoint))))
            #expect(me.status == 200)
            // The spent refresh token cannot be used again (rotation).
            await #expect(throws: BatonClientError.self) { try await oauth.refresh(tokens) }
        }
    }

    @Test func revokedSessionsAreUnauthorized() async throws {
        try await withServer { _, client in
            let (configuration, oauth, tokens) = try await signIn(client)
            try await oauth.revoke(tokens)
            let error = await #expect(throws: BatonClientError.self) {
                try await client.me(configuration, token: tokens.accessToken)
            }
            #expect(error?.code == .unauthorized)
            let refresh = await #expect(throws: BatonClientError.self) { try await oauth.refresh(tokens) }
            #expect(refresh?.code == .unauthorized)
        }
    }

    @Test func inactiveAppVersionIsItsOwnError() async throws {
        try await withServer(settings: ["app-versions.inactive": "0.9"]) { server, client in
            let (configuration, _, tokens) = try await signIn(client)
            #expect(try await client.me(configuration, token: tokens.accessToken).name == "alice")
            let old = BatonClient(serverURL: server.url, appVersion: "0.9")
            let error = await #expect(throws: BatonClientError.self) {
                try await old.me(configuration, token: tokens.accessToken)
            }
            #expect(error?.code == .appVersionInactive)
        }
    }

    @Test func aStoppedServerIsUnreachableQuickly() async throws {
        let server = try await LiveServer.start()
        let client = BatonClient(serverURL: server.url)
        await server.shutDown()
        #expect(await client.isReachable(timeout: .seconds(2)) == false)
        let error = await #expect(throws: BatonClientError.self) { try await client.discover() }
        #expect(error?.code == .unreachable)
    }

    @Test func aServerURLThatIsNotHTTPIsRefused() async throws {
        let client = BatonClient(serverURL: try #require(URL(string: "ftp://example.org")))
        let error = await #expect(throws: BatonClientError.self) { try await client.discover() }
        #expect(error?.code == .invalidServerURL)
    }
}

actor SavedTokens {
    var all: [OAuthTokens] = []
    func record(_ tokens: OAuthTokens) { all.append(tokens) }
}
