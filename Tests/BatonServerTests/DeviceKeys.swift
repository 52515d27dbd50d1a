import BatonOData
import BatonServer
import Crypto
import Foundation

/// The device keys of the tests' devices — one per device name, the same in every test — so a registration can
/// carry its device's approval as the device app sends it.
enum DeviceKeys {
    static func key(for device: String) -> P256.Signing.PrivateKey {
        // A SHA-256 digest is a valid P-256 scalar for every name used here.
        (try? P256.Signing.PrivateKey(rawRepresentation: Data(SHA256.hash(data: Data(device.utf8)))))
            ?? P256.Signing.PrivateKey()
    }

    /// The user an access token names (its `sub`).
    static func user(ofToken token: String) -> String {
        let parts = token.split(separator: ".")
        guard parts.count == 3, let data = Data(base64URLEncoded: String(parts[1])),
            let claims = try? JSONSerialization.jsonObject(with: data) as? [String: Any]
        else { return "" }
        return claims["sub"] as? String ?? ""
    }

    /// The registration body for `publicKey` (base64 X9.63), approved by `approver` (default: the device's key).
    static func body(device: String, token: String, publicKey: String, approver: P256.Signing.PrivateKey? = nil)
        -> String
    {
        guard let bytes = Data(base64Encoded: publicKey),
            let key = try? P256.Signing.PublicKey(x963Representation: bytes)
        else { return #"{"publicKey":"\#(publicKey)"}"# }
        let approver = approver ?? Self.key(for: device)
        let keyID = Data(SHA256.hash(data: key.x963Representation)).base64URLEncoded
        let message = DeviceRegistry.joinMessage(device: device, user: user(ofToken: token), keyID: keyID)
        let proof = (try? approver.signature(for: message).rawRepresentation.base64EncodedString()) ?? ""
        let deviceKey = approver.publicKey.x963Representation.base64EncodedString()
        return #"{"publicKey":"\#(publicKey)","deviceKey":"\#(deviceKey)","deviceProof":"\#(proof)"}"#
    }
}
