import BatonFiles
import Crypto
import Foundation

/// The server's data directory: the SQLite database and the key files, created on first use.
///
/// Key files are written atomically with permissions 0600 in a 0700 `keys` folder. The directory is shared
/// by `baton-server serve` and the admin commands (`user`, `settings`), which may run at the same time.
public struct DataDirectory: Sendable {
    /// The directory.
    public let url: URL

    /// Opens (and creates, if needed) a data directory.
    ///
    /// - Throws: ``ServerSetupError`` when the directory cannot be created or is not writable.
    public init(_ url: URL) throws(ServerSetupError) {
        self.url = url
        // A `keys` that is a symbolic link would have the server chmod and write into wherever it points.
        if let attributes = try? FileManager.default.attributesOfItem(atPath: keysURL.path),
            attributes[.type] as? FileAttributeType == .typeSymbolicLink
        {
            throw ServerSetupError(
                "'\(keysURL.path)' is a symbolic link; the server keeps its keys only in a real directory of its own.")
        }
        do {
            try FileManager.default.createDirectory(at: keysURL, withIntermediateDirectories: true)
            try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: keysURL.path)
        } catch {
            throw ServerSetupError("Cannot create the data directory '\(url.path)': \(error.localizedDescription)")
        }
    }

    /// The SQLite database file.
    public var databaseURL: URL { url.appendingPathComponent("server.sqlite") }
    /// Its word is rewritten before and after every commit that changes a user's, token's or device's status
    /// (``StatusEpoch``, ``TokenStatusCache``).
    var statusEpochURL: URL { url.appendingPathComponent("status.epoch") }

    var keysURL: URL { url.appendingPathComponent("keys") }

    /// The token-signing key file of a data directory from before the keys lived in the database, if any.
    var legacySigningKeyURL: URL { keysURL.appendingPathComponent("signing-key.pem") }

    /// The master key that encrypts device store keys at rest (256 bits), created on first use: in `file` when
    /// given (outside the data directory, so a copy of the data directory alone opens no store key), else in
    /// `keys/master.key`.
    func masterKey(file given: URL? = nil) throws(ServerSetupError) -> SymmetricKey {
        let file = given ?? keysURL.appendingPathComponent("master.key")
        if let key = try Self.readMasterKey(file) { return key }
        let key = SymmetricKey(size: .bits256)
        let created: Bool
        do {
            created = try AtomicFile.create(key.withUnsafeBytes { Data($0) }, at: file)
        } catch {
            throw ServerSetupError("Cannot write the key file '\(file.lastPathComponent)': \(error.message)")
        }
        // Another process (the server and an admin command started together) created it first: its key is the one.
        guard created else {
            guard let key = try Self.readMasterKey(file) else {
                throw ServerSetupError(
                    "The master key file '\(file.path)' exists but cannot be read; check its owner, permissions and, if it is a link, where it points."
                )
            }
            return key
        }
        return key
    }

    /// Reads a master-key file that must exist: with PostgreSQL every instance needs the same key, so none is
    /// made up.
    static func existingMasterKey(_ file: URL) throws(ServerSetupError) -> SymmetricKey {
        guard let key = try readMasterKey(file) else {
            throw ServerSetupError(
                "Cannot read the master-key file '\(file.path)'; create it once with (umask 077; head -c 32 /dev/urandom > \(file.path)) and give every instance a copy."
            )
        }
        return key
    }

    /// The key in `file`, or nil when it cannot be read.
    ///
    /// - Throws: ``ServerSetupError`` when it holds anything but 32 bytes.
    static func readMasterKey(_ file: URL) throws(ServerSetupError) -> SymmetricKey? {
        guard let data = try? Data(contentsOf: file) else { return nil }
        guard data.count == 32 else {
            throw ServerSetupError("The master key file '\(file.path)' is damaged (expected 32 bytes).")
        }
        return SymmetricKey(data: data)
    }
}

/// The server cannot start or an admin command cannot run: a missing or unwritable data directory, a damaged
/// key file, a failed migration.
public struct ServerSetupError: Error, Sendable, CustomStringConvertible {
    /// What failed and what to do.
    public var description: String

    init(_ description: String) { self.description = description }
}
