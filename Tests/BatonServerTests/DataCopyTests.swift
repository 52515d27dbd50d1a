import BatonServer
import BatonTestSupport
import BatonTesting
import Foundation
import GRDB
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import Testing

/// `baton-server copy`: a SQLite data directory moves into PostgreSQL, and a device cannot tell.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DataCopyTests {
    static var quiet: Logger {
        var logger = Logger(label: "copy-test")
        logger.logLevel = .critical
        return logger
    }

    /// The sets the aircraft-checks model serves, read whole.
    static let sets = ["Aircraft", "Flights", "PreflightChecks"]

    @Test func aDataDirectoryMovesToPostgreSQLAndEveryUserDeviceAndEntityReadsBack() async throws {
        try await OnBehalfTests.handover(backend: .sqlite) { server, client, bob, key, createdAt in
            let alice = try await client.signIn("alice")
            let start = try await client.odata(
                .get, "PreflightChecks", token: alice.access, headers: [("Prefer", "odata.track-changes")])
            let deltaLink = String(
                try #require(start.json["@odata.deltaLink"] as? String).dropFirst("http://127.0.0.1:8080/odata/".count))
            // An on-behalf upload (a repeatability record, an audit entry), a create and a delete (a tombstone),
            // a failed sign-in (the throttle's counters).
            let change = try OnBehalfTests.signedChange(
                Fixtures.id(1), requestID: "r-1", key: key, createdAt: createdAt,
                firstSent: OnBehalfTests.firstSent(server))
            let uploaded = try await client.odata(
                .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
            #expect(uploaded.status == .created)
            #expect(
                try await client.odata(
                    .post, "PreflightChecks", token: alice.access, body: Fixtures.check(Fixtures.id(2))
                )
                .status == .created)
            #expect(
                try await client.odata(
                    .delete, "PreflightChecks(\(Fixtures.id(2)))", token: alice.access, headers: [("If-Match", "*")]
                ).status == .noContent)
            let (failed, _) = try await client.token([
                ("grant_type", "password"), ("client_id", "baton-device"), ("username", "alice"),
                ("password", "wrong-password-1"),
            ])
            #expect(failed == .badRequest)
            // A photo of the uploaded check: its bytes are a file of the data directory.
            let photo = ImageFixtures.jpeg(scanBytes: 300_000)
            let photoID = Fixtures.id(90)
            let taken = try await client.media(
                .post, "CheckPhotos", token: alice.access, contentType: "image/jpeg", body: photo,
                headers: [("Slug", MediaTests.slug(id: photoID))])
            #expect(taken.status == .created, "\(taken.text)")
            var read: [String: String] = [:]
            for set in Self.sets { read[set] = try await client.odata(.get, set, token: alice.access).text }
            let before = read
            let auditBefore = try await server.server.audit.entries(limit: 1000)

            let target = try await SharedPostgres.freshDatabase()
            let report = try await DataCopy.copy(from: server.server.configuration, to: target, logger: Self.quiet)
            let copied = Dictionary(report.tables.map { ($0.name, $0.rows) }, uniquingKeysWith: +)
            #expect(copied["users"] == 3)
            #expect(copied["PreflightChecks"] == 1)
            #expect(copied["$removed"] == 1)
            #expect(copied["$repeatability"] ?? 0 >= 1)
            #expect(copied["signInFailures"] ?? 0 >= 1)
            #expect(copied["deviceRegistrations"] == 2)
            #expect(copied["media"] == 1)

            // The same server on PostgreSQL, with the data directory's master key.
            var configuration = server.server.configuration
            configuration.database = target
            configuration.masterKeyFile = server.directory.appendingPathComponent("keys/master.key")
            let moved = try await BatonServer(configuration: configuration, logger: Self.quiet)
            defer { moved.close() }
            try await moved.application().test(.router) { client in
                // Every entity reads back the same, with the same ETags; tokens issued before the move still work.
                for set in Self.sets {
                    let after = try await client.odata(.get, set, token: alice.access)
                    #expect(after.status == .ok)
                    #expect(after.text == before[set], "\(set)")
                }
                // The delta link taken before the move goes on from where it was: the upload, and the deletion.
                let delta = try await client.odata(.get, deltaLink, token: alice.access)
                #expect(delta.values.compactMap { $0["ID"] as? String } == [Fixtures.id(1)], "\(delta.text)")
                #expect(delta.text.contains(#""@removed""#) && delta.text.contains(Fixtures.id(2)))
                // The device's retry of its upload finds the first answer: nothing applies twice.
                let replay = try await client.odata(
                    .post, "PreflightChecks", token: bob, headers: change.headers, body: change.body)
                #expect(replay.status == .created)
                #expect(replay.text == uploaded.text)
                #expect(try await client.odata(.get, "PreflightChecks/$count", token: bob).text == "1")
                // The photo's bytes came along, whole.
                let bytes = try await client.media(.get, "CheckPhotos(\(photoID))/$value", token: alice.access)
                #expect(bytes.status == .ok)
                #expect(bytes.bytes == (try MediaTests.expected(photo)).bytes)
                // The device's registration and signing key came along: a new signed change of Alice's applies.
                let next = try OnBehalfTests.signedChange(
                    Fixtures.id(3), requestID: "r-3", key: key, createdAt: createdAt,
                    firstSent: OnBehalfTests.firstSent(server))
                let third = try await client.odata(
                    .post, "PreflightChecks", token: bob, headers: next.headers, body: next.body)
                #expect(third.status == .created, "\(third.text)")
                #expect(third.json["CheckedBy"] as? String == "alice")
                // The refresh token issued on SQLite rotates on PostgreSQL; the used one then revokes its family.
                let (refreshed, body) = try await client.token([
                    ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", alice.refresh),
                ])
                #expect(refreshed == .ok)
                let rotatedAccess = try #require(body["access_token"] as? String)
                #expect(try await client.get("/me", token: rotatedAccess).0 == .ok)
                let (reused, _) = try await client.token([
                    ("grant_type", "refresh_token"), ("client_id", "baton-device"), ("refresh_token", alice.refresh),
                ])
                #expect(reused == .badRequest)
                #expect(try await client.get("/me", token: rotatedAccess).0 == .unauthorized)
            }
            let auditAfter = try await moved.audit.entries(limit: 1000)
            #expect(Array(auditAfter.suffix(auditBefore.count)) == auditBefore)
            let users = try await moved.users.list().map(\.name).sorted()
            #expect(users == ["alice", "bob", "sam"])

            // A second copy into the now used database is refused, naming what it holds.
            await #expect {
                _ = try await DataCopy.copy(from: server.server.configuration, to: target, logger: Self.quiet)
            } throws: { error in
                "\(error)".contains("already holds Baton data: users (3)")
            }
        }
    }

    @Test func aCopyWithTheWrongMasterKeyWritesNothing() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.addUser("alice")
        let wrong = server.directory.appendingPathComponent("other.key")
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: wrong)
        var source = server.server.configuration
        source.masterKeyFile = wrong
        let target = try await SharedPostgres.freshDatabase()
        await #expect {
            _ = try await DataCopy.copy(from: source, to: target, logger: Self.quiet)
        } throws: { error in
            "\(error)".contains("master key")
        }
        // Nothing was written: the right key then copies into the same database.
        source.masterKeyFile = nil
        let report = try await DataCopy.copy(from: source, to: target, logger: Self.quiet)
        #expect(report.tables.contains { $0.name == "users" && $0.rows == 1 })
    }

    @Test func aCopyThatWouldLeaveDataBehindOrMakeUpAKeyIsRefused() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.addUser("alice")
        // Entity data of a set the copy's model does not have (the server served another --model).
        let data = try DatabaseQueue(path: server.directory.appendingPathComponent("data.sqlite").path)
        try await data.write { db in try db.execute(sql: "CREATE TABLE Parts (ID TEXT PRIMARY KEY)") }
        try data.close()
        let target = try await SharedPostgres.freshDatabase()
        await #expect {
            _ = try await DataCopy.copy(from: server.server.configuration, to: target, logger: Self.quiet)
        } throws: { error in
            "\(error)".contains("tables the model does not know (Parts)")
        }
        // A master-key file that does not exist is not made up: the data directory's key is needed.
        var source = server.server.configuration
        let missing = server.directory.appendingPathComponent("elsewhere.key")
        source.masterKeyFile = missing
        await #expect {
            _ = try await DataCopy.copy(from: source, to: target, logger: Self.quiet)
        } throws: { error in
            "\(error)".contains("Cannot read the master-key file")
        }
        #expect(!FileManager.default.fileExists(atPath: missing.path))
    }
}
