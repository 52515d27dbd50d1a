import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import BatonSecureStore
import BatonServer
import BatonTesting
import Crypto
import Foundation
import NIOCore

/// Network faults between one shared tablet and the server: two users take turns recording and correcting checks
/// and syncing — each other's changes on their behalf — while the fault proxy breaks the requests (resets before
/// and after the server applied them, truncated, stalled and duplicated answers, refused connections, a slow
/// link). After every sync that failed, the device syncs again until everything is up. The invariant checker
/// then reads the server directly: every check created on the device is there exactly once with its author and
/// uploader and one audit entry, every correction applied once, nothing left pending.
public struct NetworkChaos: Sendable {
    /// Faults to inject (each breaks one request; a refusal counts as one).
    public var faults: Int
    public var seed: UInt64
    /// How long the device waits for an answer (a stalled answer is held longer).
    public var timeout: Duration = .seconds(1)

    public init(faults: Int, seed: UInt64) {
        self.faults = faults
        self.seed = seed
    }

    static let passwords = ["alice": "blue-harbour-1234", "bob": "green-meadow-5678"]
    static let passcodes = ["alice": "alice-pass-1", "bob": "bob-pass-12"]

    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> ChaosReport {
        var random = SplitMix64(seed: seed)
        let proxy = try await FaultProxy.start(stall: .seconds(2))
        let server = try await LiveServer.start(issuer: proxy.url)
        defer { Task { await server.shutDown() } }
        guard let port = server.url.port else { throw ChaosFailure("The server has no port.") }
        proxy.forward(to: port)
        // Alice leads the shift (a supervisor corrects anyone's check); bob is ground staff.
        try await server.addUser(
            "alice", displayName: "alice", role: .supervisor, password: Self.passwords["alice"] ?? "")
        try await server.addUser("bob", displayName: "bob", password: Self.passwords["bob"] ?? "")
        _ = try await server.server.seed(aircraft: 6, checks: 0)

        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-chaos-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let tablet = try await Tablet.make(
            server: proxy.url, directory: directory, timeout: timeout,
            users: ["alice", "bob"].map {
                TabletUser(name: $0, password: Self.passwords[$0] ?? "", passcode: Self.passcodes[$0] ?? "")
            })
        await tablet.store.setPhotoChunkSize(64 * 1024)
        var checker = InvariantChecker(run: "chaos-\(seed)")
        let tails = try await tablet.store.read("Aircraft").compactMap { $0.values["TailNumber"] }
        guard !tails.isEmpty else { throw ChaosFailure("The device downloaded no aircraft.") }

        var injected = 0
        var syncs = 0
        var retries = 0
        var user = "alice"
        while injected < faults {
            // The other user takes the tablet now and then: their pending changes go up on their behalf.
            if random.next(below: 3) == 0 {
                user = user == "alice" ? "bob" : "alice"
                try await tablet.switchTo(user)
            }
            // Record one or two checks; correct one of the device's own or (as alice) anyone's.
            for _ in 0..<(1 + random.next(below: 2)) {
                let values = checker.newCheck(tail: tails[random.next(below: tails.count)], by: user)
                let id = try await tablet.store.create(in: "PreflightChecks", values: values)
                checker.created(id, by: user)
                // Half the checks get a photo, uploaded in chunks the faults break.
                if random.next(below: 2) == 0, case .guid(let checkID)? = values["ID"] {
                    try await tablet.takePhoto(
                        of: checkID, size: 40_000 + random.next(below: 200_000), by: user, checker: &checker)
                }
            }
            if let id = checker.correctable(by: user, pick: { random.next(below: $0) }) {
                let fuel = Decimal(1_000 + random.next(below: 90_000))
                try await tablet.store.update(id, values: ["FuelKg": .decimal(fuel)])
                checker.updated(id, by: user, fuel: fuel)
            }
            // The network breaks the next request or two, or refuses connections for a while.
            if random.next(below: 8) == 0 {
                await proxy.refuse()
                injected += 1
                _ = try? await tablet.sync()
                try await proxy.accept()
            } else {
                let count = min(faults - injected, 1 + random.next(below: 2))
                proxy.inject(
                    (0..<count).map { _ in NetworkFault.failing[random.next(below: NetworkFault.failing.count)] })
                if random.next(below: 4) == 0 { proxy.inject([.slowLink]) }
                injected += count
            }
            // Sync until everything is up, as the app would at the next chances.
            try await tablet.syncFully(checker: &checker, user: user, syncs: &syncs, retries: &retries, attempts: 50)
            if injected % 50 < 3 { progress("\(injected) faults, \(checker.changes) changes") }
        }
        proxy.inject([])
        let divergence = try await tablet.divergence()
        let archived = try await tablet.store.archivedEntries()
        let pending = try await tablet.store.pendingEntries().count + archived.count
        var report = try await checker.check(server: server, token: try await tablet.session.authorized.accessToken())
        if let divergence { report.problems.append(divergence) }
        for entry in archived {
            report.problems.append(
                "in the error archive: \(entry.entry.method) \(entry.entry.entityID) by \(entry.entry.author): \(entry.status) \(entry.code) \(entry.message)"
            )
        }
        report.faults = proxy.applied.filter { $0.key != NetworkFault.none.rawValue }
        report.leftPending = pending
        report.syncs = syncs
        report.retries = retries
        report.storeIntact = try await tablet.store.integrityCheck()
        await proxy.stop()
        return report
    }
}

