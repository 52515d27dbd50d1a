import Foundation

/// The settings document: the policy an admin sets on baton-server (`baton-server settings set`) and devices fetch
/// in the settings exchange — shared-device mode, the passcode policy, which app versions may still be used, how
/// people sign in, what devices send for support, and the server's own bounds (backups, audit retention).
///
/// One type for both ends of the wire: the server stores and serves it (`ServerSettings` in BatonServer), the
/// device decodes and keeps it (`ClientSettings` in BatonClient). Every section and every field is optional on
/// the wire: what a document from an older server or an older copy on a device lacks takes its default, and
/// unknown fields are ignored.
public struct SettingsDocument: Sendable, Hashable, Codable {
    /// How devices are shared between users.
    public struct SharedDevices: Sendable, Hashable, Codable {
        /// Whether several users may onboard on one device. Default: `true`.
        public var multiUser = true
        /// Whether a user's session may upload the pending changes a previous user recorded on the device.
        /// Default: `true`.
        public var uploadPendingChangesOfPreviousUser = true
        /// What happens to a previous user's changes when that is not allowed: they wait for their author.
        public var whenUploadNotAllowed = "wait-for-author"

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = SharedDevices()
            multiUser = try container.decodeIfPresent(Bool.self, forKey: .multiUser) ?? defaults.multiUser
            uploadPendingChangesOfPreviousUser =
                try container.decodeIfPresent(Bool.self, forKey: .uploadPendingChangesOfPreviousUser)
                ?? defaults.uploadPendingChangesOfPreviousUser
            whenUploadNotAllowed =
                try container.decodeIfPresent(String.self, forKey: .whenUploadNotAllowed)
                ?? defaults.whenUploadNotAllowed
        }

