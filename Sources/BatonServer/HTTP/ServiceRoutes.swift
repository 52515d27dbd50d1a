import BatonOData
import Crypto
import Foundation
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
            return json(
                .object([
                    ("issuer", .string(issuer)),
                    ("oauth_authorization_server", .string("\(issuer)/.well-known/oauth-authorization-server")),
                    ("settings_endpoint", .string("\(issuer)/settings")),
                    ("user_endpoint", .string("\(issuer)/me")),
                    ("device_registration_endpoint", .string("\(issuer)/devices/{deviceID}/registration")),
                    ("device_store_key_endpoint", .string("\(issuer)/devices/{deviceID}/store-key")),
                    ("device_status_endpoint", .string("\(issuer)/devices/{deviceID}/status")),
                    (
                        "device_discarded_changes_endpoint",
                        .string("\(issuer)/devices/{deviceID}/discarded-changes")
                    ),
                    ("odata_service_root", .string("\(issuer)/odata/")),
                    ("admin_cockpit", .string("\(issuer)/admin/")),
                    ("client_id", .string(OAuthClient.device.id)),
                ]))
        }
    }

    func addProtected(to group: RouterGroup<BatonRequestContext>) {
        group.get("/settings") { _, _ in
            let data = try JSONEncoder.sorted.encode(try await settings.current().effective)
            return Response(
                status: .ok, headers: [.contentType: "application/json"],
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
            let registration = try await devices.register(device: device, user: name, publicKey: key, proof: proof)
            try await devices.noteContact(
                device: device, appVersion: request.headers[.batonAppVersion], family: context.claims?.family)
            try await audit.record(
                AuditEntry(
                    at: clock.now(), actor: name, action: "device-registered", subject: device,
                    address: context.clientAddress, detail: "key \(registration.keyID)"))
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
        group.post("/devices/{device}/discarded-changes") { request, context in
            let name = try context.userName()
            let device = try context.parameters.require("device")
            guard DeviceRegistry.isValidDeviceID(device) else { throw DeviceRegistry.invalidDeviceID }
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
        group.get("/devices/{device}/status") { _, context in
            // What an admin ordered for the device: told to anyone who is or was registered on it (a revoked
            // device's registrations have ended), and to nobody else, so the answer reveals no other device.
            let name = try context.userName()
            let device = try context.parameters.require("device")
            guard try await devices.wasRegistered(device: device, user: name),
                let status = try await devices.status(device: device)
            else { throw ServerError.notFound("You have never been registered on device '\(device.prefix(128))'.") }
            var response = json(
                .object([("revoked", .bool(status.revoked)), ("wipeOrdered", .bool(status.wipeOrdered))]))
            response.headers[.cacheControl] = "no-store"
            return response
        }
        group.get("/devices/{device}/store-key") { request, context in
            let name = try context.userName()
            let device = try context.parameters.require("device")
            let key = try await devices.storeKey(device: device, user: name)
            try await devices.noteContact(
                device: device, appVersion: request.headers[.batonAppVersion], family: context.claims?.family)
            try await audit.record(
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

extension JSONEncoder {
    /// An encoder with sorted keys and ISO 8601 dates.
    static var sorted: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        encoder.dateEncodingStrategy = .iso8601
        return encoder
    }
}
