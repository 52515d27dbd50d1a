import Foundation
import GRDB

/// A person who can sign in.
public struct User: Sendable, Hashable, Codable, FetchableRecord, PersistableRecord {
    public static let databaseTableName = "users"

    /// What a user may do.
    public enum Role: String, Sendable, Codable, CaseIterable, DatabaseValueConvertible {
        case groundStaff = "ground-staff"
        case supervisor
        case admin
    }

    /// The sign-in name: 1–64 of letters, digits, `.`, `_`, `-`.
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

    /// Whether `name` is an acceptable user name.
    static func isValidName(_ name: String) -> Bool {
        (1...64).contains(name.count)
            && name.unicodeScalars.allSatisfy {
                $0.isASCII
                    && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "._-".unicodeScalars.contains($0))
            }
    }
}
