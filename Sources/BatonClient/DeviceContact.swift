import BatonOData
import Crypto
import Foundation
import Synchronization

/// What the settings exchange answered to a conditional request.
public enum SettingsAnswer: Sendable, Hashable {
    /// Nothing changed since the settings with the ETag the device sent (HTTP 304).
    case unchanged
    /// The current settings, with their ETag for the next conditional request.
    case changed(ClientSettings, etag: String?)
}

/// What an admin ordered for a device, and which of its users were withdrawn (disabled or deleted).
public struct DeviceStatus: Sendable, Hashable, Decodable {
    public var revoked: Bool
    public var wipeOrdered: Bool
    /// Users once registered on the device whom the server disabled or deleted since.
    public var withdrawnUsers: [String]
    /// Whether an admin asked for the device's log (it goes with the next sync).
    public var logsRequested: Bool

    public init(
        revoked: Bool = false, wipeOrdered: Bool = false, withdrawnUsers: [String] = [], logsRequested: Bool = false
    ) {
        self.revoked = revoked
        self.wipeOrdered = wipeOrdered
        self.withdrawnUsers = withdrawnUsers
        self.logsRequested = logsRequested
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        revoked = try container.decode(Bool.self, forKey: .revoked)
        wipeOrdered = try container.decode(Bool.self, forKey: .wipeOrdered)
        withdrawnUsers = try container.decodeIfPresent([String].self, forKey: .withdrawnUsers) ?? []
        logsRequested = try container.decodeIfPresent(Bool.self, forKey: .logsRequested) ?? false
    }

    enum CodingKeys: String, CodingKey { case revoked, wipeOrdered, withdrawnUsers, logsRequested }
}

/// One usage event a device records (with its users' consent) and sends with a sync: what happened, when, and
/// counts or a code — never a name, a value or a message.
public struct UsageEvent: Sendable, Hashable, Codable {
    public enum Name: String, Sendable, Hashable, Codable, CaseIterable {
        case appStart = "app-start"
        case signIn = "sign-in"
        case switchUser = "switch-user"
        case sync
        case error
    }

    /// Unique: a retried upload adds the event once.
    public var id: UUID
    public var at: Date
    public var name: Name
    /// For a sync: the changes uploaded and downloaded.
    public var count: Int?
    /// For a sync: how long it took.
    public var durationMs: Int?
    /// For an error: its code (`Offline`, `PreconditionFailed`).
    public var code: String?

    public init(
        id: UUID = UUID(), at: Date, name: Name, count: Int? = nil, durationMs: Int? = nil, code: String? = nil
    ) {
        self.id = id
        self.at = at
        self.name = name
        self.count = count
        self.durationMs = durationMs
        self.code = code
    }
}

/// Who speaks for a device on its own routes: a user with their access token, or the device itself with its
/// device key (`DeviceRequestProof`) — which still works after an admin revoked every token of the device.
public enum DeviceCredential: Sendable {
    case token(String)
    case deviceKey(P256.Signing.PrivateKey)
}

extension BatonClient {
    static let lastProofTime = Mutex<Int64>(0)

    /// A conditional settings exchange: `etag` is the ETag of the settings the device has (nil: none yet).
    ///
    /// - Throws: ``BatonClientError`` as ``settings(_:token:)`` does.
    public func settings(_ configuration: ServerConfiguration, token: String, etag: String?)
        async throws(BatonClientError) -> SettingsAnswer
    {
        var headers = [("Accept", "application/json")]
        if let etag { headers.append(("If-None-Match", etag)) }
        let response = try await send(
            ClientRequest(url: try endpoint(configuration.settingsEndpoint), headers: headers), token: token)
        if response.status == 304 { return .unchanged }
        guard response.status == 200 else { throw Self.error(from: response, doing: "read the settings") }
        do {
            return .changed(
                try SettingsDocument.deviceDecoder().decode(ClientSettings.self, from: Data(response.body)),
                etag: response.header("ETag"))
        } catch {
            throw BatonClientError(
                .invalidResponse, "Cannot read the settings: the server's answer is not what Baton expects.")
        }
    }

    /// What an admin ordered for this device and which of its users were withdrawn.
    ///
    /// - Throws: ``BatonClientError``; `InvalidResponse` for a server without the endpoint.
    public func deviceStatus(_ configuration: ServerConfiguration, deviceID: String, as credential: DeviceCredential)
        async throws(BatonClientError) -> DeviceStatus
    {
        guard let template = configuration.deviceStatusEndpoint else {
            throw BatonClientError(.invalidResponse, "This server does not tell devices their status.")
        }
        let response = try await sendForDevice(
            ClientRequest(url: try endpoint(template, deviceID: deviceID), headers: [("Accept", "application/json")]),
            deviceID: deviceID, as: credential)
        guard response.status == 200,
            let status = try? JSONDecoder().decode(DeviceStatus.self, from: Data(response.body))
        else { throw Self.error(from: response, doing: "read this device's status") }
        return status
    }