/// A user of a simulated tablet: their name on the server (also their display name here), password and passcode.
struct TabletUser: Sendable {
    var name: String
    var password: String
    var passcode: String
}

/// One shared tablet (``BatonTesting/TestTablet``): its users' sessions through the session manager, its offline
/// store, and what the chaos runs keep of its syncs.
final class Tablet: @unchecked Sendable {
    // Used by one task at a time (the run's loop, or one device's task of a load run).
    let base: TestTablet
    let users: [TabletUser]
    var lastReport: UploadReport?

    var manager: OnboardingSessionManager { base.manager }
    var presenter: ScriptedPresenter { base.presenter }
    var store: OfflineStore { base.store }
    var directory: URL { base.directory }
    /// The session of the user the tablet was last switched to.
    private(set) var session: OnboardingSession

    private init(base: TestTablet, users: [TabletUser], session: OnboardingSession) {
        (self.base, self.users, self.session) = (base, users, session)
    }

    /// What every simulated tablet keeps offline: the aircraft and every check.
    static let definingQueries = TestTablet.aircraftAndChecks

    /// Onboards `users` (the first, then the others joining with its approval) and downloads, as the first user.
    static func make(
        server: URL, directory: URL, timeout: Duration, users: [TabletUser],
        transport: any HTTPTransport = AsyncHTTPClientTransport(), definingQueries: [DefiningQuery] = definingQueries
    ) async throws -> Tablet {
        let base = try TestTablet(
            server: server, users: users.map { TestTablet.User($0.name, password: $0.password, passcode: $0.passcode) },
            directory: directory, definingQueries: definingQueries, transport: transport)
        await base.store.setRequestTimeout(timeout)
        guard let last = try await base.onboardAll().last else { throw ChaosFailure("A tablet needs a user.") }
        let tablet = Tablet(base: base, users: users, session: last)
        if let first = users.first { try await tablet.switchTo(first.name) }
        _ = try await tablet.store.download(using: tablet.session.authorized)
        return tablet
    }

    /// Switches to `name` (offline or not, a switch needs only the passcode) and opens the store as theirs.
    func switchTo(_ name: String) async throws {
        session = try await base.switchTo(name)
    }

    /// Syncs until everything is up, as the app would at its next chances (after `pause(attempt)` each time),
    /// telling the checker who uploaded what; throws after `attempts` failures in a row.
    func syncFully(
        checker: inout InvariantChecker, user: String, syncs: inout Int, retries: inout Int, attempts: Int,
        pause: (Int) -> Duration? = { _ in nil }
    ) async throws {
        for attempt in 0..<attempts {
            syncs += 1
            if let report = try? await sync(), report.isComplete {
                checker.uploaded(report.uploaded, by: user)
                return
            } else if let partial = lastReport {
                checker.uploaded(partial.uploaded, by: user)
            }
            retries += 1
            if let pause = pause(attempt) { try await Task.sleep(for: pause) }
        }
        throw ChaosFailure("\(attempts) syncs in a row failed.")
    }

