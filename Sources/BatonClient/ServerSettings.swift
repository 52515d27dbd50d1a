import BatonOData

/// The settings a device receives from baton-server in the settings exchange: the one settings document the server
/// serves (`BatonOData/SettingsDocument`). Unknown fields are ignored, missing ones take their defaults.
public typealias ClientSettings = SettingsDocument

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
