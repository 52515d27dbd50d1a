import BatonTesting
import Foundation
import Testing

@testable import BatonServer

/// The cockpit's sessions on both engines: how long they last and what ends them.
@Suite struct CockpitSessionTests {
    @Test(arguments: StorageBackend.allCases) func sessionsEndWithTimeAndWithTheirAdminsStanding(
        backend: StorageBackend
    )
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let users = server.server.users
        let sessions = server.server.cockpitSessions
        for name in ["ada", "bea"] {
            try await users.add(name: name, displayName: nil, role: .admin, password: "harbour-lantern-7391")
        }
        // A live session answers with its CSRF token; an unknown or malformed cookie is nobody's.
        let ada = try await sessions.open(for: "ada")
        let session = try #require(try await sessions.session(cookie: ada))
        #expect(session.user == "ada" && CockpitSessions.isCSRFToken(session.csrf, of: session))
        #expect(!CockpitSessions.isCSRFToken(nil, of: session) && !CockpitSessions.isCSRFToken("x", of: session))
        #expect(try await sessions.session(cookie: String(ada.reversed())) == nil)
        #expect(try await sessions.session(cookie: "short") == nil)
        // Idle for 15 minutes: ended; used within them: kept, up to 8 hours.
        server.clock.advance(by: CockpitSessions.idleTimeout + 1)
        #expect(try await sessions.session(cookie: ada) == nil)
        let kept = try await sessions.open(for: "ada")
        for _ in 0..<40 {
            server.clock.advance(by: 14 * 60)
            if try await sessions.session(cookie: kept) == nil { break }
        }
        #expect(try await sessions.session(cookie: kept) == nil, "an 8-hour lifetime ends even a busy session")
        // A password reset (after a leak), a demotion, a disable and a delete each end the user's sessions.
        for change in ["password", "role", "disable", "delete"] {
            let cookie = try await sessions.open(for: "bea")
            #expect(try await sessions.session(cookie: cookie) != nil)
            switch change {
            case "password": try await users.setPassword("bea", to: "another-harbour-8812")
            case "role": try await users.setRole("bea", to: .supervisor)
            case "disable": try await users.disable("bea")
            default: try await users.delete("bea")
            }
            #expect(try await sessions.session(cookie: cookie) == nil, "\(change) ends the session")
            if change == "role" { try await users.setRole("bea", to: .admin) }
            if change == "disable" { try await users.enable("bea") }
        }
        // Sign-out ends exactly the session it names.
        let first = try await sessions.open(for: "ada")
        let second = try await sessions.open(for: "ada")
        try await sessions.close(cookie: first)
        #expect(try await sessions.session(cookie: first) == nil)
        #expect(try await sessions.session(cookie: second) != nil)
    }

    @Test(arguments: StorageBackend.allCases) func theLastAdminStaysAndPathSegmentsAreNoNames(backend: StorageBackend)
        async throws
    {
        let server = try await TestServer(backend: backend)
        defer { server.remove() }
        let users = server.server.users
        try await users.add(name: "ada", displayName: nil, role: .admin, password: "harbour-lantern-7391")
        for attempt in ["delete", "disable", "role"] {
            await #expect(throws: ServerError.self) {
                switch attempt {
                case "delete": try await users.delete("ada")
                case "disable": try await users.disable("ada")
                default: try await users.setRole("ada", to: .groundStaff)
                }
            }
        }
        #expect(try await users.user(named: "ada")?.role == .admin)
        for name in [".", ".."] {
            await #expect(throws: ServerError.self) {
                try await users.add(name: name, displayName: nil, role: .admin, password: "harbour-lantern-7391")
            }
        }
        #expect(!DeviceRegistry.isValidDeviceID("..") && !DeviceRegistry.isValidDeviceID("."))
        #expect(DeviceRegistry.isValidDeviceID("tablet-9") && DeviceRegistry.isValidDeviceID("..."))
    }
}
