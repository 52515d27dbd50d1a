import BatonClient
import BatonFlows
import BatonOData
import BatonSecureStore
import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import GRDB
import Testing

@testable import BatonOffline
@testable import BatonServer

/// The shift handover (docs/ARCHITECTURE.md), end to end on real components: a live server on loopback, real
/// secure stores, the network cut by stopping the server.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct HandoverTests {
    static let alicePassword = "blue-harbour-1234"
    static let bobPassword = "green-meadow-5678"

    static let alice = TestTablet.User("alice", displayName: "Alice", password: alicePassword, passcode: "alice-pass-1")
    static let bob = TestTablet.User("bob", displayName: "Bob", password: bobPassword, passcode: "bob-pass-12")

    /// The shared tablet (``TestTablet``, alice's and bob's sign-ins scripted) with a transport that fails on cue.
    struct Device {
        let tablet: TestTablet
        let transport: FaultyTransport

        var directory: URL { tablet.directory }
        var presenter: ScriptedPresenter { tablet.presenter }
        var manager: OnboardingSessionManager { tablet.manager }
        var store: OfflineStore { tablet.store }

        func open(_ session: OnboardingSession) async throws { try await tablet.openStore(as: session) }
    }

    func makeDevice(_ server: LiveServer, definingQueries: [DefiningQuery] = TestTablet.aircraftAndChecks)
        async throws -> Device
    {
        let transport = FaultyTransport(AsyncHTTPClientTransport())
        let tablet = try TestTablet(
            server: server.url, users: [Self.alice, Self.bob], definingQueries: definingQueries, transport: transport)
        return Device(tablet: tablet, transport: transport)
    }

    /// Signs the device's first user in, opens the store as theirs and downloads: their session and the tail
    /// number of an aircraft the tablet now keeps.
    func signInAndDownload(_ device: Device) async throws -> (OnboardingSession, tail: String) {
        let session = try await device.manager.open()
        try await device.open(session)
        _ = try await device.store.download(using: session.authorized)
        let tail = try #require(try await device.store.read("Aircraft").first?.values["TailNumber"]?.text)
        return (session, tail)
    }

    /// Starts a server with alice and bob and a few aircraft.
    func withServer(
        settings: [String: String] = [:], dataService: DataServiceConfiguration = DataServiceConfiguration(),
        _ body: (LiveServer) async throws -> LiveServer
    ) async throws {
        let server = try await LiveServer.start(settings: settings, dataService: dataService)
        // Alice leads the shift: the seeded checks are final and someone else's, which only a supervisor changes.
        try await server.addUser("alice", displayName: "Alice", role: .supervisor, password: Self.alicePassword)
        try await server.addUser("bob", displayName: "Bob", password: Self.bobPassword)
        _ = try await server.server.seed(aircraft: 4, checks: 6)
        var last = server
        do {
            last = try await body(server)
        } catch {
            await last.shutDown()
            throw error
        }
        await last.shutDown()
    }

    func check(_ tail: String, fuel: String) -> [String: PrimitiveValue] {
        [
            "ID": .guid(UUID()), "TailNumber": .string(tail), "FuelKg": .decimal(Decimal(string: fuel) ?? 0),
            "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15),
            "Status": .string("final"),
        ]
    }

    /// Reads an entity from the server as an admin would.
    func serverEntity(_ server: LiveServer, _ id: String, session: OnboardingSession) async throws -> [String: Any] {
        let response = try await session.authorized.send(
            ClientRequest(url: try #require(URL(string: server.url.absoluteString + "/odata/" + id))))
        #expect(response.status == 200, "\(id): HTTP \(response.status)")
        return try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any] ?? [:]
    }

    @Test func aliceOfflineThenBobUploadsOnHerBehalf() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            let alice = try await device.manager.open()
            let bob = try await device.manager.addUser()
            await device.presenter.append([.pick("Alice"), .passcode("alice-pass-1")])
            let aliceAgain = try await device.manager.switchUser()
            #expect(aliceAgain.user.onboardingID == alice.user.onboardingID)
            try await device.open(aliceAgain)
            let progress = await device.store.progress()
            let downloaded = try await device.store.download(using: aliceAgain.authorized)
            #expect(downloaded.updated == 4 + 6)
            var events = progress.makeAsyncIterator()
            #expect(await events.next() == .download(query: "aircraft", entities: 4, pages: 1))
            #expect(await events.next() == .download(query: "checks", entities: 10, pages: 2))
            let tail = try #require(try await device.store.read("Aircraft").first?.values["TailNumber"]?.text)

            // The network goes away; alice records a check and locks at shift end.
            await server.stop()
            let aliceCheck = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5200"))
            let local = try #require(try await device.store.read(aliceCheck).first)
            #expect(local.pending)
            #expect(local.values["CheckedBy"] == .string("alice"))
            #expect(try await device.store.pendingCounts() == ["alice": 1])
            await device.manager.lock()
            await device.store.close()

            // Bob signs in with no network and sees alice's check; he records his own.
            await device.presenter.append([.pick("Bob"), .passcode("bob-pass-12")])
            let bobSession = try await device.manager.switchUser()
            #expect(bobSession.user.onboardingID == bob.user.onboardingID)
            try await device.open(bobSession)
            #expect(try await device.store.read(aliceCheck).first?.values["FuelKg"] == .decimal(5200))
            let bobCheck = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "6100.5"))
            let offline = await #expect(throws: OfflineError.self) {
                try await device.store.upload(using: bobSession.authorized, allowOnBehalf: true)
            }
            #expect(offline?.code == .offline)
            #expect(try await device.store.pendingCounts() == ["alice": 1, "bob": 1])

            // The network comes back: bob syncs, alice's change goes up on her behalf.
            let back = try await server.restarted()
            let report = try await device.store.upload(
                using: bobSession.authorized,
                allowOnBehalf: bobSession.settings.sharedDevices.uploadPendingChangesOfPreviousUser)
            #expect(report.isComplete)
            #expect(report.uploadedByAuthor == ["alice": 1, "bob": 1])
            #expect(try await device.store.pendingEntries().isEmpty)
            let onServer = try await serverEntity(back, aliceCheck, session: bobSession)
            #expect(onServer["CheckedBy"] as? String == "alice")
            #expect(onServer["UploadedBy"] as? String == "bob")
            #expect((onServer["FuelKg"] as? NSNumber)?.doubleValue == 5200)
            let bobsOnServer = try await serverEntity(back, bobCheck, session: bobSession)
            #expect(bobsOnServer["CheckedBy"] as? String == "bob")
            // The device has the server's ETags at once, and its server-kept values after the download.
            let uploaded = try #require(try await device.store.read(aliceCheck).first)
            #expect(!uploaded.pending)
            #expect(uploaded.etag != nil)
            _ = try await device.store.download(using: bobSession.authorized)
            let synced = try #require(try await device.store.read(aliceCheck).first)
            #expect(synced.values["UploadedBy"] == .string("bob"))
            #expect(synced.values["CheckedBy"] == .string("alice"))
            #expect(synced.etag == uploaded.etag)
            return back
        }
    }

    /// Two people update one check on one tablet, both offline: the updates upload in the order they were made,
    /// each attributed and signed by its author, and the audit log keeps both attributions.
    @Test func twoOfflineUpdatesOfOneCheckByTwoUsersUploadInOrder() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            let alice = try await device.manager.open()
            let bob = try await device.manager.addUser()
            try await device.open(bob)
            _ = try await device.store.download(using: bob.authorized)
            let tail = try #require(try await device.store.read("Aircraft").first?.values["TailNumber"]?.text)
            let id = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5200"))
            _ = try await device.store.upload(using: bob.authorized, allowOnBehalf: true)

            // The network goes; bob corrects his check's remarks and locks; alice (a supervisor) its fuel.
            await server.stop()
            try await device.store.update(id, values: ["Remarks": .string("valve cap replaced")])
            await device.manager.lock()
            await device.presenter.append([.pick("Alice"), .passcode("alice-pass-1")])
            let aliceAgain = try await device.manager.switchUser()
            #expect(aliceAgain.user.onboardingID == alice.user.onboardingID)
            try await device.open(aliceAgain)
            try await device.store.update(id, values: ["FuelKg": .decimal(5350)])
            #expect(try await device.store.pendingEntries().map(\.author) == ["bob", "alice"])

            // Alice syncs when the network is back: bob's update on his behalf, then hers, in that order.
            let back = try await server.restarted()
            let report = try await device.store.upload(using: aliceAgain.authorized, allowOnBehalf: true)
            #expect(report.isComplete, "\(report.archived.map(\.message))")
            #expect(report.uploaded.map(\.author) == ["bob", "alice"])
            let onServer = try await serverEntity(back, id, session: aliceAgain)
            #expect(onServer["Remarks"] as? String == "valve cap replaced")
            #expect((onServer["FuelKg"] as? NSNumber)?.doubleValue == 5350)
            #expect(onServer["CheckedBy"] as? String == "alice" && onServer["UploadedBy"] as? String == "alice")
            // Newest first, in the order the log recorded them.
            let updates = try await back.server.audit.entries(limit: 1_000)
                .filter { $0.action == "entity-updated" && $0.subject == id }.reversed()
            #expect(updates.map(\.actor) == ["bob", "alice"])
            #expect(updates.map(\.detail) == ["uploaded by alice", "uploaded by alice"])
            return back
        }
    }

    @Test func withoutOnBehalfUploadAlicesChangeWaitsForHer() async throws {
        try await withServer(settings: ["shared-devices.upload-pending-changes-of-previous-user": "false"]) { server in
            let device = try await makeDevice(server)
            let (_, tail) = try await signInAndDownload(device)
            let aliceCheck = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5200"))

            let bob = try await device.manager.addUser()
            try await device.open(bob)
            #expect(bob.settings.sharedDevices.uploadPendingChangesOfPreviousUser == false)
            let bobCheck = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "4100"))
            let report = try await device.store.upload(
                using: bob.authorized, allowOnBehalf: bob.settings.sharedDevices.uploadPendingChangesOfPreviousUser)
            #expect(report.uploadedByAuthor == ["bob": 1])
            #expect(report.waiting.map(\.entityID) == [aliceCheck])
            #expect(!report.isComplete)
            #expect(try await serverEntity(server, bobCheck, session: bob)["CheckedBy"] as? String == "bob")

            // Alice signs in later: her change goes up as hers.
            await device.presenter.append([.pick("Alice"), .passcode("alice-pass-1")])
            let aliceLater = try await device.manager.switchUser()
            try await device.open(aliceLater)
            let later = try await device.store.upload(using: aliceLater.authorized, allowOnBehalf: false)
            #expect(later.uploadedByAuthor == ["alice": 1])
            #expect(later.isComplete)
            let onServer = try await serverEntity(server, aliceCheck, session: aliceLater)
            #expect(onServer["UploadedBy"] as? String == "alice")
            return server
        }
    }

    /// The server refuses a photo on its author's behalf (its policy changed after the tablet last heard of it): the
    /// photo waits for alice, and the upload says so — it is not reported complete.
    @Test func aPhotoRefusedOnItsAuthorsBehalfIsReportedWaiting() async throws {
        try await withServer(settings: ["shared-devices.upload-pending-changes-of-previous-user": "false"]) { server in
            let device = try await makeDevice(server)
            let (alice, tail) = try await signInAndDownload(device)
            let aliceCheck = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5200"))
            #expect(try await device.store.upload(using: alice.authorized, allowOnBehalf: false).isComplete)
            guard case .guid(let checkID)? = try await device.store.read(aliceCheck).first?.values["ID"] else {
                Issue.record("The check has no id.")
                return server
            }
            let photo = try await device.store.takePhoto(ImageFixtures.png(), values: ["CheckID": .guid(checkID)])

            let bob = try await device.manager.addUser()
            try await device.open(bob)
            // A tablet that still believes on-behalf uploads are allowed.
            let report = try await device.store.upload(using: bob.authorized, allowOnBehalf: true)
            #expect(report.uploaded.isEmpty && report.archived.isEmpty)
            #expect(report.waiting.map(\.entityID) == [photo])
            #expect(!report.isComplete)
            #expect(try await device.store.pendingEntries().map(\.entityID) == [photo])
            return server
        }
    }

    @Test func aLostAnswerIsRetriedAndAppliesExactlyOnce() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            let (alice, tail) = try await signInAndDownload(device)
            let created = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5000"))
            try await device.store.update(created, values: ["FuelKg": .decimal(5100)])
            // The server applies the batch, but the answer is lost.
            device.transport.loseNextResponses(matching: "$batch")
            await #expect(throws: OfflineError.self) {
                try await device.store.upload(using: alice.authorized, allowOnBehalf: true)
            }
            #expect(try await device.store.pendingEntries().count == 2)
            let report = try await device.store.upload(using: alice.authorized, allowOnBehalf: true)
            #expect(report.uploaded.count == 2)
            #expect(report.isComplete)
            // One entity, with the update applied once on top of the create.
            let count = try await alice.authorized.send(
                ClientRequest(
                    url: try #require(
                        URL(
                            string: server.url.absoluteString
                                + "/odata/PreflightChecks/$count?$filter=FuelKg%20eq%205100")
                    )))
            #expect(String(decoding: count.body, as: UTF8.self) == "1")
            let onServer = try await serverEntity(server, created, session: alice)
            #expect((onServer["FuelKg"] as? NSNumber)?.doubleValue == 5100)
            return server
        }
    }

    /// A server busy with the user's other changes answers the upload 429 (the user's share of the writers is
    /// taken): the device waits as `Retry-After` says and sends the batch again; the change applies once and
    /// nothing goes to the error archive.
    @Test func aBusyServerIsWaitedForAndTheChangeAppliesOnce() async throws {
        var limits = DataServiceConfiguration()
        limits.maximumConcurrentChangesPerUser = 1
        try await withServer(dataService: limits) { server in
            let device = try await makeDevice(server)
            let (alice, tail) = try await signInAndDownload(device)
            let created = try await device.store.create(in: "PreflightChecks", values: check(tail, fuel: "5000"))
            let data = server.server.data
            // The test holds the writers' turn until it lets go; alice's other change waits for it in her one slot.
            let gate = Gate()
            defer { gate.open() }
            let holder = Task { try await data.store.write { _ in gate.hold() } }
            try await gate.entered()
            let other = Task {
                try await alice.authorized.send(
                    ClientRequest(
                        method: "POST",
                        url: try #require(URL(string: server.url.absoluteString + "/odata/PreflightChecks")),
                        headers: [("Content-Type", "application/json")],
                        body: Array(
                            #"{"ID":"\#(UUID())","TailNumber":"\#(tail)","FuelKg":1,"TyrePressureMainPsi":1,"TyrePressureNosePsi":1,"OilQuarts":1,"Status":"draft"}"#
                                .utf8)))
            }
            try await eventually { data.changes.inFlight("alice") == 1 }
            let upload = Task { try await device.store.upload(using: alice.authorized, allowOnBehalf: true) }
            try await eventually { data.changes.refused > 0 }
            gate.open()
            let report = try await upload.value
            #expect(report.uploaded.map(\.entityID) == [created])
            #expect(report.archived.isEmpty && report.isComplete)
            #expect(try await other.value.status == 201)
            try await holder.value
            let onServer = try await serverEntity(server, created, session: alice)
            #expect((onServer["FuelKg"] as? NSNumber)?.doubleValue == 5000)
            return server
        }
    }

    /// `Retry-After` in seconds, from 1 to 10; anything else waits 1 s.
    @Test func aBusyAnswerIsWaitedForAsItSaysWithinBounds() {
        func wait(_ value: String?) -> Int {
            OfflineStore.retryAfter(ClientResponse(status: 429, headers: value.map { [("Retry-After", $0)] } ?? []))
        }
        #expect(wait("3") == 3)
        #expect(wait(" 2 ") == 2)
        #expect(wait("0") == 1)
        #expect(wait("3600") == 10)
        #expect(wait("Wed, 21 Oct 2026 07:28:00 GMT") == 1)
        #expect(wait(nil) == 1)
        #expect(OfflineStore.retryAfter(ClientResponse(status: 429, headers: [("retry-after", "4")])) == 4)
    }

    @Test func aConflictGoesToTheArchiveAndOthersGoOn() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            let alice = try await device.manager.open()
            try await device.open(alice)
            _ = try await device.store.download(using: alice.authorized)
            let checks = try await device.store.read("PreflightChecks?$orderby=ID")
            let contested = checks[0].id
            let other = checks[1].id
            // Someone changes the check on the server after the download.
            let patch = try await alice.authorized.send(
                ClientRequest(
                    method: "PATCH", url: try #require(URL(string: server.url.absoluteString + "/odata/" + contested)),
                    headers: [("Content-Type", "application/json"), ("If-Match", "*")],
                    body: Array(#"{"Remarks":"changed on the server"}"#.utf8)))
            #expect(patch.status == 200 || patch.status == 204)
            try await device.store.update(contested, values: ["Remarks": .string("changed on the device")])
            try await device.store.update(contested, values: ["OilQuarts": .decimal(12)])
            try await device.store.update(other, values: ["Remarks": .string("fine")])

            let report = try await device.store.upload(using: alice.authorized, allowOnBehalf: true)
            #expect(report.uploaded.map(\.entityID) == [other])
            #expect(report.archived.map(\.entry.entityID) == [contested])
            #expect(report.archived.first?.status == 412)
            #expect(report.waiting.map(\.entityID) == [contested])
            #expect(!report.isComplete)
            let archived = try #require(try await device.store.archivedEntries().first)
            #expect(archived.serverVersion?["Remarks"]?.stringValue == "changed on the server")
            #expect(try await device.store.pendingEntries().count == 1)
            return server
        }
    }

    @Test func eachArchiveResolution() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            let alice = try await device.manager.open()
            try await device.open(alice)
            _ = try await device.store.download(using: alice.authorized)
            let ids = try await device.store.read("PreflightChecks?$orderby=ID&$top=3").map(\.id)
            #expect(ids.count == 3)
            for id in ids {
                let patch = try await alice.authorized.send(
                    ClientRequest(
                        method: "PATCH", url: try #require(URL(string: server.url.absoluteString + "/odata/" + id)),
                        headers: [("Content-Type", "application/json"), ("If-Match", "*")],
                        body: Array(#"{"Remarks":"server"}"#.utf8)))
                #expect(patch.status == 200 || patch.status == 204)
                try await device.store.update(id, values: ["Remarks": .string("device")])
                try await device.store.update(id, values: ["OilQuarts": .decimal(12)])
            }
            let first = try await device.store.upload(using: alice.authorized, allowOnBehalf: true)
            #expect(first.archived.count == 3)
            #expect(first.waiting.count == 3)
            var archive = try await device.store.archivedEntries()

            // Side by side: the server's version and the device's, field by field.
            let fields = try await device.store.conflict(try #require(archive.first { $0.entry.entityID == ids[0] }))
            let type = try #require(try ServiceModel.aircraftChecks.entityType(named: "PreflightCheck"))
            #expect(fields.map(\.property) == type.properties.map(\.name))
            let remarksField = try #require(fields.first { $0.property == "Remarks" })
            #expect(remarksField.server == .string("server") && remarksField.mine == .string("device"))
            #expect(remarksField.changedHere && remarksField.differs)
            // The oil change waits behind the archived one: the device shows it, the server does not have it.
            let oil = try #require(fields.first { $0.property == "OilQuarts" })
            #expect(oil.mine == .decimal(12) && oil.server != .decimal(12) && !oil.changedHere)
            let tail = try #require(fields.first { $0.property == "TailNumber" })
            #expect(!tail.differs && !tail.changedHere && tail.server != nil)

            // Resend: the device's change wins, and the change queued behind it follows.
            try await device.store.resend(try #require(archive.first { $0.entry.entityID == ids[0] }))
            #expect(try await device.store.archivedEntries().count == 2)
            // Take the server's version: the local entity becomes the server's; the later change still goes.
            try await device.store.takeServerVersion(try #require(archive.first { $0.entry.entityID == ids[1] }))
            #expect(try await device.store.read(ids[1]).first?.values["Remarks"] == .string("server"))
            // Edit: a new value over the server's version.
            archive = try await device.store.archivedEntries()
            #expect(archive.map(\.entry.entityID) == [ids[2]])
            try await device.store.edit(try #require(archive.first), values: ["Remarks": .string("merged")])

            let second = try await device.store.upload(using: alice.authorized, allowOnBehalf: true)
            #expect(second.isComplete, "\(second.archived.map(\.message))")
            #expect(second.uploaded.count == 5)
            let remarks = try await [ids[0], ids[1], ids[2]].asyncMap { id in
                try await serverEntity(server, id, session: alice)["Remarks"] as? String
            }
            #expect(remarks == ["device", "server", "merged"])
            for id in ids {
                #expect((try await serverEntity(server, id, session: alice)["OilQuarts"] as? NSNumber)?.intValue == 12)
            }
            return server
        }
    }

    /// A refusal that is no conflict (403: someone else's final check) still shows and takes the server's version:
    /// the change goes, and the device's copy is the server's again.
    @Test func takingTheServersVersionOfARefusalKeepsTheEntity() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            _ = try await device.manager.open()
            let bob = try await device.manager.addUser()
            try await device.open(bob)
            _ = try await device.store.download(using: bob.authorized)
            let seeded = try #require(
                try await device.store.read("PreflightChecks?$filter=Status eq 'final'&$top=1").first)
            try await device.store.update(seeded.id, values: ["Remarks": .string("not bob's to change")])
            let report = try await device.store.upload(using: bob.authorized, allowOnBehalf: true)
            let refused = try #require(report.archived.first)
            #expect(refused.status == 403 && refused.serverVersion != nil)
            // Side by side: the remark bob typed against the server's.
            let remarks = try #require(try await device.store.conflict(refused).first { $0.property == "Remarks" })
            #expect(remarks.mine == .string("not bob's to change") && remarks.server == seeded.values["Remarks"])
            try await device.store.takeServerVersion(refused)
            #expect(try await device.store.archivedEntries().isEmpty)
            #expect(try await device.store.read(seeded.id).first?.values["Remarks"] == seeded.values["Remarks"])
            return server
        }
    }

    @Test func deltaDownloadAppliesChangesAndDeletions() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            let alice = try await device.manager.open()
            try await device.open(alice)
            let first = try await device.store.download(using: alice.authorized)
            #expect(first.updated == 10)
            let ids = try await device.store.read("PreflightChecks?$orderby=ID").map(\.id)
            func send(_ method: String, _ id: String, _ body: String?) async throws -> Int {
                try await alice.authorized.send(
                    ClientRequest(
                        method: method, url: try #require(URL(string: server.url.absoluteString + "/odata/" + id)),
                        headers: [("Content-Type", "application/json"), ("If-Match", "*")],
                        body: Array((body ?? "").utf8))
                ).status
            }
            #expect(try await send("DELETE", ids[0], nil) == 204)
            #expect(try await send("PATCH", ids[1], #"{"Remarks":"rechecked"}"#) < 300)
            // A local pending change is kept on top of the server's version of the same entity.
            #expect(try await send("PATCH", ids[2], #"{"Remarks":"server side"}"#) < 300)
            try await device.store.update(ids[2], values: ["Remarks": .string("mine")])

            let delta = try await device.store.download(using: alice.authorized)
            #expect(delta.removed == 1)
            #expect(delta.keptLocal == 1)
            #expect(delta.updated == 1)
            #expect(try await device.store.read(ids[0]).isEmpty)
            #expect(try await device.store.read(ids[1]).first?.values["Remarks"] == .string("rechecked"))
            #expect(try await device.store.read(ids[2]).first?.values["Remarks"] == .string("mine"))
            #expect(try await device.store.count("PreflightChecks") == 5)
            // Nothing new: an empty delta.
            let quiet = try await device.store.download(using: alice.authorized)
            #expect(quiet.updated == 0 && quiet.removed == 0)
            return server
        }
    }

    /// A tablet keeping only the heavy checks, another recording checks: a delta cut off after its first page
    /// resumes with its next page (not from its old token, which the entities applied have outgrown), and once
    /// a check it received leaves the filter, it goes — the tablet holds exactly the server's heavy checks. The
    /// light check the other tablet recorded is never sent to it, not even as a removal.
    ///
    /// `olderClient`: the cut-short delta was an older client's, which kept its old token (and no `exact` mark);
    /// the next delta then names no device and brings every removal.
    @Test(arguments: [false, true]) func aDeltaCutShortResumesAndTheTabletKeepsExactlyItsFilter(olderClient: Bool)
        async throws
    {
        try await withServer { server in
            let heavy = "PreflightChecks?$filter=FuelKg gt 150000"
            let keeper = try await makeDevice(
                server,
                definingQueries: [DefiningQuery(name: "heavy", url: heavy.replacingOccurrences(of: " ", with: "%20"))])
            let recorder = try await makeDevice(server)
            let alice = try await keeper.manager.open()
            try await keeper.open(alice)
            _ = try await keeper.store.download(using: alice.authorized)
            let (other, tail) = try await signInAndDownload(recorder)
            var recorded: [String] = []
            for fuel in ["150001", "150002", "150003", "100"] {
                recorded.append(try await recorder.store.create(in: "PreflightChecks", values: check(tail, fuel: fuel)))
            }
            #expect(try await recorder.store.upload(using: other.authorized, allowOnBehalf: true).isComplete)

            // The answer of the delta's second page is lost: the first page's check stays applied.
            let oldLink = try await keeper.store.read { db in
                try String.fetchOne(db, sql: #"SELECT link FROM "$deltaLinks""#)
            }
            keeper.transport.loseNextResponses(matching: "skiptoken", count: 1)
            await #expect(throws: OfflineError.self) {
                _ = try await keeper.store.download(using: alice.authorized, pageSize: 1)
            }
            if olderClient {
                try await keeper.store.write { db in
                    try db.execute(sql: #"UPDATE "$deltaLinks" SET link = ?, exact = 0"#, arguments: [oldLink])
                }
            }
            let first = try #require(try await keeper.store.read("PreflightChecks").first)
            #expect(recorded.contains(first.id))
            // That check leaves the filter on the server.
            try await recorder.store.update(first.id, values: ["FuelKg": .decimal(200)])
            #expect(try await recorder.store.upload(using: other.authorized, allowOnBehalf: true).isComplete)

            for _ in 0..<2 { _ = try await keeper.store.download(using: alice.authorized, pageSize: 1) }
            let kept = Set(try await keeper.store.read("PreflightChecks").map(\.id))
            let response = try await alice.authorized.send(
                ClientRequest(
                    url: try #require(
                        URL(
                            string: server.url.absoluteString + "/odata/"
                                + heavy.replacingOccurrences(of: " ", with: "%20") + "&$select=ID"))))
            let rows = try #require(try JSONValue(parsing: response.body)["value"]?.arrayValue)
            let onServer = Set(rows.compactMap { $0["ID"]?.stringValue }.map { "PreflightChecks(\($0))" })
            #expect(onServer.count == 2)
            #expect(kept == onServer)
            return server
        }
    }

    /// A first download cut short keeps the pages it applied; when the server deletes one of those entities before
    /// the download starts over, the full read does not bring it and no delta from the new snapshot reports it.
    @Test func aFirstDownloadCutShortKeepsNothingTheServerDeletedSince() async throws {
        try await withServer { server in
            let device = try await makeDevice(
                server, definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")])
            let alice = try await device.manager.open()
            try await device.open(alice)
            device.transport.loseNextResponses(matching: "skiptoken", count: 1)
            await #expect(throws: OfflineError.self) {
                _ = try await device.store.download(using: alice.authorized, pageSize: 2)
            }
            let partial = try await device.store.read("PreflightChecks").map(\.id)
            #expect(partial.count == 2)
            let deleted = try await alice.authorized.send(
                ClientRequest(
                    method: "DELETE",
                    url: try #require(URL(string: server.url.absoluteString + "/odata/" + partial[0])),
                    headers: [("If-Match", "*")]))
            #expect(deleted.status == 204)
            let mine = try await device.store.create(
                in: "PreflightChecks",
                values: check(
                    try #require(try await device.store.read("PreflightChecks").first?.values["TailNumber"]?.text),
                    fuel: "5000"))

            let report = try await device.store.download(using: alice.authorized, pageSize: 2)
            #expect(report.removed == 1)
            let held = Set(try await device.store.read("PreflightChecks").map(\.id))
            let response = try await alice.authorized.send(
                ClientRequest(
                    url: try #require(URL(string: server.url.absoluteString + "/odata/PreflightChecks?$select=ID"))))
            let rows = try #require(try JSONValue(parsing: response.body)["value"]?.arrayValue)
            let onServer = Set(rows.compactMap { $0["ID"]?.stringValue }.map { "PreflightChecks(\($0))" })
            #expect(onServer.count == 5)
            // What the server has, and the check recorded here and not uploaded yet.
            #expect(held == onServer.union([mine]))
            return server
        }
    }

    /// Two defining queries read one set: a check that leaves one of them but stays in the other stays on the tablet,
    /// also when the query it stays in comes first (the order in which the other's "left" removal, applied last,
    /// used to delete it); one that leaves both goes. The holds say who keeps what, and a wipe forgets them.
    @Test func aCheckThatLeavesOneDefiningQueryStaysWhileAnotherHoldsIt() async throws {
        try await withServer { server in
            let recorder = try await makeDevice(server)
            let (other, tail) = try await signInAndDownload(recorder)
            let stays = try await recorder.store.create(in: "PreflightChecks", values: check(tail, fuel: "150001"))
            let goes = try await recorder.store.create(in: "PreflightChecks", values: check(tail, fuel: "150002"))
            #expect(try await recorder.store.upload(using: other.authorized, allowOnBehalf: true).isComplete)

            // The query the check stays in comes first: its delta brings the new version before the other's removal.
            let keeper = try await makeDevice(
                server,
                definingQueries: [
                    DefiningQuery(name: "tail", url: "PreflightChecks?$filter=TailNumber%20eq%20'\(tail)'"),
                    DefiningQuery(name: "heavy", url: "PreflightChecks?$filter=FuelKg%20gt%20150000"),
                ])
            let alice = try await keeper.manager.open()
            try await keeper.open(alice)
            _ = try await keeper.store.download(using: alice.authorized)
            #expect(try await keeper.store.read(stays).count == 1)
            try await recorder.store.update(stays, values: ["FuelKg": .decimal(100)])
            try await recorder.store.update(goes, values: ["FuelKg": .decimal(100), "TailNumber": .string("D-NONE")])
            let upload = try await recorder.store.upload(using: other.authorized, allowOnBehalf: true)
            #expect(upload.isComplete)

            _ = try await keeper.store.download(using: alice.authorized)
            #expect(try await keeper.store.read(stays).first?.values["FuelKg"] == .decimal(100))
            #expect(try await keeper.store.read(goes).isEmpty)
            func holds(_ id: String) async throws -> [String] {
                try await keeper.store.read { db in
                    try String.fetchAll(
                        db, sql: #"SELECT query FROM "$held" WHERE entityID = ? ORDER BY query"#, arguments: [id])
                }
            }
            #expect(try await holds(stays) == ["tail"])
            #expect(try await holds(goes).isEmpty)
            try await keeper.store.wipe()
            #expect(
                try await keeper.store.read { db in try Int.fetchOne(db, sql: #"SELECT count(*) FROM "$held""#) } == 0)
            return server
        }
    }

    @Test func anExpiredDeltaLinkStartsOverAndDropsWhatTheServerNoLongerHas() async throws {
        var retention = DataServiceConfiguration()
        retention.deltaRetention = 1
        let server = try await LiveServer.start(dataService: retention)
        defer { Task { await server.shutDown() } }
        try await server.addUser("alice", displayName: "Alice", role: .supervisor, password: Self.alicePassword)
        _ = try await server.server.seed(aircraft: 4, checks: 6)
        let device = try await makeDevice(server)
        let alice = try await device.manager.open()
        try await device.open(alice)
        _ = try await device.store.download(using: alice.authorized)
        let ids = try await device.store.read("PreflightChecks?$orderby=ID").map(\.id)
        func send(_ method: String, _ id: String, _ body: String?) async throws -> Int {
            try await alice.authorized.send(
                ClientRequest(
                    method: method, url: try #require(URL(string: server.url.absoluteString + "/odata/" + id)),
                    headers: [("Content-Type", "application/json"), ("If-Match", "*")], body: Array((body ?? "").utf8))
            ).status
        }
        #expect(try await send("DELETE", ids[0], nil) == 204)
        #expect(try await send("PATCH", ids[1], #"{"Remarks":"rechecked"}"#) < 300)
        try await device.store.update(ids[4], values: ["Remarks": .string("mine, not uploaded")])
        // Past the retention window, the next deletion purges the first one's tombstone: the device's delta
        // link can no longer say that ids[0] went.
        try await Task.sleep(for: .milliseconds(1500))
        #expect(try await send("DELETE", ids[3], nil) == 204)

        let report = try await device.store.download(using: alice.authorized)
        #expect(try await device.store.read(ids[0]).isEmpty, "a deletion the expired link could not report")
        #expect(try await device.store.read(ids[3]).isEmpty)
        #expect(try await device.store.read(ids[1]).first?.values["Remarks"] == .string("rechecked"))
        #expect(try await device.store.read(ids[4]).first?.values["Remarks"] == .string("mine, not uploaded"))
        #expect(try await device.store.count("PreflightChecks") == 4)
        #expect(report.removed >= 2)
        // The new delta link works: nothing more to bring.
        let quiet = try await device.store.download(using: alice.authorized)
        #expect(quiet.updated == 0 && quiet.removed == 0)
    }

    @Test func lockingClosesTheStore() async throws {
        try await withServer { server in
            let tablet = try TestTablet(
                server: server.url, users: [Self.alice],
                definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")], storeStep: true)
            defer { Task { await tablet.remove() } }
            let (manager, presenter, store) = (tablet.manager, tablet.presenter, tablet.store)
            _ = try await manager.open()
            #expect(try await store.count("PreflightChecks") == 6)
            await manager.lock()
            let closed = await #expect(throws: OfflineError.self) { try await store.count("PreflightChecks") }
            #expect(closed?.code == .notOpen)
            await presenter.append([.passcode("alice-pass-1")])
            _ = try await manager.unlock()
            #expect(try await store.count("PreflightChecks") == 6)
            return server
        }
    }

    @Test func badValuesAreRefusedAndNothingIsWritten() async throws {
        try await withServer { server in
            let device = try await makeDevice(server)
            let alice = try await device.manager.open()
            await #expect(throws: OfflineError.self) {
                try await device.store.create(in: "PreflightChecks", values: check("D-XXXX", fuel: "1"))
            }
            try await device.open(alice)
            var bad = check("D-ABCD", fuel: "1")
            bad["CheckedBy"] = .string("mallory")
            let computed = await #expect(throws: OfflineError.self) {
                try await device.store.create(in: "PreflightChecks", values: bad)
            }
            #expect(computed?.message.contains("CheckedBy") == true)
            bad = check("D-ABCD", fuel: "1")
            bad["Nonsense"] = .string("x")
            await #expect(throws: OfflineError.self) {
                try await device.store.create(in: "PreflightChecks", values: bad)
            }
            bad = check("D-ABCD", fuel: "1")
            bad["TailNumber"] = .null
            await #expect(throws: OfflineError.self) {
                try await device.store.create(in: "PreflightChecks", values: bad)
            }
            await #expect(throws: OfflineError.self) {
                try await device.store.read("PreflightChecks?$filter=Nope eq 1")
            }
            #expect(try await device.store.count("PreflightChecks") == 0)
            #expect(try await device.store.pendingEntries().isEmpty)
            return server
        }
    }
}

extension PrimitiveValue {
    /// The string of a string value.
    var text: String? {
        if case .string(let text) = self { return text }
        return nil
    }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
