import AircraftChecks
import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import Crypto
import Foundation
import Logging

/// The shared tablet the app runs on: its data directory, the server it belongs to, the session manager of
/// its users and the offline store they share. Everything the interactive screens and the scriptable
/// subcommands do goes through here.
struct Device: Sendable {
    let directory: URL
    let serverURL: URL
    let sessions: OnboardingSessionManager
    let store: OfflineStore
    /// `--offline`: nothing is sent; the device works from its stores alone.
    let offline: Bool
    /// The device's encrypted, rotating log and what the app writes to it (events and codes, never a secret
    /// or a value).
    let log: DeviceLog
    let logger: Logger
    /// Usage events waiting for the next sync (only of users who agreed to them).
    let usage: UsageRecorder

    static let definingQueries = [
        DefiningQuery(name: "aircraft", url: "Aircraft"), DefiningQuery(name: "flights", url: "Flights"),
        DefiningQuery(name: "checks", url: "PreflightChecks"),
        // Photos' properties; their bytes download when someone opens one.
        DefiningQuery(name: "photos", url: "CheckPhotos"),
    ]

    /// What each user is asked at onboarding (``ConsentStep``): data consent (required) and usage data.
    static let consentForms = [
        ConsentForm(
            kind: .data, title: "Data consent",
            text:
                "Baton stores the checks you record on this device, encrypted, and sends them to your airline's server with your name as their author. Without this you cannot use Baton."
        ),
        ConsentForm(
            kind: .usage, title: "Usage data",
            text:
                "Baton may count how it is used on this device — app starts, sign-ins, user switches, syncs with their counts and durations, errors by code — with no names and no values, and send the counts with the next sync. You can change this later (menu 13)."
        ),
    ]

