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

extension Sequence<UInt8> {
    /// The bytes as lower-case hex (a SHA-256 digest as the canonical form wants it), without Foundation's
    /// slow `String(format:)`.
    public var lowercaseHex: String {
        let digits = Array("0123456789abcdef".utf8)
        var bytes: [UInt8] = []
        bytes.reserveCapacity(underestimatedCount * 2)
        for byte in self {
            bytes.append(digits[Int(byte >> 4)])
            bytes.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
