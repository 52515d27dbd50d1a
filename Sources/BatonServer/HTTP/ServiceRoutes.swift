import BatonOData
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// The device-facing routes: discovery, health, settings exchange, the signed-in user, device registration,
/// the device store key, and backups of discarded changes.
struct ServiceRoutes {
    let settings: SettingsStore
    let devices: DeviceRegistry
    let users: UserDirectory
    let audit: AuditLog
    let clock: ServerClock
    let issuerBox: IssuerBox
    /// Whether both databases answer a read: what `/health` tells a load balancer.
    let databasesAnswer: @Sendable () async -> Bool

    func addPublic(to router: Router<BatonRequestContext>) {
        // For load balancers: 200 while both databases answer, else 503 with an OData error body.
        router.get("/health") { _, _ in
            guard await databasesAnswer() else {
                throw ServerError.databaseUnavailable(
                    "The server cannot read its databases; it answers again once they are back.")
            }
            return json(.object([("status", .string("ok"))]))
        }
        router.get("/.well-known/baton-configuration") { _, _ in
            let issuer = issuerBox.value
            // Read before sign-in: how devices may sign people in.
            let methods = try await settings.current().signIn.methods
            return json(
                .object([
                    ("issuer", .string(issuer)),
                    ("oauth_authorization_server", .string("\(issuer)/.well-known/oauth-authorization-server")),
                    ("settings_endpoint", .string("\(issuer)/settings")),
                    ("user_endpoint", .string("\(issuer)/me")),
                    ("device_registration_endpoint", .string("\(issuer)/devices/{deviceID}/registration")),
                    ("device_store_key_endpoint", .string("\(issuer)/devices/{deviceID}/store-key")),
                    ("device_status_endpoint", .string("\(issuer)/devices/{deviceID}/status")),
                    ("device_wiped_endpoint", .string("\(issuer)/devices/{deviceID}/wiped")),
                    ("device_usage_endpoint", .string("\(issuer)/devices/{deviceID}/usage")),
                    ("device_logs_endpoint", .string("\(issuer)/devices/{deviceID}/logs")),
                    ("device_departures_endpoint", .string("\(issuer)/devices/{deviceID}/departures")),
                    (
                        "device_discarded_changes_endpoint",
                        .string("\(issuer)/devices/{deviceID}/discarded-changes")
                    ),
                    ("odata_service_root", .string("\(issuer)/odata/")),
                    ("admin_cockpit", .string("\(issuer)/admin/")),
                    ("scim_endpoint", .string("\(issuer)/scim/v2")),
                    ("sign_in_methods", .array(methods.map { .string($0) })),
                    ("client_id", .string(OAuthClient.device.id)),
                ]))
        }
    }

