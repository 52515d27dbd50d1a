/// The rules an account password must follow.
public struct PasswordPolicy: Sendable, Hashable {
    /// The shortest password accepted. Default: 10.
    public var minimumLength = 10
    /// The longest password accepted (bcrypt reads 72 bytes). Default: 72.
    public var maximumLength = 72

    /// The default policy.
    public init() {}

    /// Checks a password for `user`.
    ///
    /// - Throws: ``ServerError`` (400) saying which rule failed; the message never contains the password.
    public func check(_ password: String, for user: String) throws(ServerError) {
        guard password.utf8.count >= minimumLength else {
            throw .badRequest("The password must have at least \(minimumLength) characters.", target: "password")
        }
        guard password.utf8.count <= maximumLength else {
            throw .badRequest("The password must have at most \(maximumLength) bytes.", target: "password")
        }
        guard Set(password).count >= 4 else {
            throw .badRequest("The password must use at least 4 different characters.", target: "password")
        }
        guard password.lowercased() != user.lowercased(), !password.lowercased().contains(user.lowercased()) else {
            throw .badRequest("The password must not contain the user name.", target: "password")
        }
    }
}
