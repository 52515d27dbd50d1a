import BatonOData
import Foundation
import Testing

/// The one settings document both ends of the wire use: what the server stores and serves, what a device decodes
/// and keeps (an older server's document, an older copy on a device).
@Suite struct SettingsDocumentTests {
    func decode(_ json: String) throws -> SettingsDocument {
        try JSONDecoder().decode(SettingsDocument.self, from: Data(json.utf8))
    }

    @Test func anEmptyDocumentIsTheDefaults() throws {
        let empty = try decode("{}")
        #expect(empty == SettingsDocument())
        #expect(empty.sharedDevices.multiUser && empty.sharedDevices.uploadPendingChangesOfPreviousUser)
        #expect(empty.passcode.minLength == 8 && empty.passcode.retryLimit == 5)
        #expect(empty.devices.settingsRefreshSeconds == 900 && empty.devices.maxPerUser == 20)
        #expect(empty.signIn.methods == ["password"] && empty.signIn.localPasswords)
        #expect(empty.telemetry.usage && !empty.telemetry.logsWithSync)
        #expect(empty.backups.maxPerDevice == 100 && empty.audit.retentionDays == 400)
    }

    /// A device's copy written before the server had sign-in, backups, audit or `maxPerUser`, and a section with
    /// only some of its fields: what is missing takes its default, what is there is kept; unknown keys are ignored.
    @Test func missingFieldsTakeTheirDefaultsAndUnknownOnesAreIgnored() throws {
        let old = try decode(
            """
            {"sharedDevices":{"uploadPendingChangesOfPreviousUser":false},
             "passcode":{"minLength":6,"requireSymbol":true},
             "devices":{"settingsRefreshSeconds":120},
             "telemetry":{"logsWithSync":true},
             "appVersions":{},
             "somethingNewer":{"x":1}}
            """)
        #expect(old.sharedDevices.multiUser)
        #expect(!old.sharedDevices.uploadPendingChangesOfPreviousUser)
        #expect(old.sharedDevices.whenUploadNotAllowed == "wait-for-author")
        #expect(old.passcode.minLength == 6 && old.passcode.requireSymbol && old.passcode.requireDigit)
        #expect(old.devices.settingsRefreshSeconds == 120 && old.devices.maxPerUser == 20)
        #expect(old.telemetry.usage && old.telemetry.logsWithSync)
        #expect(old.signIn == SettingsDocument.SignIn() && old.audit == SettingsDocument.Audit())
    }

    /// A field of the wrong type is an error, never silently the default: a server that says `"usage": "no"`
    /// must not turn usage events on.
    @Test(arguments: [
        #"{"telemetry":{"usage":"no"}}"#, #"{"passcode":{"minLength":"8"}}"#, #"{"sharedDevices":[]}"#,
        #"{"appVersions":{"inactive":"1.0"}}"#, #"{"devices":{"maxPerUser":1.5}}"#, "[]",
    ])
    func aFieldOfTheWrongTypeIsAnError(json: String) {
        #expect(throws: DecodingError.self) { try decode(json) }
    }

    /// A device reads past a malformed section only the server acts on (sign-in, backups, audit, the device bound
    /// per user): it takes their defaults and keeps what it does act on. The server's own reading stays strict, and
    /// so does the device's for everything it acts on.
    @Test(arguments: [
        #"{"backups":{"maxMiBPerDevice":0.5},"passcode":{"minLength":10}}"#,
        #"{"audit":{"retentionDays":"400d"},"passcode":{"minLength":10}}"#,
        #"{"signIn":"password","passcode":{"minLength":10}}"#,
        #"{"devices":{"maxPerUser":1e40,"settingsRefreshSeconds":60},"passcode":{"minLength":10}}"#,
    ])
    func aDeviceReadsPastWhatOnlyTheServerUses(json: String) throws {
        let read = try SettingsDocument.deviceDecoder().decode(SettingsDocument.self, from: Data(json.utf8))
        #expect(read.passcode.minLength == 10)
        #expect(read.backups == SettingsDocument.Backups() && read.audit == SettingsDocument.Audit())
        #expect(read.signIn == SettingsDocument.SignIn())
        #expect(read.devices.maxPerUser == SettingsDocument.Devices().maxPerUser)
        // What the device acts on in the same section is kept, not reset with the malformed field beside it.
        if json.contains("settingsRefreshSeconds") { #expect(read.devices.settingsRefreshSeconds == 60) }
        #expect(throws: DecodingError.self) { try decode(json) }
    }

    @Test func aDeviceStillRefusesAWrongTypeItActsOn() {
        for json in [#"{"telemetry":{"usage":"no"}}"#, #"{"devices":{"settingsRefreshSeconds":"60"}}"#] {
            #expect(throws: DecodingError.self) {
                try SettingsDocument.deviceDecoder().decode(SettingsDocument.self, from: Data(json.utf8))
            }
        }
    }

    /// What the server encodes (every field, sorted keys, as stored and served) reads back the same on a device.
    @Test func whatTheServerWritesTheDeviceReads() throws {
        var settings = SettingsDocument()
        settings.sharedDevices.uploadPendingChangesOfPreviousUser = false
        settings.passcode.minLength = 12
        settings.appVersions.inactive = ["1.0", "1.1"]
        settings.devices.settingsRefreshSeconds = 60
        settings.signIn.methods = ["password", "device"]
        settings.telemetry.usage = false
        settings.backups.maxMiBPerDevice = 1
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let data = try encoder.encode(settings)
        #expect(try SettingsDocument.deviceDecoder().decode(SettingsDocument.self, from: data) == settings)
        #expect(try JSONDecoder().decode(SettingsDocument.self, from: data) == settings)
        let text = String(decoding: data, as: UTF8.self)
        #expect(
            text.contains(#""settingsRefreshSeconds":60"#)
                && text.contains(#""uploadPendingChangesOfPreviousUser":false"#))
    }

    @Test func multiUserModeAlwaysHasAPasscode() {
        var settings = SettingsDocument()
        settings.passcode.minLength = 0
        #expect(settings.effective.passcode.minLength == SettingsDocument.fallbackPasscodeLength)
        settings.sharedDevices.multiUser = false
        #expect(settings.effective.passcode.minLength == 0)
        settings.passcode.minLength = 5
        settings.sharedDevices.multiUser = true
        #expect(settings.effective.passcode.minLength == 5)
    }
}