    func addProtected(to group: RouterGroup<BatonRequestContext>) {
        group.get("/settings") { request, _ in
            // A device refreshes often: a strong ETag of the settings it would get lets it ask conditionally and
            // get 304 when nothing changed.
            let data = try JSONEncoder.sorted.encode(try await settings.current().effective)
            let etag = "\"" + Array(SHA256.hash(data: data).prefix(16)).lowercaseHex + "\""
            let matches = request.headers[.ifNoneMatch].map { header in
                header == "*"
                    || header.split(separator: ",").contains { $0.trimmingCharacters(in: .whitespaces) == etag }
            }
            if matches == true {
                return Response(status: .notModified, headers: [.eTag: etag, .cacheControl: "no-cache"])
            }
            return Response(
                status: .ok, headers: [.contentType: "application/json", .eTag: etag, .cacheControl: "no-cache"],
                body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
        group.get("/me") { _, context in
            let name = try context.userName()
            guard let user = try await users.user(named: name) else {
                throw ServerError.unauthorized("The user no longer exists.")
            }
            return json(
                .object([
                    ("name", .string(user.name)), ("displayName", .string(user.displayName)),
                    ("role", .string(user.role.rawValue)),
                ]))
        }
        group.put("/devices/{device}/registration") { request, context in
            let name = try context.userName()
            let device = try context.parameters.require("device")
            guard DeviceRegistry.isValidDeviceID(device) else { throw DeviceRegistry.invalidDeviceID }
            var request = request
            let body = try JSONValue(parsing: Array(buffer: try await request.collectBody(upTo: context.maxUploadSize)))
            guard let text = body["publicKey"]?.stringValue else {
                throw ServerError.badRequest(
                    "The body must be {\"publicKey\": \"<base64 P-256 public key>\", \"deviceKey\": …, \"deviceProof\": …}.",
                    target: "publicKey")
            }
            let key = try DeviceRegistry.parsePublicKey(text)
            var proof: DeviceRegistry.DeviceProof?
            if let proofText = body["deviceProof"]?.stringValue {
                guard let data = Data(base64URLEncoded: proofText),
                    let signature = try? P256.Signing.ECDSASignature(rawRepresentation: data)
                else {
                    throw ServerError.badRequest(
                        "deviceProof must be a base64 raw ECDSA P-256 signature (64 bytes).", target: "deviceProof")
                }
                proof = .init(
                    deviceKey: try body["deviceKey"]?.stringValue.map(DeviceRegistry.parsePublicKey),
                    signature: signature)
            }
            let departures = try DeviceRegistry.parseDepartures(body["departures"])
            let asked = clock.now()
            let registration = try await devices.register(
                device: device, user: name, publicKey: key, proof: proof, departures: departures)
            try await devices.noteContact(
                device: device, appVersion: request.headers[.batonAppVersion], family: context.claims?.family)
            for departed in registration.departed {
                try await audit.record(
                    AuditEntry(
                        at: clock.now(), actor: name, action: "device-departure", subject: device,
                        address: context.clientAddress, detail: "user \(departed), declared with the device key"))
            }
            // A new key is evidence (it verifies what it signs) and is bounded per day: recorded in full. The same key
            // registered again, which anyone on the device may repeat in a loop, is counted.
            let entry = AuditEntry(
                at: clock.now(), actor: name, action: "device-registered", subject: device,
                address: context.clientAddress, detail: "key \(registration.keyID)")
            if registration.registeredAt >= asked {
                try await audit.record(entry)
            } else {
                try await audit.recordCounted(entry)
            }
            let data = try JSONEncoder.sorted.encode(registration)
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
        group.delete("/devices/{device}/registration") { request, context in
            let name = try context.userName()
            let device = try context.parameters.require("device")
            // `?user=NAME`: an admin removes someone else from the device (their key is retired with it).
            let target = request.uri.queryParameters["user"].map(String.init) ?? name
            guard target == name || context.role == .admin else {
                throw ServerError.forbidden("Only an admin removes another user from a device.")
            }
            try await devices.unregister(device: device, user: target)
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: name, action: "device-unregistered", subject: device,
                    address: context.clientAddress, detail: target == name ? nil : "user \(target)"))
            return Response(status: .noContent)
        }
        group.get("/devices/{device}/store-key") { request, context in
            let name = try context.userName()
            let device = try context.parameters.require("device")
            let key = try await devices.storeKey(device: device, user: name)
            try await devices.noteContact(
                device: device, appVersion: request.headers[.batonAppVersion], family: context.claims?.family)
            try await audit.recordCounted(
                AuditEntry(
                    at: clock.now(), actor: name, action: "store-key-fetched", subject: device,
                    address: context.clientAddress, detail: nil))
            var response = json(
                .object([
                    ("device", .string(device)),
                    ("key", .string(key.withUnsafeBytes { Data($0) }.base64EncodedString())),
                ]))
            response.headers[.cacheControl] = "no-store"
            return response
        }
    }
}

extension ServiceRoutes {
    /// What a device sends for support, with the token of a user registered on it and the device's own proof
    /// (``DeviceRequestProof``, `Baton-Device-Proof`): usage events (when the server collects them) and its log.
    /// A user's token alone, from anywhere, does not speak for the device.
    func addTelemetryRoutes(to group: RouterGroup<BatonRequestContext>) {
        /// The device and user of a request by a registered user, signed with the device key; its body.
        @Sendable func provenUpload(_ request: Request, _ context: BatonRequestContext, action: String)
            async throws -> (device: String, user: String, body: JSONValue)
        {
            let device = try context.parameters.require("device")
            guard DeviceRegistry.isValidDeviceID(device) else { throw DeviceRegistry.invalidDeviceID }
            let name = try context.userName()
            guard try await devices.isRegistered(device: device, user: name) else {
                throw ServerError.notFound("You are not registered on device '\(device.prefix(scalars: 128))'.")
            }
            var request = request
            let bytes = Array(buffer: try await request.collectBody(upTo: context.maxUploadSize))
            guard let header = request.headers[.batonDeviceProof] else {
                throw ServerError(
                    .forbidden, "DeviceProofRequired",
                    "Uploads for a device carry its proof (Baton-Device-Proof, signed with the device key) as well as a user's token.",
                    target: "Baton-Device-Proof")
            }
            do {
                try await devices.verifyProof(
                    header, device: device, method: request.method.rawValue, path: "/devices/\(device)/\(action)",
                    body: bytes)
            } catch let error as ServerError where error.code == "InvalidDeviceProof" {
                // The token is fine: a 401 would make the device refresh it and send the same proof again.
                throw ServerError(.forbidden, "InvalidDeviceProof", error.message, target: "Baton-Device-Proof")
            }
            // The user is at the device: their sign-in is linked to it (revocation, and a departure's quiet hour).
            try await devices.noteContact(
                device: device, appVersion: request.headers[.batonAppVersion], family: context.claims?.family)
            return (device, name, try JSONValue(parsing: bytes))
        }
        group.post("/devices/{device}/usage") { request, context in
            guard try await settings.current().telemetry.usage else {
                throw ServerError.conflict("This server does not collect usage events (setting telemetry.usage).")
            }
            let (device, _, body) = try await provenUpload(request, context, action: "usage")
            let added = try await devices.keepUsage(device: device, body: body)
            return json(.object([("accepted", .number(String(added)))]))
        }
        group.post("/devices/{device}/logs") { request, context in
            let (device, name, body) = try await provenUpload(request, context, action: "logs")
            let kept = try await devices.keepLog(device: device, uploader: name, body: body)
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: name, action: "device-log-received", subject: device,
                    address: context.clientAddress, detail: "\(kept.lineCount) line(s), \(kept.reason)"))
            var response = json(
                .object([("id", .number(String(kept.id))), ("lines", .number(String(kept.lineCount)))]))
            response.status = .created
            return response
        }
    }

    /// The routes a device may call with its own proof (``DeviceRequestProof``) as well as with a user's token:
    /// what an admin ordered for it, backups of the changes it discards, and the report of a wipe done. A tablet
    /// taken out of service still reaches these, so what it held comes back before it forgets it.
    func addDeviceRoutes(to group: RouterGroup<BatonRequestContext>) {
        /// Who speaks: the device itself, or a user who is or was registered on it.
        @Sendable func caller(_ context: BatonRequestContext, device: String) async throws -> String {
            if context.provenDevice == device { return "device:\(device)" }
            let name = try context.userName()
            guard try await devices.wasRegistered(device: device, user: name) else {
                throw ServerError.notFound("You have never been registered on device '\(device.prefix(scalars: 128))'.")
            }
            return name
        }
        group.post("/devices/{device}/discarded-changes") { request, context in
            let device = try context.parameters.require("device")
            guard DeviceRegistry.isValidDeviceID(device) else { throw DeviceRegistry.invalidDeviceID }
            let name = context.provenDevice == device ? "device:\(device)" : try context.userName()
            var request = request
            let body = try JSONValue(parsing: Array(buffer: try await request.collectBody(upTo: context.maxUploadSize)))
            guard let author = body["author"]?.stringValue, case .number(let countText)? = body["count"],
                let count = Int(countText),
                let text = body["backup"]?.stringValue, let sealed = Data(base64Encoded: text)
            else {
                throw ServerError.badRequest(
                    "The body must be {\"author\": \"<user>\", \"count\": <changes>, \"backup\": \"<base64>\"}.")
            }
            let kept = try await devices.keepDiscardedChanges(
                device: device, uploader: name, author: author, count: count, sealed: sealed)
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: name, action: "changes-discarded", subject: author,
                    address: context.clientAddress, detail: "\(count) change(s) on device \(device), backup \(kept.id)")
            )
            var response = json(.object([("id", .number(String(kept.id))), ("count", .number(String(count)))]))
            response.status = .created
            return response
        }
        group.post("/devices/{device}/departures") { request, context in
            // Users who left the device without telling the server, declared with the device key (each departure
            // is signed); sent by the device itself or by one of its current users.
            let device = try context.parameters.require("device")
            guard DeviceRegistry.isValidDeviceID(device) else { throw DeviceRegistry.invalidDeviceID }
            let name = try await caller(context, device: device)
            if context.provenDevice != device, try await !devices.isRegistered(device: device, user: name) {
                throw ServerError.notFound("You are not registered on device '\(device.prefix(scalars: 128))'.")
            }
            var request = request
            let body = try JSONValue(parsing: Array(buffer: try await request.collectBody(upTo: context.maxUploadSize)))
            let ending = try await devices.endRegistrations(
                device: device, departures: try DeviceRegistry.parseDepartures(body["departures"]))
            for user in ending.ended {
                try await audit.record(
                    AuditEntry(
                        at: clock.now(), actor: name, action: "device-departure", subject: device,
                        address: context.clientAddress, detail: "user \(user), declared with the device key"))
            }
            // `waiting`: users seen on the device within the hour; the device keeps their slips and sends them again.
            return json(
                .object([
                    ("departed", .array(ending.ended.map { .string($0) })),
                    ("waiting", .array(ending.waiting.map { .string($0) })),
                ]))
        }
        group.get("/devices/{device}/status") { request, context in
            // What an admin ordered for the device: told to the device itself and to anyone who is or was
            // registered on it, and to nobody else, so the answer reveals no other device. Which of its users were
            // withdrawn only to the device and its current users.
            let device = try context.parameters.require("device")
            let name = try await caller(context, device: device)
            guard let status = try await devices.status(device: device) else {
                throw ServerError.notFound("You have never been registered on device '\(device.prefix(scalars: 128))'.")
            }
            var current = name == "device:\(device)"
            if !current {
                current = try await devices.isRegistered(device: device, user: name)
                // A user at the device asks at every contact: their sign-in is linked to it (revocation, and a
                // departure's quiet hour).
                if current {
                    try await devices.noteContact(
                        device: device, appVersion: request.headers[.batonAppVersion], family: context.claims?.family)
                }
            }
            var response = json(
                .object([
                    ("revoked", .bool(status.revoked)), ("wipeOrdered", .bool(status.wipeOrdered)),
                    ("withdrawnUsers", .array(current ? status.withdrawnUsers.map { .string($0) } : [])),
                    ("logsRequested", .bool(current ? try await devices.logsRequested(device: device) : false)),
                ]))
            response.headers[.cacheControl] = "no-store"
            return response
        }
        group.post("/devices/{device}/wiped") { _, context in
            // Only the device itself reports its wipe, and only one it was told to do.
            let device = try context.parameters.require("device")
            guard context.provenDevice == device else {
                throw ServerError.forbidden("Only the device itself reports its wipe, signed with its device key.")
            }
            let name = "device:\(device)"
            guard try await devices.noteWiped(device: device) else {
                throw ServerError.conflict("Nobody ordered this device wiped; nothing was recorded.")
            }
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: name, action: "device-wiped", subject: device,
                    address: context.clientAddress, detail: nil))
            return Response(status: .noContent)
        }
    }
}

