/// An error from the secure store. Messages never contain a passcode or a stored value.
public struct SecureStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A stable, opaque error code.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        /// The code's text.
        public let rawValue: String
        init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The passcode does not open the store; ``SecureStoreError/remainingAttempts`` says how many tries are left.
        public static let wrongPasscode = Code("WrongPasscode")
        /// The retry limit was reached: the store was wiped.
        public static let wiped = Code("Wiped")
        /// The file is damaged or was tampered with; it cannot be read.
        public static let corrupted = Code("Corrupted")
        /// No store exists at that location.
        public static let notFound = Code("NotFound")
        /// A store already exists at that location.
        public static let alreadyExists = Code("AlreadyExists")
        /// The passcode breaks the policy.
        public static let passcodePolicy = Code("PasscodePolicy")
        /// Reading or writing the file failed.
        public static let io = Code("IO")
        /// The store was closed (its session locked, closed or removed); open it again with the passcode.
        public static let sessionInvalidated = Code("SessionInvalidated")
    }

    /// What kind of failure this is.
    public var code: Code
    /// What failed and what to do.
    public var message: String
    /// Attempts left before the store is wiped, for ``Code/wrongPasscode``.
    public var remainingAttempts: Int?

    init(_ code: Code, _ message: String, remainingAttempts: Int? = nil) {
        self.code = code
        self.message = message
        self.remainingAttempts = remainingAttempts
    }

    public var description: String { message }
}
