import Foundation

/// The canonical form an author signs (ECDSA P-256 over its bytes) for every change the device queues, and the
/// server verifies before it applies one — shared by the device that signs and the server that verifies. See
/// the BatonServer article "Uploading another user's changes".
public enum ChangeSignature {
    /// `baton-change-v2` and the fields, one per line.
    ///
    /// - Parameters:
    ///   - requestID: the `Repeatability-Request-ID` of the change.
    ///   - method: the HTTP method.
    ///   - url: the URL relative to the service root, as sent.
    ///   - bodySHA256: the lower-case hex SHA-256 of the body bytes (of the empty body when there is none).
    ///   - createdAt: `Baton-Created-At`, as sent.
    ///   - device: `Baton-Device`.
    ///   - author: `Baton-Author`.
    ///   - ifMatch: `Baton-If-Match`: the `If-Match` the change was recorded against (an ETag or `*`; empty for a
    ///     create). The server refuses the change if it is sent with any other `If-Match`, except an ETag that a
    ///     change recorded on the same device produced (the device moves queued changes onto the versions its
    ///     earlier changes created).
    ///   - slug: for a media entity's bytes (a photo), the `Slug` they are sent with — the entity's properties —
    ///     as a tenth line; `bodySHA256` is then the SHA-256 of the bytes.
    /// - Returns: the UTF-8 bytes to sign or verify.
    public static func canonicalMessage(
        requestID: String, method: String, url: String, bodySHA256: String, createdAt: String, device: String,
        author: String, ifMatch: String, slug: String? = nil
    ) -> [UInt8] {
        var lines = ["baton-change-v2", requestID, method, url, bodySHA256, createdAt, device, author, ifMatch]
        if let slug { lines.append(slug) }
        return Array(lines.joined(separator: "\n").utf8)
    }
}

/// What a device key signs to approve a user joining the device — shared by the device that approves and the
/// server that checks the approval before it registers the user and hands out the device's store key.
public enum DeviceJoin {
    /// `baton-device-join-v1`, the device id, the user name and the id of the user's new signing key (the
    /// base64url SHA-256 of its X9.63 form), one per line.
    ///
    /// - Returns: the UTF-8 bytes to sign or verify.
    public static func message(device: String, user: String, keyID: String) -> [UInt8] {
        Array(["baton-device-join-v1", device, user, keyID].joined(separator: "\n").utf8)
    }
}

/// What a device key signs to declare that a user left the device without telling the server (their secure store
/// wiped by the passcode retry limit, or removed while offline) — shared by the device and the server, which ends
/// that user's registration when the declaration names their current signing key. The device signs it when the
/// user joins (the key is at hand then, and is gone with the user's store), and keeps it until it is delivered.
public enum DeviceDeparture {
    /// `baton-device-departure-v1`, the device id, the user name and the id of the user's signing key on the
    /// device (the base64url SHA-256 of its X9.63 form), one per line.
    ///
    /// - Returns: the UTF-8 bytes to sign or verify.
    public static func message(device: String, user: String, keyID: String) -> [UInt8] {
        Array(["baton-device-departure-v1", device, user, keyID].joined(separator: "\n").utf8)
    }
}

/// What a device key signs to speak for the device itself, without any user's token: asking what an admin
/// ordered for it, handing back the backups of changes it is about to wipe, and reporting a wipe done. A tablet
/// an admin took out of service has no working token any more, but the users who unlock it still hold the
/// device key. Sent as `Baton-Device-Proof: t=<unix milliseconds>, sig=<base64url raw ECDSA P-256 signature>`.
/// The server takes each proof of a device only once: it keeps every proof it accepted, by its time, until the
/// window has passed it, so a captured header cannot be replayed, proofs may arrive in any order, and one from a
/// little ahead of the clock holds back nothing.
public enum DeviceRequestProof {
    /// How far behind the server's clock the proof's time may be, in seconds. Default: 300.
    public static let maximumAge: Double = 300
    /// How far ahead of the server's clock the proof's time may be, in seconds. Default: 30.
    public static let maximumLead: Double = 30

    /// `baton-device-request-v1`, the method, the route's path (`/devices/{id}/{action}`, whatever prefix a
    /// proxy adds or strips), the device id, the time in milliseconds and the lower-case hex SHA-256 of the
    /// body, one per line.
    public static func message(method: String, path: String, device: String, time: Int64, bodySHA256: String)
        -> [UInt8]
    {
        Array(["baton-device-request-v1", method, path, device, String(time), bodySHA256].joined(separator: "\n").utf8)
    }

    /// The header value for `time` and a raw signature.
    public static func header(time: Int64, signature: [UInt8]) -> String {
        "t=\(time), sig=\(Data(signature).base64URLEncoded)"
    }

    /// The time and signature of a header value, or `nil` when it is not of that form.
    public static func parse(_ header: String) -> (time: Int64, signature: [UInt8])? {
        var time: Int64?
        var signature: [UInt8]?
        for part in header.split(separator: ",") {
            let pair = part.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            guard pair.count == 2 else { return nil }
            switch pair[0] {
            case "t": time = Int64(pair[1])
            case "sig": signature = Data(base64URLEncoded: String(pair[1])).map(Array.init)
            default: return nil
            }
        }
        guard let time, let signature, signature.count == 64 else { return nil }
        return (time, signature)
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
