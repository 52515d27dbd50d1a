import BatonClient
import BatonOData
import BatonOffline
import Crypto
import Foundation

// Test helper for the sync's crash safety: reads from standard input (never from the command line) a JSON
// object with the server URL, the store file, the device id, the user, the store key, the signing key and
// the tokens; then prints "ready" and uploads the store's queue a few changes per $batch until it is empty,
// printing each round. The test kills it at random moments.
struct Input: Decodable {
    var server: String
    var storePath: String
    var deviceID: String
    var user: String
    var storeKey: String
    var signingKey: String
    var accessToken: String
    var refreshToken: String?
    var expiresAt: Double
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("baton-sync-helper: \(message)\n".utf8))
    exit(1)
}

let data = FileHandle.standardInput.readDataToEndOfFile()
guard let input = try? JSONDecoder().decode(Input.self, from: data), let serverURL = URL(string: input.server),
    let storeKey = Data(base64Encoded: input.storeKey), let signingData = Data(base64Encoded: input.signingKey),
    let signingKey = try? P256.Signing.PrivateKey(rawRepresentation: signingData)
else { fail("usage: baton-sync-helper < input.json") }
do {
    let client = BatonClient(serverURL: serverURL)
    let (configuration, metadata) = try await client.discover()
    let session = AuthorizedSession(
        client: client, configuration: configuration,
        oauth: OAuthClient(metadata: metadata, clientID: configuration.clientID, transport: client.transport),
        tokens: OAuthTokens(
            accessToken: input.accessToken, refreshToken: input.refreshToken,
            expiresAt: Date(timeIntervalSince1970: input.expiresAt)))
    let store = try OfflineStore(
        url: URL(fileURLWithPath: input.storePath), model: try ServiceModel.aircraftChecks, deviceID: input.deviceID,
        definingQueries: [])
    try await store.open(as: OfflineUser(name: input.user, signingKey: signingKey), key: SymmetricKey(data: storeKey))
    FileHandle.standardOutput.write(Data("ready\n".utf8))
    while try await !store.pendingEntries().isEmpty {
        let report = try await store.upload(using: session, allowOnBehalf: true, chunkSize: 2)
        FileHandle.standardOutput.write(Data("uploaded \(report.uploaded.count)\n".utf8))
    }
    FileHandle.standardOutput.write(Data("done\n".utf8))
} catch {
    fail("\(error)")
}