    /// Downloads once more, then compares what the tablet keeps of each defining query's entity set with what
    /// the server's defining query selects now: the same entities at the same versions. Returns what differs
    /// (nil when nothing does). A stale entity (one that left the tablet's filter, or an old version) or a
    /// missing one is a sync that lost track.
    func divergence() async throws -> String? {
        _ = try await store.download(using: session.authorized)
        let root = session.authorized.configuration.odataServiceRoot
        for query in store.definingQueries {
            let set = String(query.url.prefix { $0 != "?" && $0 != "(" })
            guard
                let type = store.model.entitySets.first(where: { $0.name == set }).flatMap(store.model.entityType(of:))
            else { throw ChaosFailure("No entity set \(set).") }
            var server: [String: String] = [:]
            var next: String? = root + query.url
            while let link = next {
                guard let url = URL(string: link) else { throw ChaosFailure("Bad URL \(link).") }
                let response = try await session.authorized.send(
                    ClientRequest(url: url, headers: [("Accept", "application/json")]))
                guard response.status == 200, let json = try? JSONValue(parsing: response.body),
                    let rows = json["value"]?.arrayValue
                else { throw ChaosFailure("'\(query.name)' could not be read (HTTP \(response.status)).") }
                for row in rows {
                    let key = try type.key.map { name in
                        guard let property = type.property(named: name), let value = row[name] else {
                            throw ChaosFailure("'\(query.name)' sent an entity without its key.")
                        }
                        return KeyValue(name: name, value: try PrimitiveValue(json: value, for: property))
                    }
                    let id = ResourcePath.canonicalURL(entitySet: set, key: key)
                    server[id] = row["@odata.etag"]?.stringValue ?? ""
                }
                next = json["@odata.nextLink"]?.stringValue
            }
            var local: [String: String] = [:]
            for entity in try await store.read(set) { local[entity.id] = entity.etag ?? "" }
            let missing = server.keys.filter { local[$0] == nil }.count
            let extra = local.keys.filter { server[$0] == nil }.count
            let stale = server.filter { id, etag in local[id].map { $0 != etag } ?? false }.count
            if missing + extra + stale > 0 {
                return
                    "a tablet's '\(query.name)' differs from the server: \(missing) missing, \(extra) it should not keep, \(stale) at an old version"
            }
        }
        return nil
    }

    /// Uploads (others' changes on their behalf), then downloads.
    func sync() async throws -> UploadReport {
        lastReport = nil
        let report = try await store.upload(using: session.authorized, allowOnBehalf: true)
        lastReport = report
        _ = try await store.download(using: session.authorized)
        return report
    }
}

/// What every run checks and reports: every change made on a device is on the server exactly once, with the
/// right author and uploader, and nothing is left behind.
public struct InvariantChecker: Sendable {
    let run: String
    var checks: [String: (author: String, fuel: Decimal, updates: Int, updatedBy: String?)] = [:]
    /// Who uploaded each entity's last change.
    var uploaders: [String: String] = [:]
    /// The photos taken on a device: who took each and the SHA-256 its bytes have there.
    var photos: [String: (author: String, sha256: String)] = [:]
    var sequence = 0

    init(run: String) { self.run = run }

    public var changes: Int { checks.count + checks.values.reduce(0) { $0 + $1.updates } + photos.count }

    mutating func newCheck(tail: PrimitiveValue, by user: String) -> [String: PrimitiveValue] {
        sequence += 1
        return [
            "ID": .guid(UUID()), "TailNumber": tail, "FuelKg": .decimal(Decimal(5_000 + sequence)),
            "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60), "OilQuarts": .decimal(15),
            "Status": .string("final"), "Remarks": .string("\(run) #\(sequence)"),
        ]
    }

    /// A check created on a device, with the fuel it was recorded with (by default the last ``newCheck``'s).
    mutating func created(_ id: String, by user: String, fuel: Decimal? = nil) {
        checks[id] = (user, fuel ?? Decimal(5_000 + sequence), 0, nil)
    }

    /// A check `user` may correct: one whose `CheckedBy` (its last author) is theirs, or anyone's for alice (a
    /// supervisor) — the server's rule.
    func correctable(by user: String, pick: (Int) -> Int) -> String? {
        let candidates = checks.filter { user == "alice" || ($0.value.updatedBy ?? $0.value.author) == user }.keys
            .sorted()
        return candidates.isEmpty ? nil : candidates[pick(candidates.count)]
    }

    mutating func updated(_ id: String, by user: String, fuel: Decimal) {
        checks[id]?.fuel = fuel
        checks[id]?.updates += 1
        checks[id]?.updatedBy = user
    }

    mutating func uploaded(_ entries: [QueueEntry], by uploader: String) {
        for entry in entries { uploaders[entry.entityID] = uploader }
    }

