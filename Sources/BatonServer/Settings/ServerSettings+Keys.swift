import BatonOData
import Foundation

extension ServerSettings {
    /// The keys `baton-server settings set` accepts, with what each takes.
    public static let keys: [(key: String, takes: String)] = [
        ("shared-devices.multi-user", "true or false"),
        ("shared-devices.upload-pending-changes-of-previous-user", "true or false"),
        ("passcode.min-length", "an integer from 0 to 64 (below 4 means no passcode; multi-user mode then uses 8)"),
        ("passcode.require-digit", "true or false"),
        ("passcode.require-letter", "true or false"),
        ("passcode.require-symbol", "true or false"),
        ("passcode.retry-limit", "an integer from 1 to 100"),
        ("passcode.lock-timeout-seconds", "an integer from 10 to 86400"),
        ("app-versions.inactive", "a comma-separated list of versions, or an empty string"),
        ("devices.settings-refresh-seconds", "an integer from 60 to 86400"),
        ("sign-in.methods", "a comma-separated list of password and device (at least one)"),
        ("sign-in.local-passwords", "true or false (false: only identity providers sign people in)"),
        ("telemetry.usage", "true or false"),
        ("telemetry.logs-with-sync", "true or false"),
        ("devices.max-per-user", "an integer from 1 to 1000"),
        ("backups.max-per-device", "an integer from 1 to 100000"),
        ("backups.max-mib-per-device", "an integer from 1 to 4096 (MiB)"),
        ("audit.retention-days", "an integer from 7 to 36500"),
    ]

    /// Sets one setting from its command-line form.
    ///
    /// - Throws: ``ServerError`` (400) for an unknown key (listing the known ones) or a bad value (saying what
    ///   the key takes).
    public mutating func set(_ key: String, to value: String) throws(ServerError) {
        func bool() throws(ServerError) -> Bool {
            switch value.lowercased() {
            case "true", "yes", "on", "1": return true
            case "false", "no", "off", "0": return false
            default: throw invalid(key, value)
            }
        }
        func int(_ range: ClosedRange<Int>) throws(ServerError) -> Int {
            guard let number = Int(value), range.contains(number) else { throw invalid(key, value) }
            return number
        }
        switch key {
        case "shared-devices.multi-user": sharedDevices.multiUser = try bool()
        case "shared-devices.upload-pending-changes-of-previous-user":
            sharedDevices.uploadPendingChangesOfPreviousUser = try bool()
        case "passcode.min-length": passcode.minLength = try int(0...64)
        case "passcode.require-digit": passcode.requireDigit = try bool()
        case "passcode.require-letter": passcode.requireLetter = try bool()
        case "passcode.require-symbol": passcode.requireSymbol = try bool()
        case "passcode.retry-limit": passcode.retryLimit = try int(1...100)
        case "passcode.lock-timeout-seconds": passcode.lockTimeoutSeconds = try int(10...86_400)
        case "app-versions.inactive":
            let versions = value.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
            guard versions.allSatisfy({ !$0.isEmpty && $0.count <= 32 }) else { throw invalid(key, value) }
            appVersions.inactive = versions
        case "devices.settings-refresh-seconds": devices.settingsRefreshSeconds = try int(60...86_400)
        case "sign-in.methods":
            let methods = value.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) }
            guard !methods.isEmpty, methods.allSatisfy(["password", "device"].contains) else {
                throw invalid(key, value)
            }
            signIn.methods = Array(Set(methods)).sorted().reversed()
        case "sign-in.local-passwords": signIn.localPasswords = try bool()
        case "telemetry.usage": telemetry.usage = try bool()
        case "telemetry.logs-with-sync": telemetry.logsWithSync = try bool()
        case "devices.max-per-user": devices.maxPerUser = try int(1...1_000)
        case "backups.max-per-device": backups.maxPerDevice = try int(1...100_000)
        case "backups.max-mib-per-device": backups.maxMiBPerDevice = try int(1...4_096)
        case "audit.retention-days": audit.retentionDays = try int(7...36_500)
        default:
            throw ServerError.badRequest(
                "Unknown setting '\(key)'. Known settings: \(Self.keys.map(\.key).joined(separator: ", ")).",
                target: key)
        }
    }

    func invalid(_ key: String, _ value: String) -> ServerError {
        let takes = Self.keys.first { $0.key == key }?.takes ?? "a valid value"
        return .badRequest("Setting '\(key)' takes \(takes), not '\(value.prefix(40))'.", target: key)
    }

    /// Every setting as `key = value` lines, in the order of ``keys``.
    public var lines: [String] {
        [
            "shared-devices.multi-user = \(sharedDevices.multiUser)",
            "shared-devices.upload-pending-changes-of-previous-user = \(sharedDevices.uploadPendingChangesOfPreviousUser)",
            "passcode.min-length = \(passcode.minLength)",
            "passcode.require-digit = \(passcode.requireDigit)",
            "passcode.require-letter = \(passcode.requireLetter)",
            "passcode.require-symbol = \(passcode.requireSymbol)",
            "passcode.retry-limit = \(passcode.retryLimit)",
            "passcode.lock-timeout-seconds = \(passcode.lockTimeoutSeconds)",
            "app-versions.inactive = \(appVersions.inactive.joined(separator: ","))",
            "devices.settings-refresh-seconds = \(devices.settingsRefreshSeconds)",
            "sign-in.methods = \(signIn.methods.joined(separator: ","))",
            "sign-in.local-passwords = \(signIn.localPasswords)",
            "telemetry.usage = \(telemetry.usage)",
            "telemetry.logs-with-sync = \(telemetry.logsWithSync)",
            "devices.max-per-user = \(devices.maxPerUser)",
            "backups.max-per-device = \(backups.maxPerDevice)",
            "backups.max-mib-per-device = \(backups.maxMiBPerDevice)",
            "audit.retention-days = \(audit.retentionDays)",
        ]
    }
}
