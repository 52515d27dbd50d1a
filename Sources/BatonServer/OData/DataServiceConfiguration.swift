import BatonOData

/// Limits and rules of the OData data service, with every default stated.
public struct DataServiceConfiguration: Sendable {
    /// The model served at `/odata/`. Default: the aircraft-checks model.
    public var model: ServiceModel?
    /// The page size when the client states none. Default: 100.
    public var defaultPageSize = 100
    /// The largest page, whatever `Prefer: odata.maxpagesize` asks. Default: 1000.
    public var maximumPageSize = 1000
    /// How deep `$expand` may nest. Default: 3.
    public var maximumExpandDepth = 3
    /// The most entities `$expand` may add to one read's answer (over all its entities and levels); a read that
    /// would add more answers 400 `LimitExceeded`. Default: 10,000.
    public var maximumExpandedEntities = 10_000
    /// The most requests a `$batch` may hold. Default: 100.
    public var maximumBatchRequests = 100
    /// The most bytes the answers of one `$batch` may hold; later reads in it answer 413. Default: 4 MiB.
    public var maximumBatchResponseSize = 4 * 1024 * 1024
    /// The largest request body in bytes (a `$batch` included). Default: 1 MiB.
    public var maximumBodySize = 1024 * 1024
    /// The most requests that change data (a `$batch` with a change among its requests counts as one) one user
    /// may have running on one instance; one more answers 429 `TooManyRequests` with `Retry-After: 1`, so that
    /// one account holder cannot fill the writers' queue, where only one writer of entities runs at a time. A
    /// tablet has at most two uploads in flight. At least 1. Default: 8.
    public var maximumConcurrentChangesPerUser = 8
    /// The most reads (GET requests, and `$batch`es with a read among their requests) one user may have running
    /// on one instance; one more answers 429 `TooManyRequests` with `Retry-After: 1`, so that one account
    /// holder's slow reads cannot take the database connections every other user's reads need. At least 1.
    /// Default: `nil` — a quarter of ``BatonServerConfiguration/databaseConnections`` (4 of the default 16), at
    /// least 1; a larger value lets one account hold more than a quarter of the pool.
    public var maximumConcurrentReadsPerUser: Int?
    /// How long deletions are remembered for delta links, in seconds; older delta tokens get 410 Gone.
    /// Default: 30 days.
    public var deltaRetention: Double = 30 * 86_400
    /// The most deletions, and the most changed entities a filtered delta checks for "left the set", that the
    /// first page of a delta reads: they are not paged, so a delta over more answers 410 Gone and the client
    /// reads the collection again (in pages). Default: 100,000.
    public var maximumDeltaRemovals = 100_000
    /// How long repeatable-request results are kept, in seconds. Default: 7 days.
    public var repeatabilityRetention: Double = 7 * 86_400
    /// The entity sets ground staff may change; supervisors and admins change every set. Default:
    /// `PreflightChecks` and `CheckPhotos`.
    public var groundStaffWritableSets: Set<String> = ["PreflightChecks", "CheckPhotos"]
    /// Entity sets whose entities, once final, only their author (or a supervisor or admin) may change or delete.
    /// Default: `PreflightChecks`, final when `Status` is `final`, authored by `CheckedBy`.
    public var finalEntities: [String: FinalEntityRule] = [
        "PreflightChecks": FinalEntityRule(authorProperty: "CheckedBy", statusProperty: "Status", finalValue: "final")
    ]

    /// Entity sets whose entities ground staff change (and delete) only when they authored them, by the server-kept
    /// property naming the author; supervisors and admins change them all. Default: `CheckPhotos` by `TakenBy` — a
    /// photo is replaced or removed by whoever took it.
    public var authoredEntities: [String: String] = ["CheckPhotos": "TakenBy"]
    /// The largest media resource (a photo's bytes) in bytes; a larger one answers 413. Default: 20 MiB.
    public var maximumMediaSize = 20 * 1024 * 1024
    /// The most bytes the photos one user took may hold together; one more answers 413 `MediaQuotaExceeded`.
    /// Default: 1 GiB.
    public var mediaQuotaPerUser: Int64 = 1 << 30
    /// The most bytes the photos recorded on one tablet (the `Baton-Device` of the requests that created them,
    /// for a user registered on it) may hold together; one more answers 413 `MediaQuotaExceeded`. Default: 4 GiB.
    public var mediaQuotaPerDevice: Int64 = 4 << 30
    /// Whether photos keep the location their Exif metadata records. Default: `false` — the GPS fields are
    /// removed on upload (BatonOData's `ImageHead`).
    public var keepsImageLocation = false

    /// When an entity counts as final, and who its author is.
    public struct FinalEntityRule: Sendable {
        /// The server-kept property naming the author.
        public var authorProperty: String
        /// The property holding the status.
        public var statusProperty: String
        /// The status value that makes the entity final.
        public var finalValue: String

        /// Creates a rule.
        public init(authorProperty: String, statusProperty: String, finalValue: String) {
            self.authorProperty = authorProperty
            self.statusProperty = statusProperty
            self.finalValue = finalValue
        }
    }

    /// The defaults.
    public init() {}
}
