import Crypto
import Foundation

/// The admin cockpit's browser sessions, in the server's database so that every instance knows them.
///
/// The cookie carries 32 random bytes; the database keeps only their SHA-256 (a stolen backup opens no session).
/// A session ends after ``idleTimeout`` without a request, after ``lifetime`` in any case, at sign-out, and as
/// soon as its user is disabled, deleted or no longer an admin (checked on every request).
struct CockpitSessions: Sendable {
    let database: ServerDatabase
    let clock: ServerClock

    /// How long a session lasts without a request: 15 minutes.
    static let idleTimeout: TimeInterval = 15 * 60
    /// How long a session lasts at most: 8 hours, one shift.
    static let lifetime: TimeInterval = 8 * 3_600

    /// A signed-in admin's session as a request sees it.
    struct Session: Sendable {
        var user: String
        var displayName: String
        /// The token every form that changes something must carry.
        var csrf: String
    }

    /// Opens a session for `user` and returns the cookie's value (shown to nobody but the browser).
    func open(for user: String) async throws -> String {
        let secret = randomSecret()
        let csrf = randomSecret()
        let now = clock.now().timeIntervalSince1970
        try await database.storage.write { db in
            // Sessions that ended are removed as new ones start.
            try await db.execute(
                "DELETE FROM cockpitSessions WHERE lastSeenAt < ? OR createdAt < ?", now - Self.idleTimeout,
                now - Self.lifetime)
            try await db.execute(
                #"INSERT INTO cockpitSessions (hash, "user", csrf, createdAt, lastSeenAt) VALUES (?, ?, ?, ?, ?)"#,
                secretHash(secret), user, csrf, now, now)
        }
        return secret
    }

    /// The live session of a cookie whose user is still an enabled admin, its idle time restarted; `nil` for
    /// anything else (unknown, expired, signed out, user disabled or demoted).
    func session(cookie: String) async throws -> Session? {
        guard (40...64).contains(cookie.utf8.count) else { return nil }
        let hash = secretHash(cookie)
        let now = clock.now().timeIntervalSince1970
        return try await database.storage.write { db -> Session? in
            guard
                let row = try await db.fetchOne(
                    """
                    SELECT s."user", s.csrf, s.createdAt, s.lastSeenAt, u.displayName, u.role, u.disabled
                    FROM cockpitSessions s JOIN users u ON u.name = s."user" WHERE s.hash = ?
                    """, hash)
            else { return nil }
            let created = row["createdAt"].real ?? 0
            let seen = row["lastSeenAt"].real ?? 0
            guard now - seen < Self.idleTimeout, now - created < Self.lifetime, row["role"].text == "admin",
                row["disabled"].bool == false, let user = row["user"].text, let csrf = row["csrf"].text
            else {
                try await db.execute("DELETE FROM cockpitSessions WHERE hash = ?", hash)
                return nil
            }
            // Written at most once a minute: a page's requests do not each write.
            if now - seen > 60 {
                try await db.execute("UPDATE cockpitSessions SET lastSeenAt = ? WHERE hash = ?", now, hash)
            }
            return Session(user: user, displayName: row["displayName"].text ?? user, csrf: csrf)
        }
    }

    /// Ends the session of a cookie (sign-out).
    func close(cookie: String) async throws {
        let hash = secretHash(cookie)
        try await database.storage.write { db in
            try await db.execute("DELETE FROM cockpitSessions WHERE hash = ?", hash)
        }
    }

    /// Whether `sent` is the session's CSRF token, compared in constant time.
    static func isCSRFToken(_ sent: String?, of session: Session) -> Bool {
        guard let sent else { return false }
        return sameSecret(sent, session.csrf)
    }
}
