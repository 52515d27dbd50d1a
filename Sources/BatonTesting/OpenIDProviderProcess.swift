import Foundation

/// A real OpenID Provider for tests: `oidc-provider-mock` from PyPI (in the test venv that `scripts/test` makes),
/// started on a free loopback port by `Tests/BatonServerTests/Interop/oidc_provider.py`, with client registration
/// and `nonce` required. It registers Baton as a client (`client_secret_basic`) for the given redirect URIs; the
/// client secret is in ``secretFile`` (never on a command line). People sign in on its own page by their `sub`.
public final class OpenIDProviderProcess: Sendable {
    /// The provider's issuer, `http://localhost:PORT`: another site than Baton's `127.0.0.1` to a browser.
    public let issuer: String
    /// Baton's client id there.
    public let clientID: String
    /// The file holding Baton's client secret.
    public let secretFile: URL
    let process: Process
    let input: FileHandle

    /// Starts the provider with `people` (claim sets, each with a `sub`) and Baton's `redirectURIs`.
    public init(people: [[String: any Sendable]], redirectURIs: [String]) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-idp-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        secretFile = directory.appendingPathComponent("client-secret")
        let process = Process()
        process.executableURL = TestPython.executable
        process.arguments = [
            TestPython.packageRoot.appendingPathComponent("Tests/BatonServerTests/Interop/oidc_provider.py").path
        ]
        process.environment = ProcessInfo.processInfo.environment.merging([
            "BATON_IDP_USERS": String(decoding: try JSONSerialization.data(withJSONObject: people), as: UTF8.self),
            "BATON_IDP_REDIRECTS": String(
                decoding: try JSONSerialization.data(withJSONObject: redirectURIs), as: UTF8.self),
            "BATON_IDP_SECRET_FILE": secretFile.path,
        ]) { _, new in new }
        let output = Pipe()
        let stdin = Pipe()
        process.standardOutput = output
        process.standardInput = stdin
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try process.runAlone()
        self.process = process
        input = stdin.fileHandleForWriting
        let reader = output.fileHandleForReading
        let line = try await offThePool { () -> Data in
            var data = Data()
            while !data.contains(0x0A) {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                data += chunk
            }
            return data
        }
        guard let object = (try? JSONSerialization.jsonObject(with: line)) as? [String: Any],
            let issuer = object["issuer"] as? String, let clientID = object["client_id"] as? String
        else {
            process.terminate()
            throw ProviderStartError(
                description:
                    "The OpenID Provider did not start (is oidc-provider-mock in the test venv? run scripts/test): \(String(decoding: line, as: UTF8.self))"
            )
        }
        self.issuer = issuer
        self.clientID = clientID
    }

    /// Stops the provider.
    public func stop() {
        try? input.close()
        if process.isRunning { process.terminate() }
        try? FileManager.default.removeItem(at: secretFile.deletingLastPathComponent())
    }

    /// The client secret (tests hand it to `IdentityProviders.add`, as `idp add` reads it from the file).
    public var clientSecret: String {
        get throws { try String(contentsOf: secretFile, encoding: .utf8) }
    }

    struct ProviderStartError: Error, CustomStringConvertible {
        var description: String
    }
}