    /// Opens the device in `directory`. The server URL is remembered there on first use (it is not a
    /// secret); a different `--server` later is refused rather than mixing two servers' data.
    static func open(
        directory: URL, server: String?, offline: Bool, presenter: any OnboardingPresenter,
        askServer: () async throws -> String
    ) async throws -> Device {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let remembered = directory.appendingPathComponent("server-url")
        let saved = (try? String(contentsOf: remembered, encoding: .utf8))?.trimmingCharacters(
            in: .whitespacesAndNewlines)
        // Owner-only, also when an older version (or a copy) left it readable by others — before anything about
        // it is checked, so an unusable saved URL is no exception.
        if saved != nil {
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: remembered.path)
        }
        let text: String
        switch (server, saved) {
        case (let given?, let saved?) where given != saved:
            throw AppError(
                .usage,
                "This device (\(directory.path)) belongs to \(saved), not \(given); use --data-dir for another server.")
        case (let given?, _): text = given
        case (nil, let saved?): text = saved
        case (nil, nil): text = try await askServer()
        }
        guard let url = URL(string: text), url.scheme == "http" || url.scheme == "https", url.host != nil else {
            throw AppError(.usage, "'\(text)' is not a server URL; give one like http://127.0.0.1:8080.")
        }
        do { try BatonClient.checkTransport(url) } catch { throw AppError(.usage, error.message) }
        if saved == nil {
            try Data(text.utf8).write(to: remembered, options: .atomic)
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: remembered.path)
        }

        let storage = try DeviceStorage(directory: directory)
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: try storage.deviceID(), definingQueries: definingQueries)
        let log = try DeviceLog(storage: storage)
        let logger = Logger(label: "baton") { label in log.handler(label: label) }
        var configuration = FlowsConfiguration(mode: .multiUser)
        configuration.appVersion = "1.0"
        let step = OfflineStoreStep(store: store)
        configuration.removalGuard = { user in try await step.guardRemoval(of: user) }
        configuration.handOverPendingChanges = { handover throws(FlowsError) in try await step.handOver(handover) }
        let sessions = try OnboardingSessionManager(
            serverURL: url, directory: directory, configuration: configuration, presenter: presenter,
            flowProvider: StandardFlowProvider(appSteps: [step], consentForms: consentForms),
            transport: offline ? NetworkOff() : AsyncHTTPClientTransport())
        return Device(
            directory: directory, serverURL: url, sessions: sessions, store: store, offline: offline, log: log,
            logger: logger, usage: try UsageRecorder(storage: storage))
    }

    // MARK: Usage and the device's log

    /// Records a usage event when the signed-in user agreed to usage data and the server collects it.
    func recordUsage(_ name: UsageEvent.Name, count: Int? = nil, durationMs: Int? = nil, code: String? = nil) async {
        guard let session = await sessions.session,
            UsageRecorder.allowed(consent: await sessions.consent, settings: session.settings)
        else { return }
        try? usage.record(UsageEvent(at: Date(), name: name, count: count, durationMs: durationMs, code: code))
    }

    /// Logs a failure by its code (never its message, which may quote what was typed) and counts it as usage.
    func noteFailure(_ error: any Error, doing action: String) async {
        let code = AppError.code(of: error)
        logger.warning("\(action) failed", metadata: ["code": "\(code)"])
        await recordUsage(.error, code: code)
    }

    /// Sends the device's log to the server for `reason`; returns how many lines went.
    @discardableResult
    func sendLog(reason: String) async throws -> Int {
        let session = try await session()
        guard await isOnline() else {
            throw AppError(.offline, "The server cannot be reached; the log stays on this device.")
        }
        logger.info("log sent", metadata: ["reason": "\(reason)"])
        return try await log.send(reason: reason, session: session)
    }

    // MARK: The signed-in user

    /// The open session, or a clear error.
    func session() async throws -> OnboardingSession {
        guard let session = await sessions.session else {
            throw AppError(.authentication, "Nobody is signed in on this device.")
        }
        return session
    }

    /// The signed-in user's name on the server.
    func userName() async throws -> String { try await session().user.serverUserID ?? "" }

    func isOnline() async -> Bool {
        if offline { return false }
        return await sessions.client.isReachable(timeout: .seconds(1))
    }

    /// Copies the pending counts per author into the user registry, for the user list before sign-in.
    func notePendingChanges() async {
        guard let counts = try? await store.unsentCounts() else { return }
        try? await sessions.users.setPendingChanges(counts)
    }

    // MARK: Aircraft and checks

    struct AircraftRow: Sendable {
        let aircraft: LocalEntity
        let latest: LocalEntity?
        var tail: String { aircraft.values["TailNumber"]?.display ?? "?" }
    }

    /// The aircraft on the device, optionally of one station or status, each with its latest check.
    func aircraft(station: String? = nil, status: String? = nil) async throws -> [AircraftRow] {
        var filters: [String] = []
        if let station { filters.append("Station eq \(PrimitiveValue.string(station.uppercased()).urlLiteral)") }
        if let status { filters.append("Status eq \(PrimitiveValue.string(status.lowercased()).urlLiteral)") }
        let filter = filters.isEmpty ? "" : "&$filter=" + encode(filters.joined(separator: " and "))
        var rows: [AircraftRow] = []
        for aircraft in try await store.read("Aircraft?$orderby=TailNumber" + filter) {
            let tail = aircraft.values["TailNumber"] ?? .null
            let latest = try await store.read(
                "PreflightChecks?$filter=" + encode("TailNumber eq \(tail.urlLiteral)")
                    + "&$orderby=ChangedAt%20desc&$top=1"
            ).first
            rows.append(AircraftRow(aircraft: aircraft, latest: latest))
        }
        return rows
    }

    /// One aircraft by tail number, or a clear not-found error.
    func aircraft(tail: String) async throws -> Aircraft {
        let url = ResourcePath.canonicalURL(
            entitySet: Aircraft.entitySetName, key: [KeyValue(name: "TailNumber", value: .string(tail.uppercased()))])
        guard let aircraft = try await store.entity(Aircraft.self, id: url) else {
            throw AppError(.notFound, "No aircraft \(tail.uppercased()) on this device; `baton aircraft` lists them.")
        }
        return aircraft
    }

    func flights(tail: String) async throws -> [Flight] {
        let key = PrimitiveValue.string(tail).urlLiteral
        return try await store.read(
            Flight.self, "$filter=" + encode("TailNumber eq \(key)") + "&$orderby=ScheduledDeparture")
    }

    /// The checks of one aircraft (or all), newest first; unsynced ones first of all.
    func checks(tail: String?, top: Int = 20) async throws -> [LocalEntity] {
        let filter = tail.map {
            "$filter=" + encode("TailNumber eq \(PrimitiveValue.string($0.uppercased()).urlLiteral)") + "&"
        }
        let rows = try await store.read("PreflightChecks?" + (filter ?? "") + "$orderby=ChangedAt%20desc&$top=\(top)")
        return rows.filter(\.pending) + rows.filter { !$0.pending }
    }

    /// Validates the check against the device's data and records it (entity and signed queue entry in one
    /// transaction). Returns the entity's URL.
    func record(_ form: CheckForm) async throws -> String {
        var form = form
        form.tailNumber = try await aircraft(tail: form.tailNumber).tailNumber
        if let flight = form.flightNumber {
            let known = try await flights(tail: form.tailNumber).map(\.flightNumber)
            guard known.contains(flight.uppercased()) else {
                throw AppError(
                    .invalidInput,
                    "Flight \(flight) is not a flight of \(form.tailNumber); its flights: \(known.joined(separator: ", "))."
                )
            }
            form.flightNumber = flight.uppercased()
        }
        let id = try await store.create(try form.check())
        await notePendingChanges()
        return id
    }

    // MARK: Photos

    /// The largest photo the app takes (the server's default limit).
    static let maximumPhotoSize = 20 * 1024 * 1024

    /// Takes the photo in `file` for the check `id`: its location removed, kept encrypted on the device and queued,
    /// signed, for the next sync. Returns the photo's id.
    func takePhoto(check id: String, file: URL, caption: String?) async throws -> String {
        let check = try await check(id)
        let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int) ?? nil
        guard let size else { throw AppError(.notFound, "No file at \(file.path).") }
        guard size <= Self.maximumPhotoSize else {
            throw AppError(.invalidInput, "A photo may take at most \(Self.maximumPhotoSize / (1024 * 1024)) MiB.")
        }
        guard let bytes = FileManager.default.contents(atPath: file.path) else {
            throw AppError(.notFound, "Cannot read \(file.path).")
        }
        var values: [String: PrimitiveValue] = ["CheckID": check.values["ID"] ?? .null]
        if let caption { values["Caption"] = .string(caption) }
        let photo: String
        do {
            photo = try await store.takePhoto(Array(bytes), values: values, maximumSize: Self.maximumPhotoSize)
        } catch {
            throw AppError.from(error)
        }
        await notePendingChanges()
        return photo
    }

    /// The photos of the check `id`, oldest first.
    func photos(check id: String) async throws -> [LocalEntity] {
        let check = try await check(id)
        guard let key = check.values["ID"] else { return [] }
        return try await store.read(
            "CheckPhotos?$filter=" + encode("CheckID eq \(key.urlLiteral)") + "&$orderby=TakenAt")
    }

    /// Writes the photo `id` to `file`, decrypted — from the device, or downloaded when it is not here yet —
    /// readable by its owner only; an existing file is never overwritten.
    func exportPhoto(_ id: String, to file: URL) async throws {
        guard id.hasPrefix("CheckPhotos("), (try? await store.read(id).first) != nil else {
            throw AppError(.notFound, "No photo \(id.prefix(80)) on this device; `baton photos list` shows their ids.")
        }
        let online = offline ? nil : try? await session().authorized
        let photo: LocalPhoto
        do { photo = try await store.photo(id, using: online) } catch { throw AppError.from(error) }
        // Created new (never over an existing file or through a link), owner-only.
        let descriptor = createNewFile(file.path)
        guard descriptor >= 0 else {
            throw AppError(
                .invalidInput,
                errno == EEXIST
                    ? "\(file.path) exists already; name a new file." : "Cannot write \(file.path).")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        do {
            try handle.write(contentsOf: photo.bytes)
            try handle.synchronize()
        } catch {
            // No partly written copy of the photo is left behind.
            try? FileManager.default.removeItem(at: file)
            throw AppError(.failed, "Cannot write \(file.path).")
        }
    }

    // MARK: Changing checks and aircraft

    /// The check `id` on this device, or a clear not-found error.
    func check(_ id: String) async throws -> LocalEntity {
        guard id.hasPrefix("PreflightChecks("), let check = try? await store.read(id).first else {
            throw AppError(.notFound, "No check \(id.prefix(80)) on this device; `baton checks list` shows their ids.")
        }
        return check
    }

    /// Whether the signed-in user may change `check`: their own, or anyone's as a supervisor or admin (the
    /// server's roles decide in the end; this says why before anything is queued).
    func requireMayChange(_ check: LocalEntity) async throws {
        let session = try await session()
        let author = check.values["CheckedBy"]?.display
        guard author == session.user.serverUserID || ["supervisor", "admin"].contains(session.user.role ?? "") else {
            throw AppError(
                .notPermitted,
                "This check is \(author ?? "someone else")'s; only its author or a supervisor may change it.")
        }
    }

    /// Whether the signed-in user may drop `archived` for the server's version: its author, or a supervisor or
    /// admin — not a colleague who happens to sync next.
    func requireMayDrop(_ archived: ArchiveEntry) async throws {
        let session = try await session()
        guard
            archived.entry.author == session.user.serverUserID
                || ["supervisor", "admin"].contains(session.user.role ?? "")
        else {
            throw AppError(
                .notPermitted,
                "This is \(archived.entry.author)'s change; only they or a supervisor may drop it for the server's version."
            )
        }
    }

    /// Changes measured values or remarks of a check on the device (a signed PATCH with its ETag in the queue).
    func edit(_ id: String, values: [String: PrimitiveValue]) async throws {
        guard !values.isEmpty else { throw AppError(.invalidInput, "Nothing to change: give at least one value.") }
        let check = try await check(id)
        try await requireMayChange(check)
        try await store.update(id, values: values)
        await notePendingChanges()
    }

    /// Turns a draft into a final check.
    func finalize(_ id: String) async throws {
        let check = try await check(id)
        guard check.values["Status"]?.display == "draft" else {
            throw AppError(.invalidInput, "This check is final already; only drafts are finalized.")
        }
        try await requireMayChange(check)
        try await store.update(id, values: ["Status": .string("final")])
        await notePendingChanges()
    }

    /// Deletes one's own draft.
    func deleteDraft(_ id: String) async throws {
        let check = try await check(id)
        guard check.values["Status"]?.display == "draft" else {
            throw AppError(.notPermitted, "Only drafts are deleted; a final check stays on record.")
        }
        guard check.values["CheckedBy"]?.display == (try await userName()) else {
            throw AppError(.notPermitted, "Only the author deletes their draft.")
        }
        try await store.delete(id)
        await notePendingChanges()
    }

    static let aircraftStatuses = ["ready", "maintenance"]

    /// Sets an aircraft's status, as a supervisor or admin.
    func setStatus(tail: String, to status: String) async throws {
        let status = status.lowercased()
        guard Self.aircraftStatuses.contains(status) else {
            throw AppError(
                .invalidInput, "'\(status.prefix(40))' is not one of \(Self.aircraftStatuses.joined(separator: ", ")).")
        }
        let aircraft = try await aircraft(tail: tail)
        guard ["supervisor", "admin"].contains(try await session().user.role ?? "") else {
            throw AppError(.notPermitted, "Only a supervisor sets an aircraft's status.")
        }
        try await store.update(aircraft.entityID, values: ["Status": .string(status)])
        await notePendingChanges()
    }

    // MARK: Sync

    /// Syncs through the SDK (``OnboardingSessionManager/sync(progress:)``: the server's news for the device,
    /// upload with its on-behalf setting, download), then does what the app adds: logs the sync's counts (never a
    /// value), counts it in the usage events, sends backups and telemetry. Every request belongs to one trace (the
    /// caller's, when it started one), whose id the server logs.
    func sync(progress: @escaping @Sendable (SyncProgress) -> Void) async throws -> SyncReport {
        _ = try await session()
        guard await isOnline() else {
            throw AppError(
                .offline,
                offline
                    ? "Working offline (--offline); nothing was sent. Your changes stay on this device."
                    : "The server \(serverURL.absoluteString) cannot be reached; your changes stay on this device.")
        }
        let started = ContinuousClock.now
        let report: SyncReport
        do {
            report = try await sessions.sync(progress: progress)
        } catch {
            await notePendingChanges()
            await noteFailure(error, doing: "sync")
            throw error
        }
        let elapsed = ContinuousClock.now - started
        let milliseconds = Int(
            elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
        logger.info(
            "sync done",
            metadata: [
                "uploaded": "\(report.upload.uploaded.count)", "downloaded": "\(report.downloaded)",
                "archived": "\(report.archived.count)", "waiting": "\(report.waiting.count)", "ms": "\(milliseconds)",
            ])
        await recordUsage(.sync, count: report.upload.uploaded.count + report.downloaded, durationMs: milliseconds)
        await notePendingChanges()
        await sendBackups()
        if let session = await sessions.session {
            await sendTelemetry(session, logsRequested: report.logsRequested)
        }
        return report
    }

    /// After a sync: the usage events waiting, and the log when an admin asked for it or the server wants it with
    /// every sync. A failure here never fails the sync; what was not sent goes next time.
    func sendTelemetry(_ session: OnboardingSession, logsRequested: Bool) async {
        if session.settings.telemetry.usage {
            do { try await usage.send(session: session) } catch {
                logger.warning("usage not sent", metadata: ["code": "\(error.code)"])
            }
        } else {
            // The server stopped collecting: what waits here is dropped, not kept for ever.
            usage.file.removeAll()
        }
        let reason = logsRequested ? "requested" : session.settings.telemetry.logsWithSync ? "setting" : nil
        guard let reason else { return }
        logger.info("log sent", metadata: ["reason": "\(reason)"])
        do { try await log.send(reason: reason, session: session) } catch {
            logger.warning("log not sent", metadata: ["code": "\(error.code)"])
        }
    }

    // MARK: Removal

    /// Discards `author`'s unsynced changes after writing an encrypted backup of them into the device's
    /// `backups` folder (AES-GCM under the device store key), then sends the backups not sent yet to the server
    /// when it is reachable (an administrator can recover them there). Returns the number discarded, the file,
    /// and whether it reached the server.
    func discardChanges(of author: String) async throws -> (count: Int, backup: URL, sent: Bool) {
        let session = try await session()
        guard let key = session.storeKey else { throw AppError(.failed, "The store key is missing; reset the user.") }
        try FileManager.default.createDirectory(at: backups, withIntermediateDirectories: true)
        let file = backups.appendingPathComponent(
            "\(Int(Date().timeIntervalSince1970))-\(UUID().uuidString.prefix(8)).sealed")
        let count = try await store.discardPendingChanges(of: author, backupTo: file, key: SymmetricKey(data: key))
        await notePendingChanges()
        let sent = await sendBackups()
        return (count, file, sent.contains(file.lastPathComponent))
    }

    var backups: URL { directory.appendingPathComponent("backups") }

    /// Sends every backup of discarded changes the server does not have yet; a sent one is renamed `….sent`.
    /// Returns the names of the files sent. Offline, or without a session, nothing happens.
    @discardableResult
    func sendBackups() async -> [String] {
        guard let session = await sessions.session, let key = session.storeKey, await isOnline(),
            let names = try? FileManager.default.contentsOfDirectory(atPath: backups.path)
        else { return [] }
        var sent: [String] = []
        for name in names.sorted() where name.hasSuffix(".sealed") {
            let file = backups.appendingPathComponent(name)
            guard let sealed = try? Data(contentsOf: file),
                let backup = try? OfflineStore.describeBackup(sealed, key: SymmetricKey(data: key)),
                (try? await session.authorized.sendDiscardedChanges(
                    deviceID: sessions.deviceID, author: backup.author, count: backup.count, sealed: sealed)) != nil
            else { continue }
            try? FileManager.default.moveItem(at: file, to: file.appendingPathExtension("sent"))
            sent.append(name)
        }
        return sent
    }

    func encode(_ text: String) -> String { ODataURL.queryValue(text) }
}

/// The transport of `--offline`: refuses every request, as a device with no network would.
struct NetworkOff: HTTPTransport {
    func send(_ request: ClientRequest) async throws(BatonClientError) -> ClientResponse {
        throw BatonClientError(.unreachable, "Working offline (--offline); nothing is sent.")
    }
}

/// Opens a new file for writing, owner-only: fails when anything (a file, a link) is at `path` already.
func createNewFile(_ path: String) -> Int32 {
    open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600)
}