        enum CodingKeys: String, CodingKey { case multiUser, uploadPendingChangesOfPreviousUser, whenUploadNotAllowed }
    }

    /// The device passcode every user sets at onboarding.
    public struct Passcode: Sendable, Hashable, Codable {
        /// The shortest passcode. Default: 8. Multi-user mode always requires a passcode: a value below 4
        /// means "no passcode" and falls back to 8.
        public var minLength = 8
        /// Whether a digit is required. Default: `true`.
        public var requireDigit = true
        /// Whether a letter is required. Default: `false`.
        public var requireLetter = false
        /// Whether a character that is neither letter nor digit is required. Default: `false`.
        public var requireSymbol = false
        /// Failed attempts before the user's secure store is wiped. Default: 5.
        public var retryLimit = 5
        /// Seconds of inactivity before the app locks. Default: 300.
        public var lockTimeoutSeconds = 300

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Passcode()
            minLength = try container.decodeIfPresent(Int.self, forKey: .minLength) ?? defaults.minLength
            requireDigit = try container.decodeIfPresent(Bool.self, forKey: .requireDigit) ?? defaults.requireDigit
            requireLetter = try container.decodeIfPresent(Bool.self, forKey: .requireLetter) ?? defaults.requireLetter
            requireSymbol = try container.decodeIfPresent(Bool.self, forKey: .requireSymbol) ?? defaults.requireSymbol
            retryLimit = try container.decodeIfPresent(Int.self, forKey: .retryLimit) ?? defaults.retryLimit
            lockTimeoutSeconds =
                try container.decodeIfPresent(Int.self, forKey: .lockTimeoutSeconds) ?? defaults.lockTimeoutSeconds
        }

        enum CodingKeys: String, CodingKey {
            case minLength, requireDigit, requireLetter, requireSymbol, retryLimit, lockTimeoutSeconds
        }
    }

    /// Which app versions may connect.
    public struct AppVersions: Sendable, Hashable, Codable {
        /// Versions that are no longer allowed; clients that send one get a clear error. Default: none.
        public var inactive: [String] = []

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            inactive = try container.decodeIfPresent([String].self, forKey: .inactive) ?? []
        }

        enum CodingKeys: String, CodingKey { case inactive }
    }

    /// How people sign in on devices.
    public struct SignIn: Sendable, Hashable, Codable {
        /// The methods devices may use: `password` (typed into the app) and `device` (in a browser elsewhere,
        /// RFC 8628). Default: `password`; an admin turns the browser on with
        /// `settings set sign-in.methods password,device` (or `device` alone).
        public var methods = ["password"]
        /// Whether Baton's own passwords are taken at all (the sign-in pages' password form, the password
        /// grant). An airline that signs everyone in through its identity provider turns them off with
        /// `settings set sign-in.local-passwords false`; the pages then show only the providers' buttons.
        /// Default: `true`.
        public var localPasswords = true

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            methods = try container.decodeIfPresent([String].self, forKey: .methods) ?? ["password"]
            localPasswords = try container.decodeIfPresent(Bool.self, forKey: .localPasswords) ?? true
        }

        enum CodingKeys: String, CodingKey { case methods, localPasswords }
    }

    /// How devices keep in touch, and how many one user may be on.
    public struct Devices: Sendable, Hashable, Codable {
        /// Seconds between an open session's requests for the settings and its device's status (besides
        /// unlock, switch and sync). Default: 900.
        public var settingsRefreshSeconds = 900
        /// The devices one user may be registered on at once; joining one more is refused (409
        /// `TooManyDevices`) until they leave one or an admin removes them from one. Default: 20.
        public var maxPerUser = 20

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Devices()
            settingsRefreshSeconds =
                try container.decodeIfPresent(Int.self, forKey: .settingsRefreshSeconds)
                ?? defaults.settingsRefreshSeconds
            // Only the server acts on it: on a device a malformed one takes its default (``readOnDevice``).
            maxPerUser =
                SettingsDocument.isReadOnDevice(decoder)
                ? (try? container.decodeIfPresent(Int.self, forKey: .maxPerUser)) ?? defaults.maxPerUser
                : try container.decodeIfPresent(Int.self, forKey: .maxPerUser) ?? defaults.maxPerUser
        }

        enum CodingKeys: String, CodingKey { case settingsRefreshSeconds, maxPerUser }
    }

    /// How many backups of discarded changes the server keeps per device. A backup is evidence: past either
    /// bound a new one is refused (507 `BackupsFull`) and stays on the device, never an older one dropped; an
    /// admin makes room with `baton-server backups delete`.
    public struct Backups: Sendable, Hashable, Codable {
        /// Backups per device. Default: 100.
        public var maxPerDevice = 100
        /// Sealed bytes per device, in MiB. Default: 16.
        public var maxMiBPerDevice = 16

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            let defaults = Backups()
            maxPerDevice = try container.decodeIfPresent(Int.self, forKey: .maxPerDevice) ?? defaults.maxPerDevice
            maxMiBPerDevice =
                try container.decodeIfPresent(Int.self, forKey: .maxMiBPerDevice) ?? defaults.maxMiBPerDevice
        }

        enum CodingKeys: String, CodingKey { case maxPerDevice, maxMiBPerDevice }
    }

    /// How long the audit log keeps entries.
    public struct Audit: Sendable, Hashable, Codable {
        /// Days an entry is kept; older ones go with `baton-server audit prune` and the hourly prune of `serve`.
        /// Default: 400.
        public var retentionDays = 400

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            retentionDays = try container.decodeIfPresent(Int.self, forKey: .retentionDays) ?? Audit().retentionDays
        }

        enum CodingKeys: String, CodingKey { case retentionDays }
    }

    /// What devices send for support.
    public struct Telemetry: Sendable, Hashable, Codable {
        /// Whether devices record usage events (of users who agreed to it) and send them with each sync.
        /// Default: true.
        public var usage = true
        /// Whether every sync also sends the device's log. Default: false (logs go when an admin orders them
        /// for a device, or when a person sends them to support).
        public var logsWithSync = false

        /// The defaults.
        public init() {}

        /// Reads the section; a missing field takes its default.
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            usage = try container.decodeIfPresent(Bool.self, forKey: .usage) ?? true
            logsWithSync = try container.decodeIfPresent(Bool.self, forKey: .logsWithSync) ?? false
        }

        enum CodingKeys: String, CodingKey { case usage, logsWithSync }
    }

    /// Shared-device mode.
    public var sharedDevices = SharedDevices()
    /// The passcode policy.
    public var passcode = Passcode()
    /// App version status.
    public var appVersions = AppVersions()
    /// How devices keep in touch.
    public var devices = Devices()
    /// How people sign in on devices.
    public var signIn = SignIn()
    /// What devices send for support.
    public var telemetry = Telemetry()
    /// Backups of discarded changes kept per device.
    public var backups = Backups()
    /// The audit log's retention.
    public var audit = Audit()

    /// The defaults.
    public init() {}

    /// Reads a stored document; sections a document from an older server lacks take their defaults.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sharedDevices = try container.decodeIfPresent(SharedDevices.self, forKey: .sharedDevices) ?? SharedDevices()
        passcode = try container.decodeIfPresent(Passcode.self, forKey: .passcode) ?? Passcode()
        appVersions = try container.decodeIfPresent(AppVersions.self, forKey: .appVersions) ?? AppVersions()
        devices = try container.decodeIfPresent(Devices.self, forKey: .devices) ?? Devices()
        // The sections only the server acts on: on a device a malformed one takes its defaults (``readOnDevice``).
        let lenient = Self.isReadOnDevice(decoder)
        func serverOnly<Section: Decodable>(_ key: CodingKeys, _ fallback: Section) throws -> Section {
            lenient
                ? (try? container.decodeIfPresent(Section.self, forKey: key)) ?? fallback
                : try container.decodeIfPresent(Section.self, forKey: key) ?? fallback
        }
        signIn = try serverOnly(.signIn, SignIn())
        telemetry = try container.decodeIfPresent(Telemetry.self, forKey: .telemetry) ?? Telemetry()
        backups = try serverOnly(.backups, Backups())
        audit = try serverOnly(.audit, Audit())
    }

    /// Set to `true` in a decoder's `userInfo` where a device reads the document (``deviceDecoder()``): the sections
    /// and fields only the server acts on — `signIn`, `backups`, `audit`, `devices.maxPerUser` — take their defaults
    /// when malformed, so a field the device never reads cannot keep it from learning the policy it does read.
    /// Everything a device acts on stays strict: a field of the wrong type fails the whole document.
    public static let readOnDevice: CodingUserInfoKey = {
        guard let key = CodingUserInfoKey(rawValue: "baton.settings.readOnDevice") else {
            preconditionFailure("a valid user-info key")
        }
        return key
    }()

    /// A decoder for the document as a device reads it from the server (``readOnDevice``).
    ///
    /// - Returns: A JSON decoder with ``readOnDevice`` set.
    public static func deviceDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.userInfo[readOnDevice] = true
        return decoder
    }

    static func isReadOnDevice(_ decoder: any Decoder) -> Bool { decoder.userInfo[readOnDevice] as? Bool == true }

    /// The smallest passcode length multi-user mode falls back to when the policy asks for none.
    public static let fallbackPasscodeLength = 8

    /// The settings as devices must apply them: multi-user mode always requires a passcode.
    public var effective: SettingsDocument {
        var settings = self
        if settings.sharedDevices.multiUser, settings.passcode.minLength < 4 {
            settings.passcode.minLength = Self.fallbackPasscodeLength
        }
        return settings
    }
}
