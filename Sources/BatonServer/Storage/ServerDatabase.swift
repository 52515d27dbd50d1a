import Foundation
import GRDB

/// The server's SQLite database (WAL mode, so admin commands and the server can use it at once), with its
/// migrations.
public struct ServerDatabase: Sendable {
    /// The GRDB pool.
    let pool: DatabasePool
    /// This process's connections for the reads done in place.
    let readers: InlineReaders

    /// Opens the database in a data directory and runs pending migrations.
    ///
    /// - Throws: ``ServerSetupError`` when the file cannot be opened or migrated.
    public init(_ directory: DataDirectory) throws(ServerSetupError) {
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(5)
            pool = try DatabasePool(path: directory.databaseURL.path, configuration: configuration)
            try Self.migrator.migrate(pool)
            readers = InlineReaders(pool: pool)
        } catch {
            throw ServerSetupError("Cannot open the database in '\(directory.url.path)': \(error)")
        }
        try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: directory.databaseURL.path)
    }

    /// Closes every connection to the database.
    func close() {
        readers.close()
        try? pool.close()
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("identity") { db in
            try db.execute(
                sql: """
                    CREATE TABLE users (
                        name TEXT PRIMARY KEY NOT NULL,
                        displayName TEXT NOT NULL,
                        role TEXT NOT NULL,
                        passwordHash TEXT NOT NULL,
                        disabled INTEGER NOT NULL DEFAULT 0,
                        createdAt REAL NOT NULL
                    );
                    CREATE TABLE refreshTokens (
                        hash TEXT PRIMARY KEY NOT NULL,
                        family TEXT NOT NULL,
                        user TEXT NOT NULL,
                        clientID TEXT NOT NULL,
                        scope TEXT NOT NULL,
                        createdAt REAL NOT NULL,
                        expiresAt REAL NOT NULL,
                        usedAt REAL,
                        revokedAt REAL
                    );
                    CREATE INDEX refreshTokensFamily ON refreshTokens(family);
                    CREATE INDEX refreshTokensUser ON refreshTokens(user);
                    CREATE TABLE authorizationCodes (
                        hash TEXT PRIMARY KEY NOT NULL,
                        user TEXT NOT NULL,
                        clientID TEXT NOT NULL,
                        redirectURI TEXT NOT NULL,
                        codeChallenge TEXT NOT NULL,
                        scope TEXT NOT NULL,
                        expiresAt REAL NOT NULL,
                        usedAt REAL,
                        family TEXT
                    );
                    CREATE TABLE revokedAccessTokens (
                        jti TEXT PRIMARY KEY NOT NULL,
                        expiresAt REAL NOT NULL
                    );
                    CREATE TABLE settings (
                        id INTEGER PRIMARY KEY CHECK (id = 1),
                        document TEXT NOT NULL
                    );
                    CREATE TABLE devices (
                        id TEXT PRIMARY KEY NOT NULL,
                        sealedStoreKey BLOB NOT NULL,
                        createdAt REAL NOT NULL
                    );
                    CREATE TABLE deviceRegistrations (
                        device TEXT NOT NULL REFERENCES devices(id),
                        user TEXT NOT NULL,
                        registeredAt REAL NOT NULL,
                        active INTEGER NOT NULL,
                        PRIMARY KEY (device, user)
                    );
                    CREATE TABLE signingKeys (
                        id TEXT PRIMARY KEY NOT NULL,
                        device TEXT NOT NULL,
                        user TEXT NOT NULL,
                        publicKey BLOB NOT NULL,
                        registeredAt REAL NOT NULL,
                        replacedAt REAL
                    );
                    CREATE INDEX signingKeysOwner ON signingKeys(device, user);
                    CREATE TABLE audit (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        at REAL NOT NULL,
                        actor TEXT,
                        action TEXT NOT NULL,
                        subject TEXT,
                        address TEXT,
                        detail TEXT
                    );
                    """)
        }
        migrator.registerMigration("auditOutbox") { db in
            // The key of an entry moved from the data database's outbox (see `AuditLog.collect(from:)`): moving
            // it twice after a crash adds it once.
            try db.execute(
                sql: """
                    ALTER TABLE audit ADD COLUMN outboxKey TEXT;
                    CREATE UNIQUE INDEX auditOutboxKey ON audit (outboxKey) WHERE outboxKey IS NOT NULL;
                    """)
        }
        migrator.registerMigration("discardedChanges") { db in
            try db.execute(
                sql: """
                    CREATE TABLE discardedChanges (
                        id INTEGER PRIMARY KEY AUTOINCREMENT,
                        device TEXT NOT NULL,
                        author TEXT NOT NULL,
                        uploader TEXT NOT NULL,
                        count INTEGER NOT NULL,
                        receivedAt REAL NOT NULL,
                        sealed BLOB NOT NULL
                    );
                    """)
        }
        migrator.registerMigration("deviceBinding") { db in
            // Devices prove possession of a device key; a backup keeps the store key it was sealed with (a device
            // left by all its users gets a new one); signing keys belong to one (user, device) for ever.
            try db.execute(
                sql: """
                    ALTER TABLE devices ADD COLUMN publicKey BLOB;
                    ALTER TABLE discardedChanges ADD COLUMN sealedStoreKey BLOB;
                    CREATE TABLE signingKeysOwned (
                        user TEXT NOT NULL,
                        device TEXT NOT NULL,
                        id TEXT NOT NULL,
                        publicKey BLOB NOT NULL,
                        registeredAt REAL NOT NULL,
                        replacedAt REAL,
                        PRIMARY KEY (user, device, id)
                    );
                    INSERT INTO signingKeysOwned (user, device, id, publicKey, registeredAt, replacedAt)
                        SELECT user, device, id, publicKey, registeredAt, replacedAt FROM signingKeys;
                    DROP TABLE signingKeys;
                    ALTER TABLE signingKeysOwned RENAME TO signingKeys;
                    CREATE UNIQUE INDEX signingKeysID ON signingKeys(id);
                    CREATE INDEX signingKeysOwner ON signingKeys(device, user);
                    """)
        }
        return migrator
    }
}
