import BatonOData
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

@testable import BatonServer

/// The third attack review's findings on devices and storage, each attacked: proofs dated ahead of the server's
/// clock, users who left a tablet offline, log and usage uploads made with a token alone, and the bounds on what any
/// account can store (backups, devices, refused-change audit entries, audit retention).
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DeviceBoundsTests {
    // MARK: Helpers

    /// The server clock's now, in the milliseconds a device proof carries.
    static func millis(_ server: TestServer) -> Int64 {
        Int64(server.clock.current.withLock { $0 }.timeIntervalSince1970 * 1000)
    }

    /// `Baton-Device-Proof` for `method` on `/devices/{device}/{action}` with `body`, at `time`.
    static func proof(
        _ method: String, _ action: String, device: String = "tablet-7", body: [UInt8] = [], at time: Int64,
        key: P256.Signing.PrivateKey = DeviceKeys.key(for: "tablet-7")
    ) throws -> HTTPFields {
        let message = DeviceRequestProof.message(
            method: method, path: "/devices/\(device)/\(action)", device: device, time: time,
            bodySHA256: SHA256.hash(data: body).lowercaseHex)
        let signature = try key.signature(for: message)
        let name = try #require(HTTPField.Name("Baton-Device-Proof"))
        return [name: DeviceRequestProof.header(time: time, signature: Array(signature.rawRepresentation))]
    }

    /// ``SecurityTests/live(backend:configure:_:)`` with alice registered on tablet-7 (with `key`), approved by
    /// the tablet's key; the body gets alice's access token.
    static func withAliceOnTablet(
        backend: StorageBackend, key: P256.Signing.PrivateKey = P256.Signing.PrivateKey(),
        _ body: @Sendable (TestServer, any TestClientProtocol, _ alice: String) async throws -> Void
    ) async throws {
        try await SecurityTests.live(backend: backend) { server, client in
            let alice = try await client.signIn("alice").access
            #expect(try await OnBehalfTests.register(client, alice, key: key) == .ok)
            try await body(server, client, alice)
        }
    }

    // MARK: Device proofs from the future

    /// Fails before: a proof 4 minutes ahead was accepted (200), and then the real-time proof got 401.
    @Test(arguments: StorageBackend.allCases) func aProofFromTheFutureIsRefusedOrTakenOnceAndBlocksNothing(
        backend: StorageBackend
    ) async throws {
        try await Self.withAliceOnTablet(backend: backend) { (server, client, _) async throws in
            func status(_ time: Int64) async throws -> HTTPResponse.Status {
                try await client.execute(
                    uri: "/devices/tablet-7/status", method: .get, headers: try Self.proof("GET", "status", at: time)
                ) { $0.status }
            }
            let now = Self.millis(server)
            #expect(try await status(now + 240_000) == .unauthorized)  // 4 minutes ahead: refused
            #expect(try await status(now + 20_000) == .ok)  // 20 s ahead: taken…
            #expect(try await status(now + 1_000) == .ok)  // …and the next real-time proof still passes
            #expect(try await status(now + 20_000) == .unauthorized)  // replay while ahead
            server.clock.advance(by: 25)
            #expect(try await status(now + 20_000) == .unauthorized)  // replay once the clock passed it
            #expect(try await status(Self.millis(server)) == .ok)
            // Two proofs sent at once may arrive in either order; each is still taken once.
            let later = Self.millis(server) + 2_000
            #expect(try await status(later) == .ok)
            #expect(try await status(later - 1_000) == .ok)
            #expect(try await status(later - 1_000) == .unauthorized)
            // A proof as old as the window allows is taken; one older is not.
            #expect(try await status(Self.millis(server) - 299_000) == .ok)
            #expect(try await status(Self.millis(server) - 301_000) == .unauthorized)
        }
    }

    // MARK: Departures

    /// Fails before: the departure is ignored and bob, the next first user, gets 403 DeviceProofRequired.
    @Test(arguments: StorageBackend.allCases) func aUserWhoLeftOfflineIsDeclaredGoneAndTheNextFirstUserReKeys(
        backend: StorageBackend
    ) async throws {
        let aliceKey = P256.Signing.PrivateKey()
        try await Self.withAliceOnTablet(backend: backend, key: aliceKey) { server, client, _ in
            let keyID = Data(SHA256.hash(data: aliceKey.publicKey.x963Representation)).base64URLEncoded
            // What the tablet signed when alice joined; her secure store (and the device key) is gone since.
            func departure(signedBy key: P256.Signing.PrivateKey) throws -> String {
                let signature = try key.signature(
                    for: DeviceDeparture.message(device: "tablet-7", user: "alice", keyID: keyID))
                return
                    #"{"user":"alice","keyID":"\#(keyID)","signature":"\#(signature.rawRepresentation.base64URLEncoded)"}"#
            }
            let newDeviceKey = P256.Signing.PrivateKey()
            func register(departures: String) async throws -> (HTTPResponse.Status, String) {
                let bob = try await client.signIn("bob").access
                let key = P256.Signing.PrivateKey().publicKey.x963Representation.base64EncodedString()
                var body = DeviceKeys.body(device: "tablet-7", token: bob, publicKey: key, approver: newDeviceKey)
                body.removeLast()
                body += #","departures":[\#(departures)]}"#
                return try await client.execute(
                    uri: "/devices/tablet-7/registration", method: .put,
                    headers: [.authorization: "Bearer \(bob)", .contentType: "application/json"],
                    body: ByteBuffer(string: body)
                ) { ($0.status, String(buffer: $0.body)) }
            }
            // Signed by any other key: nothing ends, bob is refused.
            #expect(try await register(departures: try departure(signedBy: P256.Signing.PrivateKey())).0 == .forbidden)
            #expect(try await server.server.devices.isRegistered(device: "tablet-7", user: "alice"))
            // The tablet's own slip, while alice was on the device within the hour: she has not left (the slip
            // lies in the tablet's files, where a thief finds it too); her departure waits, and says so.
            let genuine = try departure(signedBy: DeviceKeys.key(for: "tablet-7"))
            let (soon, refusal) = try await register(departures: genuine)
            #expect(soon == .forbidden && refusal.contains("less than an hour ago"), "\(refusal)")
            #expect(try await server.server.devices.isRegistered(device: "tablet-7", user: "alice"))
            server.clock.advance(by: 3_601)
            #expect(try await register(departures: genuine).0 == .ok)
            #expect(try await !server.server.devices.isRegistered(device: "tablet-7", user: "alice"))
            #expect(try await server.server.audit.entries().contains { $0.action == "device-departure" })
        }
    }

    /// A user at the tablet is seen whichever sign-in they use: a status poll with a new sign-in links it to the
    /// device, so a departure for them waits (before, only the sign-in they registered with counted, and a user
    /// who signed in again looked quiet while working). The route says which departures wait, and the tablet
    /// keeps those slips.
    @Test(arguments: StorageBackend.allCases) func aDepartureWaitsWhileItsUserIsSeenOnTheDevice(
        backend: StorageBackend
    ) async throws {
        let aliceKey = P256.Signing.PrivateKey()
        try await Self.withAliceOnTablet(backend: backend, key: aliceKey) { server, client, _ in
            let bob = try await client.signIn("bob").access
            #expect(
                try await client.execute(
                    uri: "/devices/tablet-7/registration", method: .put,
                    headers: [.authorization: "Bearer \(bob)", .contentType: "application/json"],
                    body: ByteBuffer(
                        string: DeviceKeys.body(
                            device: "tablet-7", token: bob,
                            publicKey: P256.Signing.PrivateKey().publicKey.x963Representation.base64EncodedString()))
                ) { $0.status } == .ok)
            let keyID = Data(SHA256.hash(data: aliceKey.publicKey.x963Representation)).base64URLEncoded
            let signature = try DeviceKeys.key(for: "tablet-7").signature(
                for: DeviceDeparture.message(device: "tablet-7", user: "alice", keyID: keyID))
            let slip =
                #"{"departures":[{"user":"alice","keyID":"\#(keyID)","signature":"\#(signature.rawRepresentation.base64URLEncoded)"}]}"#
            func declare() async throws -> [String: Any] {
                let token = try await client.signIn("bob").access
                return try await client.execute(
                    uri: "/devices/tablet-7/departures", method: .post,
                    headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                    body: ByteBuffer(string: slip)
                ) { TestClient.Response.object($0.body) }
            }
            // Two hours on, alice signs in anew (a new sign-in) and her app asks the device's status.
            server.clock.advance(by: 7_200)
            let again = try await client.signIn("alice").access
            #expect(try await client.get("/devices/tablet-7/status", token: again).0 == .ok)
            let waiting = try await declare()
            #expect(waiting["departed"] as? [String] == [] && waiting["waiting"] as? [String] == ["alice"])
            #expect(try await server.server.devices.isRegistered(device: "tablet-7", user: "alice"))
            // bob, after a passcode reset, offers a new device key with the slip: the tablet would keep a key the
            // server does not, so it waits for the hour as well.
            let token = try await client.signIn("bob").access
            var body = DeviceKeys.body(
                device: "tablet-7", token: token,
                publicKey: P256.Signing.PrivateKey().publicKey.x963Representation.base64EncodedString(),
                approver: P256.Signing.PrivateKey())
            body.removeLast()
            body += "," + slip.dropFirst()
            let (rekey, refusal) = try await client.execute(
                uri: "/devices/tablet-7/registration", method: .put,
                headers: [.authorization: "Bearer \(token)", .contentType: "application/json"],
                body: ByteBuffer(string: body)
            ) { ($0.status, String(buffer: $0.body)) }
            #expect(rekey == .forbidden && refusal.contains("less than an hour ago"), "\(refusal)")
            server.clock.advance(by: 3_601)
            let ended = try await declare()
            #expect(ended["departed"] as? [String] == ["alice"] && ended["waiting"] as? [String] == [])
            #expect(try await !server.server.devices.isRegistered(device: "tablet-7", user: "alice"))
        }
    }

    /// What any account can repeat in a loop leaves a bounded trace: fresh keys on one device are capped per day
    /// (each is a key row kept for ever), and store-key fetches of one minute are one audit entry, counted.
    @Test(arguments: StorageBackend.allCases) func loopsOfKeysAndFetchesLeaveABoundedTrace(backend: StorageBackend)
        async throws
    {
        try await SecurityTests.live(backend: backend) { server, client in
            let alice = try await client.signIn("alice").access
            var statuses: [HTTPResponse.Status] = []
            for _ in 0..<22 {
                statuses.append(try await OnBehalfTests.register(client, alice, key: P256.Signing.PrivateKey()))
            }
            #expect(
                statuses.prefix(20).allSatisfy { $0 == .ok }
                    && statuses.suffix(2).allSatisfy { $0 == .tooManyRequests }, "\(statuses)")
            for _ in 0..<30 { #expect(try await client.get("/devices/tablet-7/store-key", token: alice).0 == .ok) }
            let entries = try await server.server.audit.entries(limit: 1_000)
            let fetched = entries.filter { $0.action == "store-key-fetched" }
            #expect(fetched.count == 1 && fetched.first?.repeats == 30, "\(fetched.map(\.repeats))")
            #expect(entries.filter { $0.action == "device-registered" }.map(\.repeats).reduce(0, +) == 20)
        }
    }

    // MARK: Device-proven uploads

    /// Fails before: a registered user's token alone posted a log for the tablet (201).
    @Test(arguments: StorageBackend.allCases) func logAndUsageUploadsNeedTheDevicesProofAsWellAsAToken(
        backend: StorageBackend
    ) async throws {
        try await Self.withAliceOnTablet(backend: backend) { server, client, alice in
            let body = Array(#"{"reason":"support","lines":["made up"]}"#.utf8)
            func send(_ extra: HTTPFields) async throws -> (HTTPResponse.Status, [String: Any]) {
                var headers: HTTPFields = [.authorization: "Bearer \(alice)", .contentType: "application/json"]
                headers.append(contentsOf: extra)
                return try await client.execute(
                    uri: "/devices/tablet-7/logs", method: .post, headers: headers, body: ByteBuffer(bytes: body)
                ) { ($0.status, TestClient.Response.object($0.body)) }
            }
            let now = Self.millis(server)
            let (bare, reply) = try await send([:])
            #expect(bare == .forbidden)
            #expect((reply["error"] as? [String: Any])?["code"] as? String == "DeviceProofRequired")
            let foreign = try Self.proof("POST", "logs", body: body, at: now, key: P256.Signing.PrivateKey())
            #expect(try await send(foreign).0 == .forbidden)
            #expect(try await send(try Self.proof("POST", "logs", body: body, at: now + 1)).0 == .created)
            #expect(try await server.server.devices.logs(device: "tablet-7").count == 1)
        }
    }

    // MARK: Bounds

    /// Fails before: the third backup was kept (201) whatever the count.
    @Test(arguments: StorageBackend.allCases) func backupsPastTheBoundAreRefusedAndNoneIsDropped(
        backend: StorageBackend
    ) async throws {
        try await Self.withAliceOnTablet(backend: backend) { server, client, alice in
            _ = try await server.server.settings.set("backups.max-per-device", to: "2")
            let (_, body, _) = try await client.get("/devices/tablet-7/store-key", token: alice)
            let key = SymmetricKey(data: try #require(Data(base64Encoded: body["key"] as? String ?? "")))
            func send() async throws -> (HTTPResponse.Status, [String: Any]) {
                let sealed = try #require(
                    try AES.GCM.seal(Data("[]".utf8), using: key, authenticating: Data("baton-discarded-v1".utf8))
                        .combined)
                return try await client.execute(
                    uri: "/devices/tablet-7/discarded-changes", method: .post,
                    headers: [.authorization: "Bearer \(alice)", .contentType: "application/json"],
                    body: ByteBuffer(
                        string: #"{"author":"alice","count":1,"backup":"\#(sealed.base64EncodedString())"}"#)
                ) { ($0.status, TestClient.Response.object($0.body)) }
            }
            #expect(try await send().0 == .created)
            #expect(try await send().0 == .created)
            let (full, reply) = try await send()
            #expect(full.code == 507)
            #expect((reply["error"] as? [String: Any])?["code"] as? String == "BackupsFull")
            let kept = try await server.server.devices.discardedChanges()
            #expect(kept.count == 2)
            try await server.server.devices.deleteDiscardedChanges(try #require(kept.first?.id))
            #expect(try await send().0 == .created)
            // Users filling the bound hold back no wipe: the device's own handback counts apart.
            let sealed = try #require(
                try AES.GCM.seal(Data("[]".utf8), using: key, authenticating: Data("baton-discarded-v1".utf8))
                    .combined)
            let handback = Array(#"{"author":"alice","count":1,"backup":"\#(sealed.base64EncodedString())"}"#.utf8)
            var headers = try Self.proof(
                "POST", "discarded-changes", body: handback, at: Self.millis(server))
            headers[.contentType] = "application/json"
            let (byDevice, _) = try await client.execute(
                uri: "/devices/tablet-7/discarded-changes", method: .post, headers: headers,
                body: ByteBuffer(bytes: handback)
            ) { ($0.status, 0) }
            #expect(byDevice == .created)
            // Nobody files a backup under the name of someone who was never on the device.
            let (foreign, reply2) = try await client.execute(
                uri: "/devices/tablet-7/discarded-changes", method: .post,
                headers: [.authorization: "Bearer \(alice)", .contentType: "application/json"],
                body: ByteBuffer(
                    string: #"{"author":"mallory","count":1,"backup":"\#(sealed.base64EncodedString())"}"#)
            ) { ($0.status, String(buffer: $0.body)) }
            #expect(foreign == .badRequest && reply2.contains("'mallory' was not"), "\(reply2)")
        }
    }

    /// Fails before: alice joined a third tablet past `devices.max-per-user` 2 (no such setting: 400 at set).
    @Test(arguments: StorageBackend.allCases) func aUserJoinsNoMoreDevicesThanTheSettingAllows(
        backend: StorageBackend
    ) async throws {
        try await SecurityTests.live(backend: backend) { server, client in
            _ = try await server.server.settings.set("devices.max-per-user", to: "2")
            let alice = try await client.signIn("alice").access
            for device in ["tablet-1", "tablet-2"] {
                #expect(
                    try await OnBehalfTests.register(client, alice, device: device, key: P256.Signing.PrivateKey())
                        == .ok)
            }
            #expect(
                try await OnBehalfTests.register(client, alice, device: "tablet-3", key: P256.Signing.PrivateKey())
                    == .conflict)
            // Re-registering where she is already counts nothing new; leaving one makes room.
            #expect(
                try await OnBehalfTests.register(client, alice, device: "tablet-1", key: P256.Signing.PrivateKey())
                    == .ok)
            // Leaving one makes room only once 30 days have passed: joining and leaving in a loop must not multiply
            // what each device may keep.
            try await server.server.devices.unregister(device: "tablet-1", user: "alice")
            #expect(
                try await OnBehalfTests.register(client, alice, device: "tablet-3", key: P256.Signing.PrivateKey())
                    == .conflict)
            server.clock.advance(by: 30 * 86_400 + 1)
            let fresh = try await client.signIn("alice").access
            #expect(
                try await OnBehalfTests.register(client, fresh, device: "tablet-3", key: P256.Signing.PrivateKey())
                    == .ok)
        }
    }

    /// Fails before: the refused change was audited as the admin's, the name its unchecked `Baton-Author` claimed;
    /// it is the account that sent it, with the claim in the detail.
    @Test func aRefusedChangeIsAuditedUnderTheAccountThatSentIt() async throws {
        try await SecurityTests.live { server, client in
            let mallory = try await client.signIn("mallory").access
            let reply = try await client.odata(
                .patch, "Aircraft('NOPE')", token: mallory, headers: [("Baton-Author", "admin")],
                body: #"{"Status":"grounded"}"#)
            #expect(reply.status == .forbidden, "\(reply.text)")
            let refused = try await server.server.audit.entries(limit: 100).filter { $0.action == "change-refused" }
            #expect(refused.map(\.actor) == ["mallory"])
            #expect(refused.first?.detail?.contains("uploaded by mallory, for author admin (unchecked)") == true)
        }
    }

    /// Fails before: every refused change was its own audit row (50 rows).
    @Test(arguments: StorageBackend.allCases) func refusedChangesOfOneMinuteAreOneAuditEntryCounted(
        backend: StorageBackend
    ) async throws {
        try await SecurityTests.live(backend: backend) { server, client in
            let mallory = try await client.signIn("mallory").access
            for index in 0..<50 {
                // A change the server refuses (unknown entity): 404 is a refusal the device archives.
                _ = try await client.odata(
                    .patch, "Aircraft('NOPE-\(index)')", token: mallory, body: #"{"Status":"grounded"}"#)
            }
            let refused = try await server.server.audit.entries(limit: 1_000).filter { $0.action == "change-refused" }
            #expect(refused.count == 1)  // the test clock stands: one minute
            #expect(refused.map(\.repeats).reduce(0, +) == 50)
        }
    }
}

// MARK: Settings and audit retention

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct StorageBoundSettingsTests {
    /// Fails before: the keys are unknown (400).
    @Test func theBoundsAreSettingsWithRangesAndOldDocumentsTakeTheDefaults() throws {
        var settings = try JSONDecoder().decode(
            ServerSettings.self, from: Data(#"{"devices":{"settingsRefreshSeconds":600}}"#.utf8))
        #expect(settings.devices.maxPerUser == 20 && settings.backups.maxPerDevice == 100)
        #expect(settings.backups.maxMiBPerDevice == 16 && settings.audit.retentionDays == 400)
        #expect(throws: ServerError.self) { try settings.set("audit.retention-days", to: "3") }
        #expect(throws: ServerError.self) { try settings.set("devices.max-per-user", to: "0") }
        try settings.set("audit.retention-days", to: "90")
        #expect(settings.lines.contains("audit.retention-days = 90"))
    }

    /// Fails before: there is no prune (entries stay for ever).
    @Test(arguments: StorageBackend.allCases) func pruneDeletesWhatTheRetentionNoLongerKeepsAndSaysSo(
        backend: StorageBackend
    ) async throws {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let now = server.clock.current.withLock { $0 }
        try await server.server.audit.record(
            contentsOf: (0..<12_000).map {
                AuditEntry(
                    at: now.addingTimeInterval(-500 * 86_400 + Double($0)), actor: "x", action: "old", subject: nil,
                    address: nil, detail: nil)
            } + [AuditEntry(at: now, actor: "x", action: "new", subject: nil, address: nil, detail: nil)])
        #expect(try await server.server.audit.prune(settings: server.server.settings, now: now, actor: "t") == 12_000)
        let left = try await server.server.audit.entries(limit: 100)
        #expect(left.map(\.action).sorted() == ["audit-pruned", "new"])
    }

    /// `serve` runs the retention: a prune at start and then every interval, until the group shuts down.
    @Test func theRetentionServicePrunesOnItsOwn() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        let now = server.clock.current.withLock { $0 }
        try await server.server.audit.record(
            contentsOf: [
                AuditEntry(
                    at: now.addingTimeInterval(-401 * 86_400), actor: "x", action: "old", subject: nil, address: nil,
                    detail: nil),
                AuditEntry(at: now, actor: "x", action: "new", subject: nil, address: nil, detail: nil),
            ])
        let retention = AuditRetention(
            server: server.server, interval: .milliseconds(50), logger: Logger(label: "test"))
        let running = Task { try await retention.run() }
        defer { running.cancel() }
        try await eventually {
            (try? await server.server.audit.entries(limit: 10).map(\.action).sorted()) == ["audit-pruned", "new"]
        }
        // A later entry past the retention goes at a later round, once the clock has moved.
        server.clock.advance(by: 401 * 86_400)
        try await eventually {
            (try? await server.server.audit.entries(limit: 10).contains { $0.action == "new" }) == false
        }
        running.cancel()
        try await running.value
    }

    /// The cockpit's searches (devices, backups) escape `LIKE`'s wildcards by code point: a `%` or `_` with a
    /// combining mark after it is one Swift `Character` that is not `%`, and Foundation's replacing compares
    /// those, so it stayed a wildcard.
    @Test(arguments: ["%\u{301}", "_\u{338}", "\\\u{300}", "a%b_c\\d"])
    func aSearchsWildcardsAreEscapedByCodePoint(search: String) {
        let pattern = DeviceRegistry.containing(search)
        let inner = Array(pattern.unicodeScalars.dropFirst().dropLast())
        var index = 0
        while index < inner.count {
            if inner[index] == "\\" {
                index += 2
                continue
            }
            #expect(inner[index] != "%" && inner[index] != "_", "\(pattern.unicodeScalars.map(\.value))")
            index += 1
        }
        #expect(pattern.unicodeScalars.first == "%" && pattern.unicodeScalars.last == "%")
    }
}
