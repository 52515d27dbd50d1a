import Foundation
import HummingbirdBcrypt
import NIOPosix
import Synchronization

/// The users: add, list, disable, delete, and check a password.
public struct UserDirectory: Sendable {
    let database: ServerDatabase
    let clock: ServerClock
    /// The bcrypt cost. Default 12; tests use the minimum, 4.
    let bcryptCost: UInt8
    let policy: PasswordPolicy

    /// Adds a user.
    ///
    /// - Throws: ``ServerError``: 400 for a bad name or a password that breaks the policy, 409 if the name is
    ///   taken.
    @discardableResult
    public func add(name: String, displayName: String?, role: User.Role, password: String) async throws -> User {
        guard User.isValidName(name) else {
            throw ServerError.badRequest(
                "User name '\(name.prefix(scalars: 64))' is not valid: use 1 to 64 letters, digits, '.', '_', '-' or '@'.",
                target: "name")
        }
        try policy.check(password, for: name)
        let cost = bcryptCost
        let hash = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
        let user = User(
            name: name, displayName: displayName ?? name, role: role, passwordHash: hash, disabled: false,
            createdAt: clock.now())
        do {
            try await database.storage.write { db in
                try await db.execute(
                    "INSERT INTO users (\(User.columns)) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)", user.name,
                    user.displayName, user.role.rawValue, user.passwordHash, user.disabled, user.createdAt)
            }
        } catch let error as StorageError where error.kind == .uniqueViolation {
            throw ServerError.conflict("A user named '\(name)' already exists.", target: "name")
        }
        return user
    }

    /// All users, by name.
    public func list() async throws -> [User] {
        try await database.storage.read { db in
            try await db.fetchAll("SELECT \(User.columns) FROM users ORDER BY name").map(User.init(row:))
        }
    }

    /// The user named `name`, if any.
    public func user(named name: String) async throws -> User? {
        // No user's name holds a NUL (PostgreSQL cannot store one, and names are made by checked paths): such a
        // name is no one's, and is not sent to the database, which on PostgreSQL refused it (a 500 at sign-in).
        guard !name.utf8.contains(0) else { return nil }
        return try await database.storage.read { db in
            try await db.fetchOne("SELECT \(User.columns) FROM users WHERE name = ?", name).map(User.init(row:))
        }
    }

