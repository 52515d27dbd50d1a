import BatonOData
import Crypto
import Foundation

extension DataService {
    /// What the server knows about the authors named in a request, fetched before the data transaction.
    struct OnBehalfPolicy: Sendable {
        /// Whether the settings allow uploading another user's changes.
        var allowed = false
        /// For each author named in the request: their account and their key history per device.
        var authors: [String: Author] = [:]
        /// The devices the signed-in user is registered on now, among those the request names.
        var uploaderDevices: Set<String> = []

        struct Author: Sendable {
            var active: Bool
            /// Their role now; `nil` for an unknown user.
            var role: User.Role?
            /// When this account was created: keys registered before it belonged to an earlier user of the name.
            var createdAt: Date
            var keys: [String: [DeviceRegistry.SigningKey]]
        }
    }

    /// How far in the future a signed `Baton-Created-At` may lie (clock skew between tablet and server).
    static let signedTimeSkew: TimeInterval = 300

    /// The canonical form an author signs for a queued change; see the OnBehalfUploads article.
    static func canonicalChange(_ request: DataRequest, requestID: String, signed: SignedFields) -> Data {
        // A media entity's bytes are signed by their SHA-256 as sent (the body here holds the properties of its
        // `Slug`, which the signature covers as its own line).
        let bodyHash = request.media?.receivedSHA256 ?? SHA256.hash(data: Data(request.body)).lowercaseHex
        return Data(
            ChangeSignature.canonicalMessage(
                requestID: requestID, method: request.method, url: request.url, bodySHA256: bodyHash,
                createdAt: signed.createdAt, device: signed.device, author: signed.author, ifMatch: signed.ifMatch,
                slug: request.media.map { $0.slug ?? "" }))
    }

    /// The fields of a signed change as its headers carry them.
    struct SignedFields: Sendable {
        var author: String
        var device: String
        var createdAt: String
        /// `Baton-If-Match`: the `If-Match` the author signed ("" for a create).
        var ifMatch: String
    }

    /// Who a change counts as, checked before anything else about it (before its repeatability record is looked
    /// up, so nobody reads or pre-empts another author's results).
    ///
    /// A request naming no other `Baton-Author` is the signed-in user's own: their token is the proof. With
    /// `Baton-Device` naming a device they are registered on (the device app sends it with every queued change),
    /// it counts as made on that device, so changes queued behind it there may build on the version it makes.
    ///
    /// A change of another author is accepted only if it is signed, and the signature verifies with a key
    /// registered for its author on `Baton-Device`, current at `Baton-Created-At`, which is no later than now
    /// (plus clock skew) and not before the author's account existed; the author is active; the settings allow
    /// on-behalf uploads; and the uploader is registered on that device. Otherwise 403 naming the reason;
    /// nothing is applied.
    func attribution(for request: DataRequest, context: Context) throws -> Attribution {
        let author = request.header("Baton-Author") ?? context.user
        guard author != context.user else {
            var own = Attribution(author: context.user, uploader: context.user, authorRole: context.role)
            if let device = request.header("Baton-Device"), context.onBehalf.uploaderDevices.contains(device) {
                own.device = device
            }
            return own
        }
        func refuse(_ code: String, _ message: String) -> ServerError {
            ServerError(.forbidden, code, message, target: "Baton-Author")
        }
        guard let signatureText = request.header("Baton-Author-Signature"), let device = request.header("Baton-Device"),
            let createdText = request.header("Baton-Created-At"),
            let requestID = request.header("Repeatability-Request-ID"),
            request.header("Repeatability-First-Sent") != nil
        else {
            throw refuse(
                "OnBehalfIncomplete",
                "A change uploaded on behalf of '\(author.prefix(scalars: 64))' needs Baton-Author-Signature, Baton-Device, Baton-Created-At and Repeatability-Request-ID."
            )
        }
        guard context.onBehalf.allowed else {
            throw refuse(
                "OnBehalfNotAllowed",
                "This server does not accept changes uploaded on behalf of another user (setting shared-devices.upload-pending-changes-of-previous-user is false); '\(author.prefix(scalars: 64))' must upload them."
            )
        }
        guard context.onBehalf.uploaderDevices.contains(device) else {
            throw refuse(
                "UploaderNotOnDevice",
                "Only a user registered on device '\(device.prefix(scalars: 128))' uploads its changes on another user's behalf."
            )
        }
        guard let created = ODataDateTimeOffset(parsing: createdText) else {
            throw ServerError.badRequest(
                "Baton-Created-At must be a date-time like 2026-11-21T08:30:00Z.", target: "Baton-Created-At")
        }
        guard let record = context.onBehalf.authors[author], record.active, let role = record.role else {
            throw refuse(
                "AuthorInactive",
                "'\(author.prefix(scalars: 64))' is disabled or unknown; changes signed by them are not accepted.")
        }
        guard let signatureData = Data(base64URLEncoded: signatureText),
            let signature = (try? P256.Signing.ECDSASignature(rawRepresentation: signatureData))
                ?? (try? P256.Signing.ECDSASignature(derRepresentation: signatureData))
        else {
            throw refuse("SignatureMalformed", "Baton-Author-Signature is not a base64 ECDSA P-256 signature.")
        }
        let createdDate = Date(
            timeIntervalSince1970: Double(created.utcSecondsSinceEpoch) + Double(created.time.picoseconds) / 1e12)
        guard createdDate <= clock.now().addingTimeInterval(Self.signedTimeSkew) else {
            throw refuse(
                "SignedTimeInFuture",
                "Baton-Created-At \(createdText.prefix(scalars: 40)) lies in the future; a change is signed when it is recorded."
            )
        }
        let signed = SignedFields(
            author: author, device: device, createdAt: createdText, ifMatch: request.header("Baton-If-Match") ?? "")
        let message = Self.canonicalChange(request, requestID: requestID, signed: signed)
        let keys = (record.keys[device] ?? []).filter { key in
            key.registeredAt >= record.createdAt && key.registeredAt <= createdDate
                && (key.replacedAt.map { createdDate < $0 } ?? true)
        }
        guard keys.contains(where: { $0.publicKey.isValidSignature(signature, for: message) }) else {
            throw refuse(
                "SignatureInvalid",
                "The signature does not verify with any key registered for '\(author.prefix(scalars: 64))' on device '\(device.prefix(scalars: 128))' at \(createdText.prefix(scalars: 40))."
            )
        }
        var attribution = Attribution(author: author, uploader: context.user, authorRole: role, signed: signed)
        attribution.device = device
        return attribution
    }

