import BatonSQL
import Foundation

/// A person who can sign in.
public struct User: Sendable, Hashable, Codable {
    /// What a user may do.
    public enum Role: String, Sendable, Codable, CaseIterable {
        case groundStaff = "ground-staff"
        case supervisor
        case admin
    }

    /// The sign-in name: 1–64 of ASCII letters, digits, `.`, `_`, `-` and `@` (an e-mail address from a provider).
    public var name: String
    /// The name shown in apps.
    public var displayName: String
    /// The user's role.
    public var role: Role
    /// The bcrypt hash of the password. Never logged or returned.
    var passwordHash: String
    /// A disabled user cannot sign in, refresh, or use an access token.
    public var disabled: Bool
    /// When the user was added.
    public var createdAt: Date
    /// The identity provider the person signs in through (``IdentityProvider/name``), or `nil` for a user with a
    /// Baton password.
    public var identityProvider: String?
    /// The provider's `sub` for the person, once known (a user provisioned over SCIM gets it at first sign-in).
    public var subject: String?

    /// Whether `text` may be shown as a name (a display name from a provider, SCIM or an admin): 1 to 64
    /// characters of at most 256 Unicode scalars in all (a character may carry any number of combining marks, so
    /// a count of characters alone bounds nothing that is stored), none of them a control, a format character (bidi
    /// overrides, zero-width joiners that make one name look like another) or a line or paragraph separator.
    static func isValidDisplayName(_ text: String) -> Bool {
        text.unicodeScalars.count <= 256 && (1...64).contains(text.count)
            && !text.unicodeScalars.contains {
                [.control, .format, .lineSeparator, .paragraphSeparator].contains($0.properties.generalCategory)
            }
    }

    /// Whether `name` is an acceptable user name.
    static func isValidName(_ name: String) -> Bool {
        // "." and ".." would be path segments that mean something else in /admin/users/{name}/….
        (1...64).contains(name.count) && name != "." && name != ".."
            && name.unicodeScalars.allSatisfy {
                $0.isASCII
                    && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-@".unicodeScalars.contains($0))
            }
    }
}

extension User {
    /// The columns ``init(row:)`` reads.
    static let columns = "name, displayName, role, passwordHash, disabled, createdAt, idp, subject"

    /// A user read from the `users` table.
    init(row: SQLRow) throws {
        guard let name = row["name"].text, let role = row["role"].text.flatMap(Role.init(rawValue:)),
            let hash = row["passwordHash"].text, let createdAt = row["createdAt"].date
        else { throw StorageError(.other, "A row of the users table is damaged.") }
        self.init(
            name: name, displayName: row["displayName"].text ?? name, role: role, passwordHash: hash,
            disabled: row["disabled"].bool ?? true, createdAt: createdAt, identityProvider: row["idp"].text,
            subject: row["subject"].text)
    }
}