    /// Disables a user: sign-in, refresh and access tokens stop working at once, refresh tokens are revoked.
    ///
    /// - Throws: ``ServerError``: 404 for an unknown user, 409 for the last enabled admin.
    public func disable(_ name: String) async throws {
        let now = clock.now()
        let found = try await database.storage.write { db -> Bool in
            try await Self.keepAnAdmin(besides: name, in: db, doing: "disable")
            let changed =
                try await db.execute("UPDATE users SET disabled = 1, disabledBy = 'admin' WHERE name = ?", name) > 0
            try await db.execute(#"DELETE FROM cockpitSessions WHERE "user" = ?"#, name)
            try await db.execute(
                #"UPDATE refreshTokens SET revokedAt = ? WHERE "user" = ? AND revokedAt IS NULL"#, now, name)
            return changed
        }
        database.statusChanged()
        guard found else { throw ServerError.notFound("There is no user named '\(name)'.") }
    }

    /// Deletes a user and their tokens and device registrations, and retires their signing keys. A user added
    /// later under the same name inherits none of it: changes are verified only with keys registered after the
    /// account was created.
    ///
    /// - Throws: ``ServerError``: 404 for an unknown user, 409 for the last enabled admin.
    public func delete(_ name: String) async throws {
        try await delete(name, checking: { _ in })
    }

    /// ``delete(_:)`` after `check` ran in the same transaction (SCIM: the user is still the provider's, unchanged
    /// since its `If-Match`, and not withdrawn by an admin); what `check` throws deletes nothing.
    func delete(_ name: String, checking check: @escaping @Sendable (any SQLConnection) async throws -> Void)
        async throws
    {
        let now = clock.now()
        let found = try await database.storage.write { db -> Bool in
            try await check(db)
            try await Self.keepAnAdmin(besides: name, in: db, doing: "delete")
            try await db.execute(
                #"UPDATE signingKeys SET replacedAt = ? WHERE "user" = ? AND replacedAt IS NULL"#, now, name)
            let changed = try await db.execute("DELETE FROM users WHERE name = ?", name) > 0
            try await db.execute(#"DELETE FROM cockpitSessions WHERE "user" = ?"#, name)
            try await db.execute(#"DELETE FROM refreshTokens WHERE "user" = ?"#, name)
            try await db.execute(#"DELETE FROM authorizationCodes WHERE "user" = ?"#, name)
            try await db.execute(#"UPDATE deviceRegistrations SET active = 0 WHERE "user" = ?"#, name)
            return changed
        }
        database.statusChanged()
        guard found else { throw ServerError.notFound("There is no user named '\(name)'.") }
    }

    /// Enables a disabled user (their earlier refresh tokens stay revoked: they sign in again).
    ///
    /// - Throws: ``ServerError`` (404) for an unknown user.
    public func enable(_ name: String) async throws {
        let found = try await database.storage.write { db -> Bool in
            try await db.execute("UPDATE users SET disabled = 0, disabledBy = NULL WHERE name = ?", name) > 0
        }
        database.statusChanged()
        guard found else { throw ServerError.notFound("There is no user named '\(name)'.") }
    }

    /// Gives a user another role; it applies to their next request (roles are read with every token check).
    ///
    /// - Throws: ``ServerError``: 404 for an unknown user, 409 when it would leave no enabled admin.
    public func setRole(_ name: String, to role: User.Role) async throws {
        let found = try await database.storage.write { db -> Bool in
            if role != .admin {
                try await Self.keepAnAdmin(besides: name, in: db, doing: "change the role of")
                try await db.execute(#"DELETE FROM cockpitSessions WHERE "user" = ?"#, name)
            }
            return try await db.execute("UPDATE users SET role = ? WHERE name = ?", role.rawValue, name) > 0
        }
        database.statusChanged()
        guard found else { throw ServerError.notFound("There is no user named '\(name)'.") }
    }

    /// Sets a user's password (checked against the policy), revokes their refresh tokens and ends their cockpit
    /// sessions, so that every device and browser signs in again with it.
    ///
    /// - Throws: ``ServerError``: 400 for a password that breaks the policy, 404 for an unknown user.
    public func setPassword(_ name: String, to password: String) async throws {
        try policy.check(password, for: name)
        let cost = bcryptCost
        let hash = try await NIOThreadPool.singleton.runIfActive { Bcrypt.hash(password, cost: cost) }
        let now = clock.now()
        let found = try await database.storage.write { db -> Bool in
            let changed = try await db.execute("UPDATE users SET passwordHash = ? WHERE name = ?", hash, name) > 0
            // A password reset after a leak ends the cockpit sessions a thief may hold too.
            try await db.execute(#"DELETE FROM cockpitSessions WHERE "user" = ?"#, name)
            try await db.execute(
                #"UPDATE refreshTokens SET revokedAt = ? WHERE "user" = ? AND revokedAt IS NULL"#, now, name)
            return changed
        }
        database.statusChanged()
        guard found else { throw ServerError.notFound("There is no user named '\(name)'.") }
    }

    /// Refuses a change that would leave no enabled admin: nobody could then run the cockpit or add one.
    static func keepAnAdmin(besides name: String, in db: any SQLConnection, doing action: String) async throws {
        let others =
            try await db.fetchOne(
                "SELECT count(*) FROM users WHERE role = 'admin' AND disabled = 0 AND name <> ?", name)?[0].integer ?? 0
        let isAdmin =
            try await db.fetchOne(
                "SELECT count(*) FROM users WHERE name = ? AND role = 'admin' AND disabled = 0", name)?[0]
            .integer ?? 0
        guard isAdmin == 0 || others > 0 else {
            throw ServerError.conflict(
                "'\(name)' is the last enabled admin: add or enable another admin before you \(action) them.",
                target: "name")
        }
    }

    /// The active user whose password is `password`, or `nil`. Runs bcrypt even for unknown users, so timing
    /// does not tell which names exist.
    ///
    /// - Throws: ``OAuthError`` (`invalid_grant`) naming the provider for a user who signs in through one.
    func authenticate(name: String, password: String) async throws -> User? {
        let user = try await self.user(named: name)
        let federated = user?.identityProvider
        // A user without a Baton password ("!": a provider's) is checked against the
        // decoy, so that they take as long as anyone else.
        let hash =
            user.flatMap { $0.passwordHash.hasPrefix("$2") ? $0.passwordHash : nil } ?? Self.decoyHash(cost: bcryptCost)
        let matches = try await NIOThreadPool.singleton.runIfActive {
            Bcrypt.verify(password, hash: hash)
        }
        if let federated {
            // People from a provider have no Baton password; the message names where they sign in.
            throw OAuthError.invalidGrant(
                "\(name) signs in through the identity provider '\(federated)': use its button on the sign-in page, not a Baton password."
            )
        }
        guard matches, let user, !user.disabled else { return nil }
        return user
    }

    /// A bcrypt hash of a random string at `cost`, verified against when the user does not exist, so an
    /// unknown name takes as long as a wrong password (same cost as real hashes). Computed once per cost.
    static func decoyHash(cost: UInt8) -> String {
        if let hash = decoys.withLock({ $0[cost] }) { return hash }
        let hash = Bcrypt.hash(UUID().uuidString, cost: cost)
        return decoys.withLock { decoys in
            if let existing = decoys[cost] { return existing }
            decoys[cost] = hash
            return hash
        }
    }

    static let decoys = Mutex<[UInt8: String]>([:])
}