    /// Whether the `If-Match` sent is the one the author signed: the same, stricter than a signed `*`, or an ETag
    /// that a change recorded on the same device produced — the device moves a queued change onto the version
    /// its earlier changes created. A version made anywhere else is one the author never saw.
    ///
    /// - Throws: ``ServerError`` 403 `IfMatchNotSigned` otherwise.
    func checkSignedPrecondition(_ request: DataRequest, attribution: Attribution, in db: any SQLConnection)
        async throws
    {
        guard let signed = attribution.signed, request.method != "POST" else { return }
        let sent = request.header("If-Match") ?? ""
        if sent == signed.ifMatch || signed.ifMatch == "*" { return }
        if try await db.fetchOne(#"SELECT 1 FROM "$repeatability" WHERE device = ? AND etag = ?"#, signed.device, sent)
            != nil
        {
            return
        }
        throw ServerError(
            .forbidden, "IfMatchNotSigned",
            "If-Match is neither the one '\(attribution.author.prefix(scalars: 64))' signed (Baton-If-Match) nor a version their device made; the change is refused. Read the entity again and record the change anew.",
            target: "If-Match")
    }
}

extension DataService {
    /// The on-behalf policy a request needs, read before it runs: whether its `Baton-Device` is one the signed-in
    /// user is registered on, and — for a change signed by another author — whether the settings allow on-behalf
    /// uploads, that author's status and role, and their keys registered on that device.
    ///
    /// - Parameters:
    ///   - request: the request (its `Baton-Device`, `Baton-Author` and `Baton-Author-Signature`).
    ///   - signedIn: the signed-in user.
    ///   - devices: the device registry.
    ///   - users: the user directory.
    ///   - settings: the settings store.
    /// - Returns: the policy.
    /// - Throws: a storage error.
    static func onBehalfPolicy(
        for request: DataRequest, signedIn: String, devices: DeviceRegistry, users: UserDirectory,
        settings: SettingsStore
    ) async throws -> OnBehalfPolicy {
        var policy = OnBehalfPolicy()
        guard let device = request.header("Baton-Device"), DeviceRegistry.isValidDeviceID(device) else {
            return policy
        }
        if try await devices.isRegistered(device: device, user: signedIn) { policy.uploaderDevices.insert(device) }
        guard let author = request.header("Baton-Author"), author != signedIn, User.isValidName(author),
            request.header("Baton-Author-Signature") != nil
        else { return policy }
        policy.allowed = try await settings.current().sharedDevices.uploadPendingChangesOfPreviousUser
        let user = try await users.user(named: author)
        policy.authors[author] = .init(
            active: user.map { !$0.disabled } ?? false, role: user?.role, createdAt: user?.createdAt ?? .distantFuture,
            keys: [device: try await devices.signingKeys(device: device, user: author)])
        return policy
    }
}
