import BatonOData

/// The settings document as the server stores and serves it: the same type devices decode
/// (`BatonOData/SettingsDocument`), with the command-line keys of `baton-server settings` in
/// `ServerSettings+Keys.swift`.
public typealias ServerSettings = SettingsDocument
