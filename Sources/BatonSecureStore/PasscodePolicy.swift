/// The rules a device passcode must follow (from the server's settings exchange).
public struct PasscodePolicy: Sendable, Hashable, Codable {
    /// The shortest passcode. Default: 8.
    public var minLength = 8
    /// Whether a digit is required. Default: `true`.
    public var requireDigit = true
    /// Whether a letter is required. Default: `false`.
    public var requireLetter = false
    /// Whether a character that is neither letter nor digit is required. Default: `false`.
    public var requireSymbol = false
    /// Failed attempts before the store is wiped. Default: 5.
    public var retryLimit = 5

    /// The defaults.
    public init() {}

    /// Checks a passcode and names the first rule it breaks.
    ///
    /// - Throws: ``SecureStoreError`` (`PasscodePolicy`); the message never contains the passcode.
    public func check(_ passcode: String) throws(SecureStoreError) {
        func fail(_ message: String) -> SecureStoreError { SecureStoreError(.passcodePolicy, message) }
        guard passcode.count >= minLength else {
            throw fail("The passcode must have at least \(minLength) characters.")
        }
        if requireDigit, !passcode.contains(where: \.isNumber) { throw fail("The passcode must contain a digit.") }
        if requireLetter, !passcode.contains(where: \.isLetter) { throw fail("The passcode must contain a letter.") }
        if requireSymbol, !passcode.contains(where: { !$0.isLetter && !$0.isNumber }) {
            throw fail("The passcode must contain a character that is neither a letter nor a digit.")
        }
    }
}