    /// Sends a backup of discarded changes as the device itself or as a user (see
    /// ``sendDiscardedChanges(_:deviceID:author:count:sealed:token:)``).
    @discardableResult
    public func sendDiscardedChanges(
        _ configuration: ServerConfiguration, deviceID: String, author: String, count: Int, sealed: Data,
        as credential: DeviceCredential
    ) async throws(BatonClientError) -> Int {
        guard let template = configuration.deviceDiscardedChangesEndpoint else {
            throw BatonClientError(.invalidResponse, "This server does not keep backups of discarded changes.")
        }
        struct Backup: Encodable {
            var author: String
            var count: Int
            var backup: String
        }
        struct Answer: Decodable { var id: Int }
        let body =
            (try? JSONEncoder().encode(Backup(author: author, count: count, backup: sealed.base64EncodedString())))
            ?? Data()
        let response = try await sendForDevice(
            ClientRequest(
                method: "POST", url: try endpoint(template, deviceID: deviceID),
                headers: [("Content-Type", "application/json")], body: Array(body)),
            deviceID: deviceID, as: credential)
        guard response.status == 201, let answer = try? JSONDecoder().decode(Answer.self, from: Data(response.body))
        else { throw Self.error(from: response, doing: "send the backup of discarded changes") }
        return answer.id
    }

    /// Sends usage events with a user's token, signed with the device key; the server keeps each event once (by
    /// its id).
    ///
    /// - Returns: how many were new to the server.
    /// - Throws: ``BatonClientError``; `InvalidResponse` for a server that takes none.
    @discardableResult
    public func sendUsage(
        _ configuration: ServerConfiguration, deviceID: String, events: [UsageEvent], token: String,
        deviceKey: P256.Signing.PrivateKey
    ) async throws(BatonClientError) -> Int {
        guard let template = configuration.deviceUsageEndpoint else {
            throw BatonClientError(.invalidResponse, "This server takes no usage events.")
        }
        struct Body: Encodable { var events: [UsageEvent] }
        struct Answer: Decodable { var accepted: Int }
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let body = (try? encoder.encode(Body(events: events))) ?? Data()
        let request = try signed(
            ClientRequest(
                method: "POST", url: try endpoint(template, deviceID: deviceID),
                headers: [("Content-Type", "application/json")], body: Array(body)), deviceID: deviceID, key: deviceKey)
        let response = try await send(request, token: token)
        guard response.status == 200, let answer = try? JSONDecoder().decode(Answer.self, from: Data(response.body))
        else { throw Self.error(from: response, doing: "send usage events") }
        return answer.accepted
    }

    /// Sends the device's log lines with a user's token, signed with the device key; `reason` is `support`,
    /// `requested` or `setting`.
    ///
    /// - Throws: ``BatonClientError``; `InvalidResponse` for a server that takes none.
    public func sendLogs(
        _ configuration: ServerConfiguration, deviceID: String, reason: String, lines: [String], token: String,
        deviceKey: P256.Signing.PrivateKey
    ) async throws(BatonClientError) {
        guard let template = configuration.deviceLogsEndpoint else {
            throw BatonClientError(.invalidResponse, "This server takes no device logs.")
        }
        struct Body: Encodable {
            var reason: String
            var lines: [String]
        }
        let body = (try? JSONEncoder().encode(Body(reason: reason, lines: lines))) ?? Data()
        let request = try signed(
            ClientRequest(
                method: "POST", url: try endpoint(template, deviceID: deviceID),
                headers: [("Content-Type", "application/json")], body: Array(body)), deviceID: deviceID, key: deviceKey)
        let response = try await send(request, token: token)
        guard response.status == 201 else { throw Self.error(from: response, doing: "send the device's log") }
    }

    /// Reports that the device wiped itself as an admin ordered.
    public func reportWiped(_ configuration: ServerConfiguration, deviceID: String, as credential: DeviceCredential)
        async throws(BatonClientError)
    {
        guard let template = configuration.deviceWipedEndpoint else {
            throw BatonClientError(.invalidResponse, "This server takes no reports of wipes.")
        }
        let response = try await sendForDevice(
            ClientRequest(method: "POST", url: try endpoint(template, deviceID: deviceID)), deviceID: deviceID,
            as: credential)
        guard response.status == 204 else { throw Self.error(from: response, doing: "report the wipe") }
    }