    /// Reads the server directly (not through the proxy) and compares.
    func check(server: LiveServer, token: String) async throws -> ChaosReport {
        var report = ChaosReport()
        report.changesChecked = changes
        let audit = try await server.server.audit.entries(limit: 1_000_000)
        var created: [String: Int] = [:]
        var updated: [String: Int] = [:]
        for entry in audit {
            guard let subject = entry.subject, checks[subject] != nil || photos[subject] != nil else { continue }
            if entry.action == "entity-created" { created[subject, default: 0] += 1 }
            if entry.action == "entity-updated" { updated[subject, default: 0] += 1 }
        }
        let onServer = try await entities(server: server, token: token)
        report.duplicates = max(0, onServer.count - checks.count)
        for (id, expected) in checks {
            guard let entity = onServer.first(where: { $0.id == id }) else {
                report.losses += 1
                report.problems.append("\(id) is not on the server")
                continue
            }
            let checkedBy = expected.updatedBy ?? expected.author
            if entity.checkedBy != checkedBy {
                report.problems.append("\(id): CheckedBy \(entity.checkedBy ?? "-"), expected \(checkedBy)")
            }
            if let uploader = uploaders[id], entity.uploadedBy != uploader {
                report.problems.append("\(id): UploadedBy \(entity.uploadedBy ?? "-"), expected \(uploader)")
            }
            if entity.fuel != expected.fuel {
                report.losses += 1
                report.problems.append("\(id): FuelKg \(entity.fuel.map { "\($0)" } ?? "-"), expected \(expected.fuel)")
            }
            let creations = created[id] ?? 0
            if creations != 1 {
                report.problems.append("\(id): \(creations) audit entries of its creation")
                if creations > 1 { report.duplicates += 1 }
            }
            let updates = updated[id] ?? 0
            if updates != expected.updates {
                report.problems.append("\(id): \(updates) audit entries of updates, expected \(expected.updates)")
                if updates > expected.updates { report.duplicates += 1 } else { report.losses += 1 }
            }
        }
        try await checkPhotos(server: server, token: token, created: created, into: &report)
        return report
    }
}

/// A check as the server has it.
struct ServerCheck {
    var id: String
    var checkedBy: String?
    var uploadedBy: String?
    var fuel: Decimal?
}

extension InvariantChecker {
    /// Every check of this run on the server, read straight from it (not through the proxy), in pages.
    func entities(server: LiveServer, token: String) async throws -> [ServerCheck] {
        var result: [ServerCheck] = []
        let filter = "startswith(Remarks,'\(run) #')"
        let encoded = filter.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        var next: String? =
            "\(server.url.absoluteString)/odata/PreflightChecks?$filter=\(encoded)&$select=ID,CheckedBy,UploadedBy,FuelKg"
        while let link = next {
            guard let url = URL(string: link) else { throw ChaosFailure("Bad URL \(link).") }
            let response = try await AsyncHTTPClientTransport().send(
                ClientRequest(
                    url: url, headers: [("Authorization", "Bearer \(token)"), ("Accept", "application/json")]))
            guard response.status == 200, let json = try? JSONValue(parsing: response.body),
                let rows = json["value"]?.arrayValue
            else { throw ChaosFailure("The server's checks could not be read (HTTP \(response.status)).") }
            for row in rows {
                var fuel: Decimal?
                if case .number(let text)? = row["FuelKg"] { fuel = Decimal(string: text) }
                result.append(
                    ServerCheck(
                        id: "PreflightChecks(\(row["ID"]?.stringValue ?? ""))",
                        checkedBy: row["CheckedBy"]?.stringValue,
                        uploadedBy: row["UploadedBy"]?.stringValue, fuel: fuel))
            }
            // The next page's link names the address devices use (the proxy): read it from the server itself.
            next = json["@odata.nextLink"]?.stringValue.map { link in
                guard let path = URL(string: link).map({ $0.path + ($0.query.map { "?" + $0 } ?? "") }) else {
                    return link
                }
                return server.url.absoluteString + path
            }
        }
        return result
    }
}

/// The figures of a run.
public struct ChaosReport: Sendable, Codable {
    public var faults: [String: Int] = [:]
    public var changesChecked = 0
    /// How many of the changes checked are photos (their bytes read back from the server).
    public var photosChecked = 0
    public var losses = 0
    public var duplicates = 0
    public var leftPending = 0
    public var syncs = 0
    public var retries = 0
    public var storeIntact = false
    public var problems: [String] = []

    public var faultCount: Int { faults.values.reduce(0, +) }
    public var passed: Bool {
        losses == 0 && duplicates == 0 && leftPending == 0 && storeIntact && problems.isEmpty
    }

    public var text: String {
        var lines = ["faults injected: \(faultCount)"]
        for (kind, count) in faults.sorted(by: { $0.key < $1.key }) { lines.append("  \(kind): \(count)") }
        lines.append(
            "changes checked: \(changesChecked)" + (photosChecked > 0 ? ", of which \(photosChecked) photos" : "")
                + (syncs > 0 ? " (syncs \(syncs), of which \(retries) after a failure)" : ""))
        lines.append("losses: \(losses)  duplicates: \(duplicates)  left pending: \(leftPending)")
        lines.append("device store intact: \(storeIntact ? "yes" : "NO")")
        for problem in problems.prefix(20) { lines.append("  ✗ \(problem)") }
        return lines.joined(separator: "\n")
    }
}
