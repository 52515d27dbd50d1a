import BatonOData
import Crypto
import Foundation

extension DataService {
    /// What the server knows about the authors named in a request, fetched before the data transaction.
    struct OnBehalfPolicy: Sendable {
        /// Whether the settings allow uploading another user's changes.
        var allowed = false
        /// For each author named in the request: whether they are active, and their key history per device.
        var authors: [String: Author] = [:]

        struct Author: Sendable {
            var active: Bool
            var keys: [String: [DeviceRegistry.SigningKey]]
        }
    }

    /// The canonical form an author signs for a change uploaded on their behalf; see the OnBehalfUploads
    /// article.
    static func canonicalChange(
        requestID: String, method: String, url: String, body: [UInt8], createdAt: String, device: String, author: String
    ) -> Data {
        let bodyHash = SHA256.hash(data: Data(body)).lowercaseHex
        return Data(
            ChangeSignature.canonicalMessage(
                requestID: requestID, method: method, url: url, bodySHA256: bodyHash, createdAt: createdAt,
                device: device, author: author))
    }

    /// Who a change counts as. Without `Baton-Author` (or naming the signed-in user) it is the user's own.
    /// Naming another author is accepted only if the settings allow it, the author is active, and
    /// `Baton-Author-Signature` verifies with a key registered for that author on `Baton-Device` at
    /// `Baton-Created-At`. Otherwise 403, naming the reason; nothing is applied.
    func attribution(for request: DataRequest, context: Context) throws -> Attribution {
        guard let author = request.header("Baton-Author"), author != context.user else {
            return Attribution(author: context.user, uploader: context.user)
        }
        func refuse(_ code: String, _ message: String) -> ServerError {
            ServerError(.forbidden, code, message, target: "Baton-Author")
        }
        guard context.onBehalf.allowed else {
            throw refuse(
                "OnBehalfNotAllowed",
                "This server does not accept changes uploaded on behalf of another user (setting shared-devices.upload-pending-changes-of-previous-user is false); '\(author.prefix(64))' must upload them."
            )
        }
        guard let signatureText = request.header("Baton-Author-Signature"), let device = request.header("Baton-Device"),
            let createdText = request.header("Baton-Created-At"),
            let requestID = request.header("Repeatability-Request-ID")
        else {
            throw refuse(
                "OnBehalfIncomplete",
                "A change uploaded on behalf of '\(author.prefix(64))' needs Baton-Author-Signature, Baton-Device, Baton-Created-At and Repeatability-Request-ID."
            )
        }
        guard let created = ODataDateTimeOffset(parsing: createdText) else {
            throw ServerError.badRequest(
                "Baton-Created-At must be a date-time like 2026-11-21T08:30:00Z.", target: "Baton-Created-At")
        }
        guard let record = context.onBehalf.authors[author], record.active else {
            throw refuse(
                "AuthorInactive",
                "'\(author.prefix(64))' is disabled or unknown; changes signed by them are not accepted.")
        }
        guard let signatureData = Data(base64URLEncoded: signatureText),
            let signature = (try? P256.Signing.ECDSASignature(rawRepresentation: signatureData))
                ?? (try? P256.Signing.ECDSASignature(derRepresentation: signatureData))
        else {
            throw refuse("SignatureMalformed", "Baton-Author-Signature is not a base64 ECDSA P-256 signature.")
        }
        let message = Self.canonicalChange(
            requestID: requestID, method: request.method, url: request.url, body: request.body, createdAt: createdText,
            device: device,
            author: author)
        let createdDate = Date(
            timeIntervalSince1970: Double(created.utcSecondsSinceEpoch) + Double(created.time.picoseconds) / 1e12)
        let keys = (record.keys[device] ?? []).filter { key in
            key.registeredAt <= createdDate && (key.replacedAt.map { createdDate < $0 } ?? true)
        }
        guard keys.contains(where: { $0.publicKey.isValidSignature(signature, for: message) }) else {
            throw refuse(
                "SignatureInvalid",
                "The signature does not verify with any key registered for '\(author.prefix(64))' on device '\(device.prefix(128))' at \(createdText.prefix(40))."
            )
        }
        return Attribution(author: author, uploader: context.user)
    }
}