    /// Sends `request` with a user's token, or signed with the device key (`Baton-Device-Proof`).
    func sendForDevice(_ request: ClientRequest, deviceID: String, as credential: DeviceCredential)
        async throws(BatonClientError) -> ClientResponse
    {
        switch credential {
        case .token(let token):
            return try await send(request, token: token)
        case .deviceKey(let key):
            return try await send(try signed(request, deviceID: deviceID, key: key), token: nil)
        }
    }

    /// `request` with a `Baton-Device-Proof` header: signed with the device key, over its method, route, time
    /// and body.
    func signed(_ request: ClientRequest, deviceID: String, key: P256.Signing.PrivateKey)
        throws(BatonClientError) -> ClientRequest
    {
        var request = request
        // The server takes each proof once, by its time: every proof of this process is later than the last.
        let time = Self.lastProofTime.withLock { last in
            last = max(Int64(Date().timeIntervalSince1970 * 1000), last + 1)
            return last
        }
        // The route's own path, so a proxy's prefix changes nothing.
        let message = DeviceRequestProof.message(
            method: request.method, path: "/devices/\(deviceID)/\(request.url.lastPathComponent)", device: deviceID,
            time: time, bodySHA256: SHA256.hash(data: request.body).lowercaseHex)
        guard let signature = try? key.signature(for: message) else {
            throw BatonClientError(.invalidResponse, "The device key cannot sign.")
        }
        request.headers.append(
            (
                "Baton-Device-Proof",
                DeviceRequestProof.header(time: time, signature: Array(signature.rawRepresentation))
            ))
        return request
    }

    /// Declares users who left this device without telling the server (`DeviceDeparture`, signed when each
    /// joined), as the device itself or as one of its users.
    ///
    /// - Returns: the users whose registration the server ended.
    /// - Throws: ``BatonClientError``; `InvalidResponse` for a server without the endpoint.
    @discardableResult
    public func sendDepartures(
        _ configuration: ServerConfiguration, deviceID: String, departures: [SignedDeparture],
        as credential: DeviceCredential
    ) async throws(BatonClientError) -> DepartureAnswer {
        guard let template = configuration.deviceDeparturesEndpoint else {
            throw BatonClientError(.invalidResponse, "This server takes no departures.")
        }
        struct Body: Encodable { var departures: [SignedDeparture] }

        let body = (try? JSONEncoder().encode(Body(departures: departures))) ?? Data()
        let response = try await sendForDevice(
            ClientRequest(
                method: "POST", url: try endpoint(template, deviceID: deviceID),
                headers: [("Content-Type", "application/json")], body: Array(body)),
            deviceID: deviceID, as: credential)
        guard response.status == 200,
            let answer = try? JSONDecoder().decode(DepartureAnswer.self, from: Data(response.body))
        else { throw Self.error(from: response, doing: "declare the users who left this device") }
        return answer
    }
}

/// What the server did with declared departures (``BatonClient/sendDepartures(_:deviceID:departures:as:)``).
public struct DepartureAnswer: Sendable, Hashable, Decodable {
    /// The users whose registration on the device ended.
    public var departed: [String]
    /// The users the server saw on the device within the hour: their departure waits, and is sent again later.
    public var waiting: [String]

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        departed = try container.decode([String].self, forKey: .departed)
        // Absent from servers before the quiet hour.
        waiting = try container.decodeIfPresent([String].self, forKey: .waiting) ?? []
    }

    enum CodingKeys: String, CodingKey { case departed, waiting }
}

/// A user's departure from a device, signed with the device key when the user joined (`DeviceDeparture`):
/// kept on the device, and sent when the user leaves without reaching the server.
public struct SignedDeparture: Sendable, Hashable, Codable {
    public var user: String
    /// The user's signing key id on the device (base64url SHA-256 of its X9.63 form).
    public var keyID: String
    /// base64url of the raw ECDSA P-256 signature.
    public var signature: String

    public init(user: String, keyID: String, signature: String) {
        self.user = user
        self.keyID = keyID
        self.signature = signature
    }

    /// Signs the departure of `user`, whose signing key on `deviceID` is `keyID`, with the device key.
    public init(deviceID: String, user: String, keyID: String, deviceKey: P256.Signing.PrivateKey) throws {
        let message = DeviceDeparture.message(device: deviceID, user: user, keyID: keyID)
        self.init(
            user: user, keyID: keyID,
            signature: try deviceKey.signature(for: message).rawRepresentation.base64URLEncoded)
    }
}
