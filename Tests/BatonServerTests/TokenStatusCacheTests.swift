import BatonFiles
import BatonTestSupport
import BatonTesting
import Foundation
import GRDB
import HTTPTypes
import HummingbirdTesting
import JWTKit
import Testing

@testable import BatonServer

/// The token-status cache (``TokenStatusCache``): a request's status check comes from memory while nothing changed,
/// and every change reaches it — from this process at once, from an admin command in another process on SQLite,
/// from another instance on PostgreSQL through NOTIFY — and while changes cannot be heard it is not used.
@Suite(.serverSlot, .timeLimit(.minutes(10)), .serialized) struct TokenStatusCacheTests {
    static func entries(_ server: TestServer) -> Int {
        server.server.tokens.statusCache.state.withLock { $0.entries.count }
    }
    /// Whether `server` uses its cache now (judged as a request would: the listener's heartbeat must be recent).
    static func live(_ server: TestServer) -> Bool { server.server.tokens.statusCache.generation() != nil }

    /// A SQLite server with alice signed in, her token's status read once and cached.
    static func withAliceCached(
        _ body: @Sendable (TestServer, any TestClientProtocol, String) async throws -> Void
    ) async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.test { client in
            let token = try await client.signIn("alice").access
            #expect(try await client.get("/me", token: token).0 == .ok)
            #expect(Self.entries(server) == 1)
            try await body(server, client, token)
        }
    }

    static func invalidations(_ server: TestServer) -> Int {
        server.server.tokens.statusCache.state.withLock { $0.invalidations }
    }

    /// Reads `/me` at `client` until `server`'s cache holds the token (the cache is used only while the listener
    /// hears its heartbeat, which a busy machine may miss for a moment): whether it came to hold it.
    static func cached(
        _ token: String, at client: any TestClientProtocol, of server: TestServer
    ) async throws -> Bool {
        for _ in 0..<200 {
            guard try await client.get("/me", token: token).0 == .ok else { return false }
            if entries(server) >= 1 { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }

    /// Two instances on one PostgreSQL database, both hearing the channel, alice signed in at A and her token in
    /// B's cache.
    static func twoInstances(
        _ body:
            @Sendable (
                TestServer, TestServer, any TestClientProtocol, any TestClientProtocol,
                (access: String, refresh: String)
            ) async throws -> Void
    ) async throws {
        let a = try await TestServer(backend: .postgres)
        defer { a.remove() }
        let b = try await TwoInstanceStorageTests.second(of: a)
        defer { b.remove() }
        try await a.addUser("alice")
        try await eventually(within: .seconds(10)) { Self.live(a) && Self.live(b) }
        try await a.test { atA in
            try await b.test { atB in
                let tokens = try await atA.signIn("alice")
                #expect(try await Self.cached(tokens.access, at: atB, of: b))
                try await body(a, b, atA, atB, tokens)
            }
        }
    }

    /// The command rewrites the epoch's word in place (the file keeps its inode), and the server, which maps the file,
    /// reads the new word at the next request.
    @Test func anAdminCommandInAnotherProcessStopsACachedTokenAtOnce() async throws {
        try await Self.withAliceCached { server, client, token in
            #expect(try await client.get("/me", token: token).0 == .ok)
            let epoch = server.directory.appendingPathComponent("status.epoch")
            let inode = try FileManager.default.attributesOfItem(atPath: epoch.path)[.systemFileNumber] as? Int
            let word = try Data(contentsOf: epoch).prefix(8)
            // `baton-server user disable` runs as a process of its own on the same data directory.
            // Through the kit's `Program` (swift-subprocess), run to its end: Foundation's `Process` walks
            // `/proc/self/fd` while this test process holds hundreds of descriptors, and corrupted its heap.
            let admin = try await Program.run(
                builtExecutable("baton-server"), ["user", "disable", "alice", "--data-dir", server.directory.path])
            #expect(admin.status == 0, "\(admin.error)")
            #expect(try FileManager.default.attributesOfItem(atPath: epoch.path)[.systemFileNumber] as? Int == inode)
            #expect(try Data(contentsOf: epoch).prefix(8) != word)
            let (status, body, _) = try await client.get("/me", token: token)
            #expect(status == .unauthorized)
            #expect((body["error"] as? [String: Any])?["code"] as? String == "UserWithdrawn")
        }
    }

    /// A status changed by another process, which then replaced the epoch file rather than rewrite it (as an admin
    /// command of an earlier version did, or a hand might) or removed it and wrote a new one: the word the server
    /// maps never moves, and the server hears of it by comparing the file at the path with its own, at most
    /// ``TokenStatusCache/pathCheckInterval`` later.
    @Test(arguments: [false, true]) func aStatusChangeInAReplacedOrRemovedEpochFileIsHeard(removed: Bool) async throws {
        try await Self.withAliceCached { server, client, token in
            let epoch = server.directory.appendingPathComponent("status.epoch")
            // Another process's connection: the server's own transaction observer does not see its commit.
            let other = try DatabaseQueue(path: server.directory.appendingPathComponent("server.sqlite").path)
            defer { try? other.close() }
            try await other.write { db in try db.execute(sql: "UPDATE users SET disabled = 1 WHERE name = 'alice'") }
            if removed {
                try FileManager.default.removeItem(at: epoch)
                try StatusEpoch.advance(path: epoch.path, changing: false)
            } else {
                try AtomicFile.write(Data((0..<16).map { _ in UInt8.random(in: 0...255) }), to: epoch)
            }
            try await eventually(within: .seconds(10)) { try await client.get("/me", token: token).0 == .unauthorized }
            // The server maps the file now at the path: a change written into it in place is heard at the next request.
            try await other.write { db in try db.execute(sql: "UPDATE users SET disabled = 0 WHERE name = 'alice'") }
            try StatusEpoch.advance(path: epoch.path, changing: false)
            #expect(try await client.get("/me", token: token).0 == .ok)
            #expect(Self.entries(server) == 1)
        }
    }

    /// Between a writer's two writes the word is odd, and no server reads or fills its cache: a writer killed after
    /// its commit, before its second write, leaves the caches unused, never holding what it changed.
    @Test func whileTheEpochsWordIsOddTheCacheIsNotUsed() async throws {
        try await Self.withAliceCached { server, client, token in
            let epoch = server.directory.appendingPathComponent("status.epoch").path
            try StatusEpoch.advance(path: epoch, changing: true)
            #expect(!Self.live(server))
            #expect(try await client.get("/me", token: token).0 == .ok)
            #expect(Self.entries(server) == 0)
            try StatusEpoch.advance(path: epoch, changing: false)
            #expect(Self.live(server))
            #expect(try await client.get("/me", token: token).0 == .ok)
            #expect(Self.entries(server) == 1)
        }
    }

    /// An epoch file that cannot be trusted — a second name of another file of the directory, one others may write —
    /// is never written through: a writer (here the server's own commit) removes it and makes a new one of its own, the other file
    /// keeps its bytes, and the server maps the new file: another process's change written into it is heard.
    @Test(arguments: ["linked", "writable by others"])
    func anEpochFileUnfitToBeTrustedIsReplacedNotWritten(unfit: String) async throws {
        try await Self.replacesUnfitEpochFile(unfit)
    }

    /// The same for another user's epoch file (an earlier version's admin command run as root left one): only root
    /// can give a file away, so this runs as root (as CI does) and is reported skipped otherwise.
    @Test(.enabled(if: geteuid() == 0, "only root can give a file to another user"))
    func anotherUsersEpochFileIsReplacedNotWritten() async throws {
        try await Self.replacesUnfitEpochFile("another user's")
    }

    /// Makes the server's epoch file `unfit`, has the server commit a status change, and checks the file was replaced,
    /// not written through, and that the server hears another process's change through the new file.
    static func replacesUnfitEpochFile(_ unfit: String) async throws {
        try await Self.withAliceCached { server, client, token in
            let epoch = server.directory.appendingPathComponent("status.epoch")
            let victim = server.directory.appendingPathComponent("victim")
            let bytes = Data(repeating: 0xAB, count: 5_000)
            switch unfit {
            case "linked":
                try bytes.write(to: victim)
                try FileManager.default.removeItem(at: epoch)
                try FileManager.default.linkItem(at: victim, to: epoch)
            case "writable by others":
                try FileManager.default.setAttributes([.posixPermissions: 0o666], ofItemAtPath: epoch.path)
            default:
                #expect(chown(epoch.path, 65_534, 65_534) == 0)
            }
            try await server.server.users.disable("alice")
            if unfit == "linked" { #expect(try Data(contentsOf: victim) == bytes) }
            let attributes = try FileManager.default.attributesOfItem(atPath: epoch.path)
            #expect(attributes[.referenceCount] as? Int == 1)
            #expect((attributes[.posixPermissions] as? Int).map { $0 & 0o077 } == 0)
            #expect((attributes[.ownerAccountID] as? NSNumber)?.uint32Value == geteuid())
            #expect(try await client.get("/me", token: token).0 == .unauthorized)
            // The server's own commit emptied its cache directly; another process's is heard only through the new
            // file, once the server has mapped it (within the path check's interval).
            try await server.addUser("bob")
            let bob = try await client.signIn("bob").access
            #expect(try await client.get("/me", token: bob).0 == .ok)
            let other = try DatabaseQueue(path: server.directory.appendingPathComponent("server.sqlite").path)
            defer { try? other.close() }
            try await other.write { db in try db.execute(sql: "UPDATE users SET disabled = 1 WHERE name = 'bob'") }
            try StatusEpoch.advance(path: epoch.path, changing: false)
            try await eventually(within: .seconds(10)) { try await client.get("/me", token: bob).0 == .unauthorized }
        }
    }

    /// A `COMMIT` sent through a read statement (SQLite calls it read-only, and the storage steps such statements
    /// itself) still goes through GRDB, whose transaction observers empty the cache: a user disabled in that
    /// transaction is refused at once (the attacker's review of the direct stepping).
    @Test func aCommitSentThroughAReadStillEmptiesTheCache() async throws {
        try await Self.withAliceCached { server, client, token in
            let before = Self.invalidations(server)
            // GRDB's own commit after the body may find no transaction left; the change is on disk either way.
            _ = try? await server.server.database.storage.write { db in
                try await db.execute("UPDATE users SET disabled = 1 WHERE name = ?", "alice")
                _ = try await db.fetchAll("COMMIT", [])
            }
            let disabled = try await server.server.database.storage.read { db in
                try await db.fetchOne("SELECT disabled FROM users WHERE name = ?", "alice")?[0]
            }
            #expect(disabled == .integer(1))
            // The cache was emptied by the commit itself (a cache no longer used would refuse the token too).
            #expect(Self.invalidations(server) > before)
            #expect(Self.entries(server) == 0)
            #expect(try await client.get("/me", token: token).0 == .unauthorized)
        }
    }

    /// Only a change empties the cache: revoking a token already revoked, or replaying a used code, changes nothing
    /// and so costs nobody their cached status (anyone may send them).
    @Test func aRevocationThatChangesNothingEmptiesNoCache() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        try await server.addUser("alice")
        try await server.addUser("bob")
        try await server.test { client in
            let alice = try await client.signIn("alice")
            let bob = try await client.signIn("bob")
            try await server.server.tokens.revoke(alice.refresh, clientID: "baton-device", caller: .init(address: "t"))
            #expect(try await client.get("/me", token: bob.access).0 == .ok)
            #expect(Self.entries(server) == 1)
            let before = Self.invalidations(server)
            try await server.server.tokens.revoke(alice.refresh, clientID: "baton-device", caller: .init(address: "t"))
            try await server.server.tokens.revoke("not-a-token", clientID: "baton-device", caller: .init(address: "t"))
            #expect(Self.invalidations(server) == before)
            #expect(Self.entries(server) == 1)
            #expect(try await client.get("/me", token: alice.access).0 == .unauthorized)
        }
    }

    @Test func aRevocationAtOneInstanceReachesTheOthersCache() async throws {
        try await Self.twoInstances { a, b, atA, atB, tokens in
            // Revoked at A: B, which remembered the token as good, refuses it once A's NOTIFY arrives.
            try await a.server.tokens.revoke(tokens.refresh, clientID: "baton-device", caller: .init(address: "t"))
            let revoked = ContinuousClock.now
            var refused = false
            for _ in 0..<500 where !refused {
                refused = try await atB.get("/me", token: tokens.access).0 == .unauthorized
                if !refused { try await Task.sleep(for: .milliseconds(1)) }
            }
            #expect(refused)
            print(
                "token-status cache: a revocation at one instance was refused at the other after \(ContinuousClock.now - revoked)"
            )
        }
    }

    @Test func whileTheListenerIsDownTheCacheIsNotUsedAndARevocationIsNeverMissed() async throws {
        try await Self.twoInstances { a, b, atA, atB, tokens in
            // Every listening connection is cut; until they are back, NOTIFYs go unheard.
            _ = try await a.server.database.storage.write { db in
                try await db.fetchAll(
                    """
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE query ILIKE 'LISTEN%baton_status%' AND pid <> pg_backend_pid()
                    """)
            }
            try await eventually(within: .seconds(10)) { !Self.live(b) }
            #expect(Self.entries(b) == 0)
            // Revoked at A while B hears nothing: B asks the database, so it refuses at once.
            try await a.server.tokens.revoke(tokens.refresh, clientID: "baton-device", caller: .init(address: "t"))
            #expect(try await atB.get("/me", token: tokens.access).0 == .unauthorized)
            // The listener comes back by itself, and the cache is used again, starting empty.
            try await eventually(within: .seconds(10)) { Self.live(b) }
            let fresh = try await atA.signIn("alice")
            #expect(try await Self.cached(fresh.access, at: atB, of: b))
        }
    }

    /// A listener that goes quiet without an error (a dropped connection a firewall never reset) is noticed by the
    /// missing heartbeat: the cache stops being used within the deadline, so a revocation is not missed.
    @Test func aListenerThatGoesQuietIsNoticedByItsHeartbeat() async throws {
        try await Self.twoInstances { a, b, atA, atB, tokens in
            // An update that changes no status (a role set to itself) notifies nobody: B empties nothing.
            let before = Self.invalidations(b)
            _ = try await a.server.database.storage.write { db in
                try await db.execute("UPDATE users SET role = role WHERE name = ?", "alice")
            }
            try await Task.sleep(for: .milliseconds(200))
            #expect(Self.invalidations(b) == before)
            // B stops hearing: its connection stays open, nothing arrives.
            b.server.statusHealth?.deaf.store(true, ordering: .relaxed)
            try await eventually(within: .seconds(10)) { !Self.live(b) }
            try await a.server.tokens.revoke(tokens.refresh, clientID: "baton-device", caller: .init(address: "t"))
            #expect(try await atB.get("/me", token: tokens.access).0 == .unauthorized)
            b.server.statusHealth?.deaf.store(false, ordering: .relaxed)
            try await eventually(within: .seconds(10)) { Self.live(b) }
        }
    }

    /// An admin command whose status change cannot be told to the other processes (the epoch file cannot be
    /// written: a directory stands at its path) fails, and changes nothing.
    @Test func aStatusChangeThatCannotWriteTheEpochFileFailsAndChangesNothing() async throws {
        let server = try await TestServer(backend: .sqlite)
        defer { server.remove() }
        try await server.addUser("alice")
        let epoch = server.directory.appendingPathComponent("status.epoch")
        try? FileManager.default.removeItem(at: epoch)
        try FileManager.default.createDirectory(
            at: epoch.appendingPathComponent("blocked"), withIntermediateDirectories: true)
        await #expect(throws: (any Error).self) { try await server.server.users.disable("alice") }
        #expect(try await server.server.users.user(named: "alice")?.disabled == false)
        try FileManager.default.removeItem(at: epoch)
        try await server.server.users.disable("alice")
        #expect(try await server.server.users.user(named: "alice")?.disabled == true)
    }
}

/// A token's scopes are space-separated and compared byte for byte.
@Suite struct ScopeTests {
    func claims(scope: String) -> AccessTokenClaims {
        AccessTokenClaims(
            iss: "http://127.0.0.1", sub: "alice", aud: "baton", scope: scope, exp: .init(value: .distantFuture),
            iat: .init(value: .now), jti: "j", clientID: "baton-device", family: nil)
    }

    @Test func eachSpaceSeparatedScopeIsGrantedAndNothingElse() {
        let token = claims(scope: "openid data  admin")
        #expect(token.grants("openid") && token.grants("data") && token.grants("admin"))
        for wanted in ["", " ", "dat", "data ", "openid data", "ADMIN", "admin\u{301}"] {
            #expect(!token.grants(wanted), "\(wanted.unicodeScalars.map { $0.escaped(asASCII: true) })")
        }
        // A combining mark after a space is a scalar of its own: the scope after it is not "admin".
        let marked = claims(scope: "data \u{301}admin")
        #expect(marked.grants("data") && !marked.grants("admin"))
        #expect(!claims(scope: "").grants("data"))
    }
}
