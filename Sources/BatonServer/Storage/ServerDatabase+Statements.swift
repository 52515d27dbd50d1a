import BatonOData
import BatonSQLGRDB
import Foundation
import GRDB

extension ServerDatabase {
    /// The identity providers people sign in through (OpenID Connect) and that provision them (SCIM): a provider's
    /// client secret sealed under the master key, the SCIM tokens' SHA-256 (never the tokens), the states of
    /// browser sign-ins already finished (each is used once), and on each user the provider, its issuer and the
    /// subject they are bound to (a provider removed and added again under its name with another issuer vouches
    /// for none of them).
    static func identityProvidersStatements(real: String, blob: String) -> [String] {
        [
            """
            CREATE TABLE identityProviders (
                name text PRIMARY KEY, displayName text NOT NULL, issuer text NOT NULL UNIQUE, clientID text NOT NULL,
                sealedSecret \(blob) NOT NULL, nameClaim text NOT NULL, roleClaim text NOT NULL, roleMap text NOT NULL,
                createdAt \(real) NOT NULL)
            """,
            "ALTER TABLE users ADD COLUMN idp text",
            "ALTER TABLE users ADD COLUMN subject text",
            "ALTER TABLE users ADD COLUMN idpIssuer text",
            // Who disabled a user: `admin`, or `scim:PROVIDER`; a provider may enable only whom it disabled.
            "ALTER TABLE users ADD COLUMN disabledBy text",
            "ALTER TABLE users ADD COLUMN externalId text",
            "CREATE UNIQUE INDEX usersSubject ON users (idpIssuer, subject) WHERE subject IS NOT NULL",
            """
            CREATE TABLE scimTokens (
                hash text PRIMARY KEY, idp text NOT NULL, createdAt \(real) NOT NULL, revokedAt \(real))
            """,
            "CREATE TABLE openIDStates (hash text PRIMARY KEY, expiresAt \(real) NOT NULL)",
        ]
    }

    /// Audit entries that stand for several events of one minute (``AuditLog/recordAggregated(_:)``): the key
    /// they are counted under, and how many.
    static let auditAggregatesStatements = [
        "ALTER TABLE audit ADD COLUMN repeats bigint NOT NULL DEFAULT 1",
        "ALTER TABLE audit ADD COLUMN aggregateKey text",
        "CREATE UNIQUE INDEX auditAggregate ON audit (aggregateKey) WHERE aggregateKey IS NOT NULL",
    ]

    /// The indexes the bounds per user and per device count with (`BatonOData/SettingsDocument/Devices/maxPerUser`,
    /// `BatonOData/SettingsDocument/Backups`), and the cockpit's backups page reads by.
    static let storageBoundsStatements = [
        #"CREATE INDEX deviceRegistrationsUser ON deviceRegistrations ("user", active)"#,
        "CREATE INDEX discardedChangesDevice ON discardedChanges (device, id)",
    ]

    /// The device proofs accepted within the last window, by device and time (``DeviceRegistry``'s `verifyProof`),
    /// so that each is taken once, in whatever order they arrive.
    static let deviceProofsStatements = [
        "CREATE TABLE deviceProofs (device text NOT NULL, time bigint NOT NULL, PRIMARY KEY (device, time))"
    ]

    /// The keyed hash of the address that asked for each sign-in code, so that one address cannot take them all
    /// (``DeviceCodeLimits``); codes from before it count as one unknown address.
    static let deviceAuthorizationAddressesStatements = [
        "ALTER TABLE deviceAuthorizations ADD COLUMN addressKey text NOT NULL DEFAULT ''",
        "CREATE INDEX deviceAuthorizationsAddress ON deviceAuthorizations (addressKey, expiresAt)",
    ]

    /// What devices send for support: usage events (deduplicated by their id) and log uploads, and an admin's
    /// pending order for a device's log.
    static func deviceTelemetryStatements(real: String, identity: String) -> [String] {
        [
            """
            CREATE TABLE usageEvents (
                id text PRIMARY KEY, device text NOT NULL, at \(real) NOT NULL, name text NOT NULL, count bigint,
                durationMs bigint, code text, receivedAt \(real) NOT NULL)
            """,
            "CREATE INDEX usageEventsDevice ON usageEvents (device, at)",
            """
            CREATE TABLE deviceLogs (
                id \(identity), device text NOT NULL, uploader text NOT NULL, reason text NOT NULL,
                receivedAt \(real) NOT NULL, lineCount bigint NOT NULL, lines text NOT NULL)
            """,
            "CREATE INDEX deviceLogsDevice ON deviceLogs (device, id)",
            "ALTER TABLE devices ADD COLUMN logsRequestedAt \(real)",
        ]
    }

