import Foundation

/// The people an identity provider vouches for: bound to (provider, `sub`), never to a name alone.
extension UserDirectory {
    /// What a sign-in through a provider comes to.
    enum FederatedSignIn: Sendable {
        /// The Baton user, created on first sign-in (`created`), their role set from their groups.
        case signedIn(User, created: Bool, roleChanged: User.Role?)
        /// Why the person may not sign in, for the page.
        case refused(String)
    }

    /// The user a provider's verified ID token stands for, in one transaction: found by (provider, `sub`); else a
    /// user the same provider provisioned over SCIM under the claimed name, now bound to the `sub`; else a new user
    /// (just in time). A claimed name that belongs to anyone else (a local user, another provider's) is refused
    /// until an admin links the two. The role comes from the mapped groups, at every sign-in.
    func signIn(through provider: IdentityProvider, claims: IDTokenClaims) async throws -> FederatedSignIn {
        let groups = claims.strings(provider.roleClaim)
        guard let role = provider.role(forGroups: groups) else {
            return .refused(
                "\(provider.displayName) signed you in, but you are in none of the groups that give a role in Baton. Ask an administrator to add you to one."
            )
        }
        let claimed: String? =
            switch provider.nameClaim {
            case .sub: claims.subject
            case .email: claims.string("email")
            case .preferredUsername: claims.string("preferred_username")
            }
        // An address names someone only when the provider vouches for it: `email_verified` true. Left out (Entra ID
        // leaves it out) is not vouched for — anyone at the provider could claim the address of a person SCIM
        // created who has not signed in yet.
        if provider.nameClaim == .email,
            claims.claims["email_verified"] != .bool(true) && claims.claims["email_verified"] != .string("true")
        {
            return .refused(
                "\(provider.displayName) has not verified your e-mail address, which would be your Baton user name.")
        }
        let displayName = claims.string("name").flatMap { User.isValidDisplayName($0) ? $0 : nil }
        do {
            return try await bind(
                provider: provider, claims: claims, role: role, claimed: claimed, displayName: displayName)
        } catch let error as ServerError where error.status == .conflict {
            // The provider took the admin role from the last enabled admin: Baton keeps one, and says why.
            return .refused(error.message)
        } catch let error as StorageError where error.kind == .uniqueViolation {
            // Another Baton user is bound to this person at the same issuer (a provider registered again under
            // another name).
            return .refused(
                "Another Baton user is bound to your account at \(provider.displayName)'s issuer. Ask an administrator to link the right one."
            )
        }
    }

    /// The transaction of ``signIn(through:claims:)``.
    func bind(
        provider: IdentityProvider, claims: IDTokenClaims, role: User.Role, claimed: String?, displayName: String?
    ) async throws -> FederatedSignIn {
        let now = clock.now()
        let outcome = try await database.storage.write { db -> FederatedSignIn in
            var found = try await db.fetchOne(
                "SELECT \(User.columns) FROM users WHERE idp = ? AND idpIssuer = ? AND subject = ?", provider.name,
                provider.issuer, claims.subject
            ).map(User.init(row:))
            var created = false
            if found == nil {
                guard let name = claimed, User.isValidName(name) else {
                    return .refused(
                        "\(provider.displayName) did not send a usable \(provider.nameClaim.rawValue) (1 to 64 of letters, digits, '.', '_', '-', '@'); Baton cannot name your account."
                    )
                }
                if let row = try await db.fetchOne("SELECT \(User.columns), idpIssuer FROM users WHERE name = ?", name)
                {
                    let existing = try User(row: row)
                    guard existing.identityProvider == provider.name, row["idpIssuer"].text == provider.issuer,
                        existing.subject == nil
                    else {
                        return .refused(
                            "Baton already has a user named '\(name)' who is not linked to \(provider.displayName). An administrator can link them: baton-server user link \(name) --idp \(provider.name) --subject …"
                        )
                    }
                    try await db.execute("UPDATE users SET subject = ? WHERE name = ?", claims.subject, name)
                    found = existing
                } else {
                    // No password: "!" is no bcrypt hash, and passwords are refused for provider users anyway.
                    try await db.execute(
                        "INSERT INTO users (\(User.columns), idpIssuer) VALUES (?, ?, ?, '!', 0, ?, ?, ?, ?)", name,
                        displayName ?? name, role.rawValue, now, provider.name, claims.subject, provider.issuer)
                    created = true
                    found = User(
                        name: name, displayName: displayName ?? name, role: role, passwordHash: "!", disabled: false,
                        createdAt: now, identityProvider: provider.name, subject: claims.subject)
                }
            }
            guard var user = found else { return .refused("Baton cannot find your account.") }
            guard !user.disabled else {
                return .refused("Your Baton account '\(user.name)' is disabled. Ask an administrator.")
            }
            var changed: User.Role?
            if user.role != role {
                if user.role == .admin {
                    try await Self.keepAnAdmin(besides: user.name, in: db, doing: "change the role of")
                    // A demoted admin's cockpit sessions end, as when an admin changes the role.
                    try await db.execute(#"DELETE FROM cockpitSessions WHERE "user" = ?"#, user.name)
                }
                try await db.execute("UPDATE users SET role = ? WHERE name = ?", role.rawValue, user.name)
                user.role = role
                changed = role
            }
            if let displayName, displayName != user.displayName {
                try await db.execute("UPDATE users SET displayName = ? WHERE name = ?", displayName, user.name)
                user.displayName = displayName
            }
            return .signedIn(user, created: created, roleChanged: created ? nil : changed)
        }
        // A role a sign-in changed applies to the person's other tokens at once; a sign-in that changed none empties
        // no cache.
        if case .signedIn(_, _, .some) = outcome { database.statusChanged() }
        return outcome
    }

    /// Binds a user to a provider's subject (`baton-server user link`): from then on they sign in only through
    /// it, and their Baton password is refused.
    ///
    /// - Throws: ``ServerError``: 404 for an unknown user or provider, 409 when another user has that subject.
    public func link(_ name: String, to provider: String, subject: String) async throws {
        guard (1...255).contains(subject.utf8.count), subject.utf8.allSatisfy({ (0x20...0x7E).contains($0) }) else {
            throw ServerError.badRequest("A subject is 1 to 255 printable ASCII characters.", target: "subject")
        }
        let found: Bool
        do {
            found = try await database.storage.write { db -> Bool in
                guard
                    let issuer = try await db.fetchOne(
                        "SELECT issuer FROM identityProviders WHERE name = ?", provider)?[
                            "issuer"
                        ].text
                else { throw ServerError.notFound("There is no identity provider named '\(provider)'.") }
                return try await db.execute(
                    "UPDATE users SET idp = ?, idpIssuer = ?, subject = ? WHERE name = ?", provider, issuer, subject,
                    name) > 0
            }
        } catch let error as StorageError where error.kind == .uniqueViolation {
            throw ServerError.conflict(
                "Another user is linked to that subject of '\(provider)' already.", target: "subject")
        }
        guard found else { throw ServerError.notFound("There is no user named '\(name)'.") }
    }
}
