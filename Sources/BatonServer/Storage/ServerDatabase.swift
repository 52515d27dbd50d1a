import BatonOData
import BatonSQLGRDB
import Foundation
import GRDB

/// The server's own tables — users, tokens, the sign-in throttle, settings, devices, audit — on either engine
/// (``ServerStorage``), with their migrations.
///
/// SQLite: `server.sqlite` in the data directory, migrated with GRDB's `DatabaseMigrator` (the migrations below,
/// kept as they shipped). PostgreSQL: the same tables in the database's default schema, created by
/// `postgresMigrations`, recorded in `baton_migrations`. On both, a database that a newer `baton-server`
/// migrated (a migration this one does not know) is refused before anything is written.
public struct ServerDatabase: Sendable {
    /// Where the tables are.
    let storage: StorageEngine
    /// Tells the token-status caches that a user, token or device status changed (``TokenStatusCache``).
    let statusChanges: StatusChangeSignal
    /// SQLite: hears the commits that change a status (kept for the database's lifetime).
    let statusObserver: StatusTablesObserver?

    /// Opens `server.sqlite` in a data directory and runs pending migrations.
    ///
    /// - Throws: ``ServerSetupError`` when the file cannot be opened or migrated.
    public init(_ directory: DataDirectory) throws(ServerSetupError) {
        let storage: SQLiteStorage
        do {
            storage = try SQLiteStorage(path: directory.databaseURL.path)
        } catch {
            throw ServerSetupError("Cannot open the database in '\(directory.url.path)': \(error)")
        }
        do {
            if try storage.pool.read({ try Self.migrator.hasBeenSuperseded($0) }) {
                throw ServerSetupError(
                    "The database in '\(directory.url.path)' was migrated by a newer baton-server; run that version.")
            }
            try Self.migrator.migrate(storage.pool)
        } catch let error as ServerSetupError {
            throw error
        } catch {
            throw ServerSetupError("Cannot migrate the database in '\(directory.url.path)': \(error)")
        }
        try? FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: directory.databaseURL.path)
        self.storage = .sqlite(storage)
        let signal = StatusChangeSignal(epochURL: directory.statusEpochURL)
        let observer = StatusTablesObserver(signal: signal)
        storage.pool.add(transactionObserver: observer, extent: .databaseLifetime)
        statusChanges = signal
        statusObserver = observer
    }

    /// Uses a PostgreSQL database, running pending migrations.
    ///
    /// - Throws: ``ServerSetupError`` for a database a newer `baton-server` migrated, or a failed migration.
    public init(postgres storage: PostgresStorage) async throws(ServerSetupError) {
        do {
            try await Self.migrate(storage)
        } catch let error as StorageError where error.kind == .newerSchema {
            throw ServerSetupError("The database \(storage.location.database) \(error.description)")
        } catch {
            throw ServerSetupError("Cannot migrate the database \(storage.location.database): \(error)")
        }
        self.storage = .postgres(storage)
        statusChanges = StatusChangeSignal(epochURL: nil)
        statusObserver = nil
    }

    /// This process committed a change to a user's, token's or device's status: its token-status cache forgets
    /// what it knew at once. (SQLite's observer and PostgreSQL's `NOTIFY` tell the other processes.)
    func statusChanged() {
        statusChanges.notifyListeners()
    }

    /// The SQLite pool (the data directory's admin paths and tests).
    var pool: DatabasePool? {
        guard case .sqlite(let storage) = storage else { return nil }
        return storage.pool
    }

    /// Closes every connection to the database.
    func close() {
        storage.close()
    }

    /// The PostgreSQL migrations, in order: each runs once, in one transaction, under an advisory lock so that
    /// instances starting together do not race.
    static let postgresMigrations: [(name: String, statements: [String])] = [
        (
            "v1",
            [
                """
                CREATE TABLE users (
                    name text PRIMARY KEY, displayName text NOT NULL, role text NOT NULL, passwordHash text NOT NULL,
                    disabled integer NOT NULL DEFAULT 0, createdAt double precision NOT NULL)
                """,
                """
                CREATE TABLE refreshTokens (
                    hash text PRIMARY KEY, family text NOT NULL, "user" text NOT NULL, clientID text NOT NULL,
                    scope text NOT NULL, createdAt double precision NOT NULL, expiresAt double precision NOT NULL,
                    usedAt double precision, revokedAt double precision)
                """,
                "CREATE INDEX refreshTokensFamily ON refreshTokens(family)",
                #"CREATE INDEX refreshTokensUser ON refreshTokens("user")"#,
                """
                CREATE TABLE authorizationCodes (
                    hash text PRIMARY KEY, "user" text NOT NULL, clientID text NOT NULL, redirectURI text NOT NULL,
                    codeChallenge text NOT NULL, scope text NOT NULL, expiresAt double precision NOT NULL,
                    usedAt double precision, family text)
                """,
                "CREATE TABLE revokedAccessTokens (jti text PRIMARY KEY, expiresAt double precision NOT NULL)",
                "CREATE TABLE settings (id integer PRIMARY KEY CHECK (id = 1), document text NOT NULL)",
                """
                CREATE TABLE devices (
                    id text PRIMARY KEY, sealedStoreKey bytea NOT NULL, createdAt double precision NOT NULL,
                    publicKey bytea)
                """,
                """
                CREATE TABLE deviceRegistrations (
                    device text NOT NULL REFERENCES devices(id), "user" text NOT NULL,
                    registeredAt double precision NOT NULL, active integer NOT NULL, PRIMARY KEY (device, "user"))
                """,
                """
                CREATE TABLE signingKeys (
                    "user" text NOT NULL, device text NOT NULL, id text NOT NULL, publicKey bytea NOT NULL,
                    registeredAt double precision NOT NULL, replacedAt double precision,
                    PRIMARY KEY ("user", device, id))
                """,
                "CREATE UNIQUE INDEX signingKeysID ON signingKeys(id)",
                #"CREATE INDEX signingKeysOwner ON signingKeys(device, "user")"#,
                """
                CREATE TABLE audit (
                    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, at double precision NOT NULL, actor text,
                    action text NOT NULL, subject text, address text, detail text, outboxKey text)
                """,
                "CREATE UNIQUE INDEX auditOutboxKey ON audit (outboxKey) WHERE outboxKey IS NOT NULL",
                """
                CREATE TABLE discardedChanges (
                    id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, device text NOT NULL, author text NOT NULL,
                    uploader text NOT NULL, count bigint NOT NULL, receivedAt double precision NOT NULL,
                    sealed bytea NOT NULL, sealedStoreKey bytea)
                """,
            ] + signInThrottleStatements(real: "double precision")
                + tokenSigningKeysStatements(
                    real: "double precision", blob: "bytea")
        ),
        ("cockpitSessions", cockpitSessionsStatements(real: "double precision")),
        ("cockpitDevicesAndAudit", cockpitDevicesAndAuditStatements(real: "double precision")),
        ("deviceTokenFamilies", deviceTokenFamiliesStatements),
        ("deviceWipes", deviceWipesStatements(real: "double precision")),
        ("deviceAuthorizations", deviceAuthorizationsStatements(real: "double precision")),
        (
            "deviceTelemetry",
            deviceTelemetryStatements(
                real: "double precision", identity: "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
        ),
        ("deviceAuthorizationAddresses", deviceAuthorizationAddressesStatements),
        ("deviceProofs", deviceProofsStatements),
        ("storageBounds", storageBoundsStatements),
        ("auditAggregates", auditAggregatesStatements),
        ("identityProviders", identityProvidersStatements(real: "double precision", blob: "bytea")),
        (
            // Every instance's token-status cache hears, at the commit, a change to what a token's status read
            // returns — whoever made it (another instance, an admin command, psql).
            "statusNotify",
            [
                """
                CREATE OR REPLACE FUNCTION baton_status_changed() RETURNS trigger AS $$
                BEGIN
                    PERFORM pg_notify('baton_status', '');
                    RETURN NULL;
                END
                $$ LANGUAGE plpgsql
                """,
                // Row triggers with WHEN: an update that changes nothing of a status (a device's contact, a backup's
                // `SET id = id`) notifies nobody, and identical notifications of one transaction are sent once.
                """
                CREATE TRIGGER baton_status_users AFTER UPDATE ON users FOR EACH ROW
                WHEN (OLD.disabled IS DISTINCT FROM NEW.disabled OR OLD.role IS DISTINCT FROM NEW.role)
                EXECUTE FUNCTION baton_status_changed()
                """,
                """
                CREATE TRIGGER baton_status_users_deleted AFTER DELETE ON users FOR EACH ROW
                EXECUTE FUNCTION baton_status_changed()
                """,
                """
                CREATE TRIGGER baton_status_refresh_tokens AFTER UPDATE ON refreshTokens FOR EACH ROW
                WHEN (OLD.revokedAt IS DISTINCT FROM NEW.revokedAt) EXECUTE FUNCTION baton_status_changed()
                """,
                """
                CREATE TRIGGER baton_status_revoked_access AFTER INSERT ON revokedAccessTokens FOR EACH ROW
                EXECUTE FUNCTION baton_status_changed()
                """,
                """
                CREATE TRIGGER baton_status_devices AFTER UPDATE ON devices FOR EACH ROW
                WHEN (OLD.revokedAt IS DISTINCT FROM NEW.revokedAt) EXECUTE FUNCTION baton_status_changed()
                """,
                """
                CREATE TRIGGER baton_status_devices_deleted AFTER DELETE ON devices FOR EACH ROW
                EXECUTE FUNCTION baton_status_changed()
                """,
                """
                CREATE TRIGGER baton_status_device_families AFTER INSERT OR UPDATE OR DELETE ON deviceTokenFamilies
                FOR EACH ROW EXECUTE FUNCTION baton_status_changed()
                """,
            ]
        ),
        ("auditSubjectOfDevices", auditSubjectOfDevicesStatements),
    ]

    /// Runs the PostgreSQL migrations not yet run.
    ///
    /// - Throws: ``StorageError`` (`newerSchema`) when the database has a migration this server does not know.
    static func migrate(_ storage: PostgresStorage) async throws {
        try await storage.migrate { db in
            // One migrating instance at a time; the others wait, then find nothing to do.
            try await db.execute("SELECT pg_advisory_xact_lock(7243019)")
            try await db.execute(
                "CREATE TABLE IF NOT EXISTS baton_migrations (name text PRIMARY KEY, appliedAt double precision NOT NULL)"
            )
            let applied = Set(try await db.fetchAll("SELECT name FROM baton_migrations").compactMap { $0[0].text })
            let known = Set(postgresMigrations.map { $0.name })
            if let unknown = applied.subtracting(known).sorted().first {
                throw StorageError(
                    .newerSchema,
                    "was migrated by a newer baton-server (migration '\(unknown.prefix(scalars: 64))'); run that version."
                )
            }
            for migration in postgresMigrations where !applied.contains(migration.name) {
                for statement in migration.statements { try await db.execute(statement, []) }
                try await db.execute(
                    "INSERT INTO baton_migrations (name, appliedAt) VALUES (?, ?)", migration.name,
                    Date().timeIntervalSince1970)
            }
        }
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
        migrator.registerMigration("instantsAsNumbers") { db in
            // Instants were once written as GRDB's date text; every instant is now seconds since 1970, on both
            // engines, so they compare and order as numbers.
            try db.execute(
                sql: """
                    UPDATE users SET createdAt = (julianday(createdAt) - 2440587.5) * 86400.0
                        WHERE typeof(createdAt) = 'text';
                    UPDATE audit SET at = (julianday(at) - 2440587.5) * 86400.0 WHERE typeof(at) = 'text';
                    """)
        }
        migrator.registerMigration("signInThrottle") { db in
            for statement in signInThrottleStatements(real: "REAL") { try db.execute(sql: statement) }
        }
        migrator.registerMigration("tokenSigningKeys") { db in
            for statement in tokenSigningKeysStatements(real: "REAL", blob: "BLOB") { try db.execute(sql: statement) }
        }
        migrator.registerMigration("cockpitSessions") { db in
            for statement in cockpitSessionsStatements(real: "REAL") { try db.execute(sql: statement) }
        }
        migrator.registerMigration("cockpitDevicesAndAudit") { db in
            for statement in cockpitDevicesAndAuditStatements(real: "REAL") { try db.execute(sql: statement) }
        }
        migrator.registerMigration("deviceTokenFamilies") { db in
            for statement in deviceTokenFamiliesStatements { try db.execute(sql: statement) }
        }
        migrator.registerMigration("deviceWipes") { db in
            for statement in deviceWipesStatements(real: "REAL") { try db.execute(sql: statement) }
        }
        migrator.registerMigration("deviceAuthorizations") { db in
            for statement in deviceAuthorizationsStatements(real: "REAL") { try db.execute(sql: statement) }
        }
        migrator.registerMigration("deviceTelemetry") { db in
            for statement in deviceTelemetryStatements(real: "REAL", identity: "INTEGER PRIMARY KEY AUTOINCREMENT") {
                try db.execute(sql: statement)
            }
        }
        migrator.registerMigration("deviceAuthorizationAddresses") { db in
            for statement in deviceAuthorizationAddressesStatements { try db.execute(sql: statement) }
        }
        migrator.registerMigration("deviceProofs") { db in
            for statement in deviceProofsStatements { try db.execute(sql: statement) }
        }
        migrator.registerMigration("storageBounds") { db in
            for statement in storageBoundsStatements { try db.execute(sql: statement) }
        }
        migrator.registerMigration("auditAggregates") { db in
            for statement in auditAggregatesStatements { try db.execute(sql: statement) }
        }
        migrator.registerMigration("identityProviders") { db in
            for statement in identityProvidersStatements(real: "REAL", blob: "BLOB") { try db.execute(sql: statement) }
        }
        migrator.registerMigration("auditSubjectOfDevices") { db in
            for statement in auditSubjectOfDevicesStatements { try db.execute(sql: statement) }
        }
        return migrator
    }
}