/// Lets a device speak for itself with `Baton-Device-Proof` (``DeviceRequestProof``) on the device routes;
/// a request with an `Authorization` header goes through ``BearerAuthenticationMiddleware`` as everywhere else.
struct DeviceProofMiddleware: RouterMiddleware {
    typealias Context = BatonRequestContext
    let bearer: BearerAuthenticationMiddleware
    let devices: DeviceRegistry

    @concurrent func handle(
        _ request: Request, context: Context, next: @concurrent (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        guard request.headers[.authorization] == nil, let proof = request.headers[.batonDeviceProof] else {
            return try await bearer.handle(request, context: context, next: next)
        }
        let parts = request.uri.path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[1] == "devices" else {
            throw ServerError.unauthorized("A device proof is accepted only on the device's own routes.")
        }
        var request = request
        let body = try await request.collectBody(upTo: context.maxUploadSize)
        let device = String(parts[2])
        try await devices.verifyProof(
            proof, device: device, method: request.method.rawValue, path: "/devices/\(device)/\(parts[3])",
            body: Array(buffer: body))
        var context = context
        context.provenDevice = device
        return try await next(request, context)
    }
}

extension HTTPField.Name {
    /// `Baton-Device-Proof`: a request signed with the device key (``DeviceRequestProof``).
    static let batonDeviceProof: HTTPField.Name = {
        guard let name = HTTPField.Name("Baton-Device-Proof") else { preconditionFailure("valid header name") }
        return name
    }()
}

extension JSONEncoder {
    /// An encoder with sorted keys and ISO 8601 dates.
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }
}
