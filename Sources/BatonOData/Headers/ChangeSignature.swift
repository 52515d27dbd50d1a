/// The canonical form an author signs (ECDSA P-256 over its bytes) for a change that another user may upload
/// on their behalf — shared by the device that signs and the server that verifies. See the BatonServer
/// article "Uploading another user's changes".
public enum ChangeSignature {
    /// `baton-change-v1` and the fields, one per line.
    ///
    /// - Parameters:
    ///   - requestID: the `Repeatability-Request-ID` of the change.
    ///   - method: the HTTP method.
    ///   - url: the URL relative to the service root, as sent.
    ///   - bodySHA256: the lower-case hex SHA-256 of the body bytes (of the empty body when there is none).
    ///   - createdAt: `Baton-Created-At`, as sent.
    ///   - device: `Baton-Device`.
    ///   - author: `Baton-Author`.
    /// - Returns: the UTF-8 bytes to sign or verify.
    public static func canonicalMessage(
        requestID: String, method: String, url: String, bodySHA256: String, createdAt: String, device: String,
        author: String
    ) -> [UInt8] {
        Array(
            ["baton-change-v1", requestID, method, url, bodySHA256, createdAt, device, author].joined(separator: "\n")
                .utf8)
    }
}
