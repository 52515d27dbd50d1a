import BatonClient
import BatonOData
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

@testable import BatonOffline

/// Photos in the shift handover: taken offline, kept encrypted on the tablet, uploaded after their check on their
/// author's behalf, downloaded on demand into a bounded cache.
extension HandoverTests {
    static let photoQueries = [
        DefiningQuery(name: "aircraft", url: "Aircraft"), DefiningQuery(name: "checks", url: "PreflightChecks"),
        DefiningQuery(name: "photos", url: "CheckPhotos"),
    ]

    static func sha256(_ bytes: [UInt8]) -> String { SHA256.hash(data: bytes).lowercaseHex }

    /// The tutorial's handover with a photo: alice takes a photo of a tyre offline and locks; bob signs in and
    /// syncs; the server holds the photo with `TakenBy` alice, `UploadedBy` bob and the same SHA-256.
    @Test func alicesPhotoTakenOfflineReachesTheServerThroughBob() async throws {
        try await withServer { server in
            let device = try await makeDevice(server, definingQueries: Self.photoQueries)
            let alice = try await device.manager.open()
            _ = try await device.manager.addUser()
            await device.presenter.append([.pick("Alice"), .passcode("alice-pass-1")])
            let aliceAgain = try await device.manager.switchUser()
            #expect(aliceAgain.user.onboardingID == alice.user.onboardingID)
            try await device.open(aliceAgain)
            _ = try await device.store.download(using: aliceAgain.authorized)
            let tail = try #require(try await device.store.read("Aircraft").first?.values["TailNumber"]?.text)

            // Offline: a check, and a photo of the tyre with it.
            await server.stop()
            let checkID = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5200"))
            let check = try #require(try await device.store.read(checkID).first?.values["ID"])
            let jpeg = ImageFixtures.jpeg(scanBytes: 600_000)
            let photoID = try await device.store.takePhoto(
                jpeg, values: ["CheckID": check, "Caption": .string("main tyre, cut on the sidewall")])
            let local = try #require(try await device.store.read(photoID).first)
            #expect(local.pending)
            #expect(local.values["TakenBy"] == .string("alice"))
            let photo = try await device.store.photo(photoID, using: nil)
            #expect(!ImageFixtures.contains(photo.bytes, ImageFixtures.locationBytes), "the location went on capture")
            #expect(local.values["SHA256"] == .string(photo.sha256))
            #expect(try await device.store.pendingEntries().map(\.entityID) == [checkID, photoID])

            // Nothing of the photo is readable in the tablet's files.
            let scan = Array(jpeg[jpeg.count / 2..<jpeg.count / 2 + 32])
            for suffix in ["", "-wal"] {
                let file = device.directory.appendingPathComponent("offline.sqlite" + suffix)
                guard let data = FileManager.default.contents(atPath: file.path) else { continue }
                #expect(!ImageFixtures.contains(Array(data), scan), "offline.sqlite\(suffix) holds the photo's bytes")
            }
            await device.manager.lock()
            await device.store.close()

            // Bob signs in, still offline, then syncs when the network is back: the check, then the photo.
            await device.presenter.append([.pick("Bob"), .passcode("bob-pass-12")])
            let bob = try await device.manager.switchUser()
            try await device.open(bob)
            let back = try await server.restarted()
            let report = try await device.store.upload(using: bob.authorized, allowOnBehalf: true)
            #expect(report.isComplete, "\(report.archived.map(\.message))")
            #expect(report.uploaded.map(\.entityID) == [checkID, photoID])
            #expect(report.uploadedByAuthor == ["alice": 2])
            let onServer = try await serverEntity(back, photoID, session: bob)
            #expect(onServer["TakenBy"] as? String == "alice")
            #expect(onServer["UploadedBy"] as? String == "bob")
            #expect(onServer["SHA256"] as? String == photo.sha256)
            let bytes = try await bob.authorized.send(
                ClientRequest(url: try #require(URL(string: back.url.absoluteString + "/odata/" + photoID + "/$value")))
            )
            #expect(bytes.status == 200)
            #expect(Self.sha256(bytes.body) == photo.sha256)
            // Who took it and who uploaded it, in the audit log.
            let created = try await back.server.audit.entries(limit: 100).first {
                $0.action == "entity-created" && $0.subject == photoID
            }
            #expect(created?.actor == "alice")
            #expect(created?.detail == "uploaded by bob")
            return back
        }
    }

    /// A refused check takes its photo to the error archive with it, the photo's bytes kept on the tablet.
    @Test func aRefusedCheckTakesItsPhotoToTheArchive() async throws {
        try await withServer { server in
            let device = try await makeDevice(server, definingQueries: Self.photoQueries)
            let (session, tail) = try await signInAndDownload(device)
            // Someone else records a check with this ID on the server meanwhile: the tablet's create conflicts.
            let id = UUID()
            let json =
                #"{"ID":"\#(id.uuidString.lowercased())","TailNumber":"\#(tail)","FuelKg":4000,"TyrePressureMainPsi":200,"TyrePressureNosePsi":60,"OilQuarts":15}"#
            let elsewhere = try await session.authorized.send(
                ClientRequest(
                    method: "POST",
                    url: try #require(URL(string: server.url.absoluteString + "/odata/PreflightChecks")),
                    headers: [("Content-Type", "application/json")], body: Array(json.utf8)))
            #expect(elsewhere.status == 201)
            var values = check(tail, fuel: "5100")
            values["ID"] = .guid(id)
            let checkID = try await device.store.create(in: "PreflightChecks", values: values)
            let photoID = try await device.store.takePhoto(ImageFixtures.png(), values: ["CheckID": .guid(id)])
            let report = try await device.store.upload(using: session.authorized, allowOnBehalf: true)
            #expect(report.uploaded.isEmpty)
            #expect(report.archived.map(\.entry.entityID) == [checkID, photoID])
            #expect(report.archived.last?.code == "PrincipalRefused")
            #expect(try await device.store.pendingEntries().isEmpty)
            // Its bytes stay on the tablet, with the check's change, until someone resolves them.
            #expect(try await device.store.photo(photoID, using: nil).bytes.count > 0)
            let onServer = try await session.authorized.send(
                ClientRequest(url: try #require(URL(string: server.url.absoluteString + "/odata/" + photoID))))
            #expect(onServer.status == 404)
            return server
        }
    }

    /// The initial download brings photos' properties only; a photo's bytes come when it is opened, checked
    /// against its SHA-256, and the cache keeps the most recently opened within its bound.
    @Test func photosDownloadOnDemandIntoABoundedCache() async throws {
        try await withServer { server in
            let device = try await makeDevice(server, definingQueries: Self.photoQueries)
            let (session, tail) = try await signInAndDownload(device)
            // Three photos uploaded from the device, then a fresh device downloads their properties.
            let checkID = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5000"))
            let check = try #require(try await device.store.read(checkID).first?.values["ID"])
            var ids: [String] = []
            for size in [40_000, 50_000, 60_000] {
                ids.append(
                    try await device.store.takePhoto(ImageFixtures.jpeg(scanBytes: size), values: ["CheckID": check]))
            }
            let report = try await device.store.upload(using: session.authorized, allowOnBehalf: true)
            #expect(report.isComplete, "\(report.archived.map(\.message))")
            #expect(try await device.store.photoCacheBytes() > 0, "uploaded photos stay as cache")

            let other = try await makeDevice(server, definingQueries: Self.photoQueries)
            let (otherSession, _) = try await signInAndDownload(other)
            #expect(try await other.store.read("CheckPhotos").count == 3)
            #expect(try await other.store.photoCacheBytes() == 0, "properties only")
            await #expect(throws: OfflineError.self) { try await other.store.photo(ids[0], using: nil) }
            try await other.store.setPhotoCacheLimit(120_000)
            for id in ids { _ = try await other.store.photo(id, using: otherSession.authorized) }
            // The oldest opened went to keep the cache within its bound; the newest two stay.
            let kept = try await other.store.photoCacheBytes()
            #expect(kept <= 120_000 && kept > 0, "\(kept)")
            #expect(try await other.store.photo(ids[2], using: nil).bytes.count > 60_000)
            await #expect(throws: OfflineError.self) { try await other.store.photo(ids[0], using: nil) }
            return server
        }
    }

    /// A photo downloaded while its store was removed and a new one opened under another key is not kept: neither
    /// in the new store nor as a file sealed under the old key.
    @Test func aPhotoDownloadedWhileTheStoreChangedIsNotKept() async throws {
        try await withServer { server in
            let device = try await makeDevice(server, definingQueries: Self.photoQueries)
            let (session, tail) = try await signInAndDownload(device)
            let checkID = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5000"))
            let check = try #require(try await device.store.read(checkID).first?.values["ID"])
            let id = try await device.store.takePhoto(ImageFixtures.jpeg(scanBytes: 40_000), values: ["CheckID": check])
            #expect(try await device.store.upload(using: session.authorized, allowOnBehalf: true).isComplete)

            let other = try await makeDevice(server, definingQueries: Self.photoQueries)
            let (otherSession, _) = try await signInAndDownload(other)
            let store = other.store
            let user = OfflineUser(name: "alice", signingKey: P256.Signing.PrivateKey())
            // The transport removes the store and opens a new one, under a new key, while the bytes are on the way.
            let transport = HookedTransport(AsyncHTTPClientTransport()) { request in
                guard request.url.absoluteString.hasSuffix("/$value") else { return }
                try? await store.removeFiles()
                try? await store.open(as: user, key: SymmetricKey(size: .bits256))
            }
            let client = BatonClient(serverURL: server.url, transport: transport)
            let authorized = AuthorizedSession(
                client: client, configuration: otherSession.authorized.configuration,
                oauth: OAuthClient(
                    metadata: try await client.discover().1, clientID: otherSession.authorized.configuration.clientID,
                    transport: transport),
                tokens: OAuthTokens(
                    accessToken: try await otherSession.authorized.accessToken(), refreshToken: nil,
                    expiresAt: Date().addingTimeInterval(300)))
            await #expect(throws: OfflineError.self) { try await store.photo(id, using: authorized) }
            #expect(try await store.photoCacheBytes() == 0)
            let media = store.url.path + "-media"
            #expect(((try? FileManager.default.contentsOfDirectory(atPath: media)) ?? []).isEmpty)
            return server
        }
    }

    /// A discarded user's photo goes into the backup with its bytes, and a change to its check queued after it
    /// waits for it.
    @Test func aDiscardedPhotoIsInTheBackupAndLaterCheckChangesWaitForIt() async throws {
        try await withServer { server in
            let device = try await makeDevice(server, definingQueries: Self.photoQueries)
            let (session, tail) = try await signInAndDownload(device)
            let checkID = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5000"))
            let key = try #require(try await device.store.read(checkID).first?.values["ID"])
            _ = try await device.store.upload(using: session.authorized, allowOnBehalf: true)

            // A photo, then a correction of its check: the correction goes after the photo.
            let photoID = try await device.store.takePhoto(ImageFixtures.png(), values: ["CheckID": key])
            try await device.store.update(checkID, values: ["Remarks": .string("photographed")])
            #expect(
                try await device.store.nextChunk(
                    for: try await device.store.requireUser(), allowOnBehalf: true,
                    chunkSize: 10
                ).isEmpty, "the check's correction waits for the photo")
            let report = try await device.store.upload(using: session.authorized, allowOnBehalf: true)
            #expect(report.isComplete, "\(report.archived.map(\.message))")
            #expect(report.uploaded.map(\.entityID) == [photoID, checkID])

            // Another photo, discarded: its bytes are in the backup, and leave the store.
            let jpeg = ImageFixtures.jpeg()
            let discarded = try await device.store.takePhoto(jpeg, values: ["CheckID": key])
            let photo = try await device.store.photo(discarded, using: nil)
            let backup = device.directory.appendingPathComponent("discarded.sealed")
            let storeKey = SymmetricKey(data: try #require(session.storeKey))
            let count = try await device.store.discardPendingChanges(
                of: session.user.serverUserID ?? "", backupTo: backup, key: storeKey)
            #expect(count == 1)
            let opened = try AES.GCM.open(
                AES.GCM.SealedBox(combined: try Data(contentsOf: backup)), using: storeKey,
                authenticating: Data("baton-discarded-v1".utf8))
            let entries = try #require(try JSONSerialization.jsonObject(with: opened) as? [[String: Any]])
            #expect(entries.first?["media"] as? String == photo.sha256)
            let bytes = try #require(Data(base64Encoded: entries.first?["photo"] as? String ?? ""))
            #expect(Array(bytes) == photo.bytes)
            await #expect(throws: OfflineError.self) { try await device.store.photo(discarded, using: nil) }
            return server
        }
    }
}

/// A transport that runs `hook` before each request it forwards.
final class HookedTransport: HTTPTransport {
    let inner: any HTTPTransport
    let hook: @Sendable (ClientRequest) async -> Void

    init(_ inner: any HTTPTransport, hook: @escaping @Sendable (ClientRequest) async -> Void) {
        self.inner = inner
        self.hook = hook
    }

    func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
        await hook(request)
        return try await inner.send(request)
    }
}