    /// The admin cockpit's browser sessions, shared by every instance (``CockpitSessions``): a session is found by
    /// the SHA-256 of its cookie, never by the cookie itself.
    static func cockpitSessionsStatements(real: String) -> [String] {
        [
            """
            CREATE TABLE cockpitSessions (
                hash text PRIMARY KEY, "user" text NOT NULL, csrf text NOT NULL, createdAt \(real) NOT NULL,
                lastSeenAt \(real) NOT NULL)
            """,
            #"CREATE INDEX cockpitSessionsUser ON cockpitSessions("user")"#,
        ]
    }

    /// The sign-ins (refresh-token families) each device used on its routes, so that revoking the device stops
    /// exactly its tokens.
    static let deviceTokenFamiliesStatements = [
        "CREATE TABLE deviceTokenFamilies (family text NOT NULL, device text NOT NULL, PRIMARY KEY (family, device))",
        "CREATE INDEX deviceTokenFamiliesDevice ON deviceTokenFamilies (device)",
    ]

    /// Sign-ins through a browser elsewhere (RFC 8628): the device code's hash, the user code the person types,
    /// and where the person's decision stands.
    static func deviceAuthorizationsStatements(real: String) -> [String] {
        [
            """
            CREATE TABLE deviceAuthorizations (
                deviceCodeHash text PRIMARY KEY, userCode text NOT NULL UNIQUE, clientID text NOT NULL,
                scope text NOT NULL, createdAt \(real) NOT NULL, expiresAt \(real) NOT NULL,
                pollInterval integer NOT NULL, lastPolledAt \(real), status text NOT NULL, "user" text)
            """,
            // Every start removes the long-expired ones.
            "CREATE INDEX deviceAuthorizationsExpiry ON deviceAuthorizations (expiresAt)",
        ]
    }

    /// When a device reported the wipe an admin ordered (or its revocation caused) done, and the time of the
    /// last device proof accepted from it (in milliseconds: each proof must be later, so none is replayed).
    static func deviceWipesStatements(real: String) -> [String] {
        ["ALTER TABLE devices ADD COLUMN wipedAt \(real)", "ALTER TABLE devices ADD COLUMN lastProofAt bigint"]
    }

    /// What the cockpit shows of a device and what an admin ordered for it; indexes for the cockpit's audit
    /// filters and overview.
    static func cockpitDevicesAndAuditStatements(real: String) -> [String] {
        [
            // What the cockpit shows of a device and what an admin ordered for it.
            "ALTER TABLE devices ADD COLUMN lastSeenAt \(real)",
            "ALTER TABLE devices ADD COLUMN appVersion text",
            "ALTER TABLE devices ADD COLUMN revokedAt \(real)",
            "ALTER TABLE devices ADD COLUMN wipeOrderedAt \(real)",
            // The cockpit's audit filters page by id, newest first.
            "CREATE INDEX auditActor ON audit (actor, id)",
            "CREATE INDEX auditAction ON audit (action, id)",
            "CREATE INDEX auditSubject ON audit (subject, id)",
            // The overview counts today's entries.
            "CREATE INDEX auditAt ON audit (at)",
        ]
    }

    /// The subject index holds the entries the device filter reads, not the entity changes
    /// (``AuditFilter/entriesNotOfEntities``). Made under a name of its own before the old one goes: on PostgreSQL,
    /// dropping an index locks its table out until the commit, so the log's readers wait only for the drop, not for
    /// the new index's build (its writers wait for the build, as for any index made in a transaction).
    static let auditSubjectOfDevicesStatements = [
        "CREATE INDEX auditSubjectOfDevices ON audit (subject, id) WHERE \(AuditFilter.entriesNotOfEntities)",
        "DROP INDEX IF EXISTS auditSubject",
    ]

    /// The sign-in throttle's counters, shared by every instance (``LoginThrottle``).
    static func signInThrottleStatements(real: String) -> [String] {
        [
            "CREATE TABLE signInFailures (key text PRIMARY KEY, failures integer NOT NULL, last \(real) NOT NULL)",
            "CREATE INDEX signInFailuresLast ON signInFailures(last)",
            "CREATE TABLE signInKnown (pair text PRIMARY KEY, since \(real) NOT NULL)",
            "CREATE INDEX signInKnownSince ON signInKnown(since)",
        ]
    }

    /// The token-signing keys, sealed under the master key (`SigningKeys`).
    static func tokenSigningKeysStatements(real: String, blob: String) -> [String] {
        ["CREATE TABLE tokenSigningKeys (id text PRIMARY KEY, sealedKey \(blob) NOT NULL, createdAt \(real) NOT NULL)"]
    }
}
