/// The settings a device receives from baton-server (the settings exchange): shared-device rules, passcode
/// policy, inactive app versions. Unknown fields are ignored, missing ones take the server's defaults.
public struct ClientSettings: Sendable, Hashable, Codable {
    public struct SharedDevices: Sendable, Hashable, Codable {
        /// Several users may share one device.
        public var multiUser = true
        /// The signed-in user may upload the pending changes of a previous user, signed by their author.
        public var uploadPendingChangesOfPreviousUser = true
        /// What happens to other users' changes when that is not allowed (`wait-for-author`).
        public var whenUploadNotAllowed = "wait-for-author"

        public init() {}

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
    }

    public struct Passcode: Sendable, Hashable, Codable {
        public var minLength = 8
        public var requireDigit = true
        public var requireLetter = false
        public var requireSymbol = false
        /// Wrong passcodes in a row before the user's secure store is wiped.
        public var retryLimit = 5
        /// Inactivity before the app locks.
        public var lockTimeoutSeconds = 300

        public init() {}

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
    }

    public struct AppVersions: Sendable, Hashable, Codable {
        public var inactive: [String] = []
        public init() {}
        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            inactive = try container.decodeIfPresent([String].self, forKey: .inactive) ?? []
        }
    }

    public struct Devices: Sendable, Hashable, Codable {
        /// Seconds between an open session's contacts with the server; `nil` when the server does not say.
        public var settingsRefreshSeconds: Int?
        public init() {}
    }

    /// What the device sends for support; absent from older servers.
    public struct Telemetry: Sendable, Hashable, Codable {
        /// Whether usage events (of users who agreed to them) are recorded and sent. Absent: yes.
        public var usage: Bool?
        /// Whether every sync also sends the device's log. Absent: no.
        public var logsWithSync: Bool?
        public init() {}
    }

    public var sharedDevices = SharedDevices()
    public var passcode = Passcode()
    public var appVersions = AppVersions()
    public var devices = Devices()
    public var telemetry = Telemetry()

    public init() {}

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        sharedDevices = try container.decodeIfPresent(SharedDevices.self, forKey: .sharedDevices) ?? SharedDevices()
        passcode = try container.decodeIfPresent(Passcode.self, forKey: .passcode) ?? Passcode()
        appVersions = try container.decodeIfPresent(AppVersions.self, forKey: .appVersions) ?? AppVersions()
        devices = try container.decodeIfPresent(Devices.self, forKey: .devices) ?? Devices()
        telemetry = try container.decodeIfPresent(Telemetry.self, forKey: .telemetry) ?? Telemetry()
    }
}

/// What `/.well-known/baton-configuration` says about a server: where everything is.
public struct ServerConfiguration: Sendable, Hashable, Codable {
    public var issuer: String
    public var settingsEndpoint: String
    public var userEndpoint: String
    /// With `{deviceID}` in place of the device id.
    public var deviceRegistrationEndpoint: String
    /// With `{deviceID}` in place of the device id.
    public var deviceStoreKeyEndpoint: String
    /// With `{deviceID}` in place of the device id; where a device sends backups of discarded changes (nil
    /// for a server without it).
    public var deviceDiscardedChangesEndpoint: String?
    /// With `{deviceID}` in place of the device id; what an admin ordered for the device (nil for an older server).
    public var deviceStatusEndpoint: String?
    /// With `{deviceID}` in place of the device id; where a device reports a wipe done (nil for an older server).
    public var deviceWipedEndpoint: String?
    /// With `{deviceID}`: where the device sends usage events; absent from older servers.
    public var deviceUsageEndpoint: String?
    /// With `{deviceID}`: where the device sends its log; absent from older servers.
    public var deviceLogsEndpoint: String?
    /// With `{deviceID}`: where the device declares users who left it (``SignedDeparture``); absent from older
    /// servers.
    public var deviceDeparturesEndpoint: String?
    public var odataServiceRoot: String
    /// How people may sign in on devices (`password`, `device`); nil from an older server (password only).
    public var signInMethods: [String]?
    public var clientID: String
    public var oauthAuthorizationServer: String

    enum CodingKeys: String, CodingKey {
        case issuer
        case settingsEndpoint = "settings_endpoint"
        case userEndpoint = "user_endpoint"
        case deviceRegistrationEndpoint = "device_registration_endpoint"
        case deviceStoreKeyEndpoint = "device_store_key_endpoint"
        case deviceDiscardedChangesEndpoint = "device_discarded_changes_endpoint"
        case deviceStatusEndpoint = "device_status_endpoint"
        case deviceWipedEndpoint = "device_wiped_endpoint"
        case deviceUsageEndpoint = "device_usage_endpoint"
        case deviceLogsEndpoint = "device_logs_endpoint"
        case deviceDeparturesEndpoint = "device_departures_endpoint"
        case odataServiceRoot = "odata_service_root"
        case signInMethods = "sign_in_methods"
        case clientID = "client_id"
        case oauthAuthorizationServer = "oauth_authorization_server"
    }
}

/// The parts of the OAuth 2.0 authorization server metadata (RFC 8414) the client uses.
public struct AuthorizationServerMetadata: Sendable, Hashable, Codable {
    public var issuer: String
    public var tokenEndpoint: String
    public var revocationEndpoint: String?
    /// RFC 8628's endpoint, for sign-in through a browser elsewhere (nil for a server without it).
    public var deviceAuthorizationEndpoint: String?
    public var grantTypesSupported: [String]?

    enum CodingKeys: String, CodingKey {
        case issuer
        case tokenEndpoint = "token_endpoint"
        case revocationEndpoint = "revocation_endpoint"
        case deviceAuthorizationEndpoint = "device_authorization_endpoint"
        case grantTypesSupported = "grant_types_supported"
    }
}

/// The signed-in user, as `/me` describes them.
public struct ServerUser: Sendable, Hashable, Codable {
    public var name: String
    public var displayName: String
    public var role: String

    public init(name: String, displayName: String, role: String) {
        self.name = name
        self.displayName = displayName
        self.role = role
    }
}
