import BatonClient
import BatonOData
import BatonOffline
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The tablet's own process killed with SIGKILL at random moments: a sync process (`baton-chaos tablet-sync`)
/// records checks, uploads its store's queue and downloads, on the shared tablet's store, and is killed in the
/// middle of a local write, an upload or a download; then the next one starts on the same store. The users take
/// turns as in the other parts (a switch only after a sync that ended, so a change re-sent after a kill goes up
/// with the user who first sent it). At the end the tablet syncs in this process and the invariant checker reads
/// the server.
public struct ClientKillChaos: Sendable {
    public var kills: Int
    public var seed: UInt64
    /// The `baton-chaos` executable, whose `tablet-sync` command is the process killed.
    public var binary: URL

    public init(kills: Int, seed: UInt64, binary: URL) {
        self.kills = kills
        self.seed = seed
        self.binary = binary
    }

    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> ChaosReport {
        var random = SplitMix64(seed: seed)
        let server = try await LiveServer.start()
        defer { Task { await server.shutDown() } }
        try await server.addUser(
            "alice", displayName: "alice", role: .supervisor, password: NetworkChaos.passwords["alice"] ?? "")
        try await server.addUser("bob", displayName: "bob", password: NetworkChaos.passwords["bob"] ?? "")
        _ = try await server.server.seed(aircraft: 4, checks: 0)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-client-kill-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let tablet = try await Tablet.make(
            server: server.url, directory: directory, timeout: .seconds(10),
            users: ["alice", "bob"].map {
                TabletUser(
                    name: $0, password: NetworkChaos.passwords[$0] ?? "", passcode: NetworkChaos.passcodes[$0] ?? "")
            })
        let tails = try await tablet.store.read("Aircraft").compactMap { entity -> String? in
            if case .string(let tail)? = entity.values["TailNumber"] { tail } else { nil }
        }
        guard !tails.isEmpty else { throw ChaosFailure("The tablet downloaded no aircraft.") }

        var checker = InvariantChecker(run: "client-kill-\(seed)")
        var faults: [String: Int] = [:]
        var killed = 0
        var syncs = 0
        var retries = 0
        var user = "alice"
        var lastEnded = true
        var round = 0
        while killed < kills {
            round += 1
            if lastEnded && random.next(below: 3) == 0 {
                user = user == "alice" ? "bob" : "alice"
                try await tablet.switchTo(user)
            }
            var input = TabletSyncInput(
                server: server.url.absoluteString, storePath: tablet.store.url.path, deviceID: tablet.manager.deviceID,
                user: tablet.session.user.serverUserID ?? user,
                storeKey: (tablet.session.storeKey ?? Data()).base64EncodedString(),
                signingKey: try tablet.session.signingKey().rawRepresentation.base64EncodedString(),
                accessToken: try await tablet.session.authorized.accessToken(), checks: [], run: checker.run)
            for _ in 0..<(1 + random.next(below: 3)) {
                let tail = tails[random.next(below: tails.count)]
                if var check = TabletSyncInput.Check(checker.newCheck(tail: .string(tail), by: user)) {
                    if random.next(below: 2) == 0 {
                        check.photo = UUID()
                        check.photoSize = 40_000 + random.next(below: 200_000)
                    }
                    input.checks.append(check)
                }
            }
            await tablet.store.close()
            // Each phase in turn: the kill comes a random moment after the process says it began (a local write
            // takes about a millisecond, an upload or a download some tens); every fifth process is left to end.
            let phases: [(marker: String, span: Int)] = [("open", 2), ("uploading", 40), ("downloading", 40)]
            let target = round % 5 == 0 ? nil : phases[round % phases.count]
            let (status, output) = try await Self.runSync(
                binary, input: input,
                kill: target.map { ($0.marker, .microseconds(random.next(below: $0.span * 1_000))) })
            syncs += 1
            let log = TabletSyncLog(output)
            lastEnded = status == 0
            if status == 0 {
                // Ended before the kill (or left alone).
            } else if status == 128 + SIGKILL {
                killed += 1
                retries += 1
                faults["client-killed-in-\(log.phase)", default: 0] += 1
            } else {
                throw ChaosFailure("The tablet's sync process failed (status \(status)): \(log.errors)")
            }
            // The store again in this process: what the process wrote and what it uploaded, as the checker needs.
            try await tablet.store.open(
                as: OfflineUser(name: input.user, signingKey: try tablet.session.signingKey()),
                key: SymmetricKey(data: tablet.session.storeKey ?? Data()))
            for check in input.checks {
                let id = TabletSyncInput.entityID(check.id)
                // A change the process was killed writing is kept or not, whole either way.
                var kept = log.recorded.contains(id)
                if !kept { kept = !(try await tablet.store.read(id)).isEmpty }
                if kept { checker.created(id, by: user, fuel: check.fuel) }
                // So is a photo: its entity and bytes are written in one transaction.
                if let photo = check.photo {
                    let photoID = TabletSyncInput.photoID(photo)
                    if !(try await tablet.store.read(photoID)).isEmpty {
                        try await checker.tookPhoto(photoID, by: user, in: tablet.store)
                    }
                }
            }
            for id in log.uploaded { checker.uploaders[id] = user }
            if killed > 0 && killed % 100 == 0 && status != 0 { progress("\(killed) client kills") }
        }
        // The tablet syncs in this process until everything is up.
        try await tablet.syncFully(checker: &checker, user: user, syncs: &syncs, retries: &retries, attempts: 50)
        let archived = try await tablet.store.archivedEntries()
        var report = try await checker.check(server: server, token: try await tablet.session.authorized.accessToken())
        for entry in archived {
            report.problems.append("in the error archive: \(entry.entry.entityID): \(entry.status) \(entry.message)")
        }
        report.faults = faults
        report.leftPending = try await tablet.store.pendingEntries().count + archived.count
        report.storeIntact = try await tablet.store.integrityCheck()
        report.syncs = syncs
        report.retries = retries
        await tablet.store.close()
        await tablet.manager.close()
        return report
    }

    /// Runs a sync process (`baton-chaos tablet-sync`) with `input` on its standard input and, if `kill` says so,
    /// kills it that long after it printed the marker line, or after it started when there is no marker (if it
    /// still runs); returns its exit status (128 + the signal when killed) and standard output.
    package static func runSync(
        _ binary: URL, input: TabletSyncInput, kill target: (marker: String?, after: Duration)?
    ) async throws -> (status: Int32, output: String) {
        let (process, stdout) = try ChildProcess.start(binary, command: "tablet-sync", input: input)
        let (chunks, continuation) = AsyncStream<Data>.makeStream()
        Thread.detachNewThread {
            while case let chunk = stdout.fileHandleForReading.availableData, !chunk.isEmpty {
                continuation.yield(chunk)
            }
            continuation.finish()
        }
        var output = Data()
        var iterator = chunks.makeAsyncIterator()
        // The clock starts once the store is open (the process's start is not what is tested), and the process is
        // killed where it is then: in a local write, an upload or a download.
        if let target {
            if let marker = target.marker.map({ Array("\($0)\n".utf8) }) {
                while output.firstRange(of: marker) == nil, let chunk = await iterator.next() { output += chunk }
            }
            try await Task.sleep(for: target.after)
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
        while let chunk = await iterator.next() { output += chunk }
        process.waitUntilExit()
        let status =
            process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return (status, String(decoding: output, as: UTF8.self))
    }
}

/// What a sync process is told (on its standard input: keys and token never go on a command line).
package struct TabletSyncInput: Codable, Sendable {
    package struct Check: Codable, Sendable {
        var id: UUID
        var tail: String
        var fuel: Decimal
        var remarks: String
        /// A photo of the check to take after it: its id and the bytes of its scan data.
        var photo: UUID?
        var photoSize = 0

        /// The check the checker made up.
        init?(_ values: [String: PrimitiveValue]) {
            guard case .guid(let id)? = values["ID"], case .decimal(let fuel)? = values["FuelKg"],
                case .string(let remarks)? = values["Remarks"], case .string(let tail)? = values["TailNumber"]
            else { return nil }
            (self.id, self.tail, self.fuel, self.remarks) = (id, tail, fuel, remarks)
        }
    }
    /// What the process does. `sync` (the chaos runs): records its checks, uploads once, downloads. `drain`
    /// (`SyncCrashTests`): uploads a few changes per `$batch` until the queue is empty, and does not download.
    package enum Mode: String, Codable, Sendable { case sync, drain }

    var server: String
    var storePath: String
    var deviceID: String
    var user: String
    var storeKey: String
    var signingKey: String
    var accessToken: String
    /// The session's refresh token, if it has one.
    var refreshToken: String?
    /// When the access token expires (seconds since 1970); absent: five minutes from the start.
    var expiresAt: Double?
    var checks: [Check]
    /// The run's name, which the photos' captions carry.
    var run = ""
    /// Absent: `sync`.
    var mode: Mode?

    /// A drain of a store's queue by `user`, with the session's tokens: no checks of its own.
    package init(
        drain storePath: String, server: URL, deviceID: String, user: String, storeKey: Data, signingKey: Data,
        accessToken: String, refreshToken: String?, expiresAt: Date
    ) {
        (self.server, self.storePath, self.deviceID, self.user) = (server.absoluteString, storePath, deviceID, user)
        (self.storeKey, self.signingKey) = (storeKey.base64EncodedString(), signingKey.base64EncodedString())
        (self.accessToken, self.refreshToken, self.expiresAt) = (
            accessToken, refreshToken, expiresAt.timeIntervalSince1970
        )
        (self.checks, self.mode) = ([], .drain)
    }

    init(
        server: String, storePath: String, deviceID: String, user: String, storeKey: String, signingKey: String,
        accessToken: String, checks: [Check], run: String
    ) {
        (self.server, self.storePath, self.deviceID, self.user) = (server, storePath, deviceID, user)
        (self.storeKey, self.signingKey, self.accessToken) = (storeKey, signingKey, accessToken)
        (self.checks, self.run) = (checks, run)
    }

    static func entityID(_ id: UUID) -> String {
        ResourcePath.canonicalURL(entitySet: "PreflightChecks", key: [KeyValue(name: "ID", value: .guid(id))])
    }

    static func photoID(_ id: UUID) -> String {
        ResourcePath.canonicalURL(entitySet: "CheckPhotos", key: [KeyValue(name: "ID", value: .guid(id))])
    }
}

/// The sync process: records its checks, uploads (others' changes on their behalf), downloads — or, as a `drain`,
/// uploads until the queue is empty; it prints each step (`open`, `try ID`, `recorded`, `uploading`, `uploaded ID`,
/// `downloading`, `done`, or `error MESSAGE`) on its standard output as it goes.
package enum TabletSync {
    package static func run(_ input: TabletSyncInput) async -> Int32 {
        func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
        guard let serverURL = URL(string: input.server), let storeKey = Data(base64Encoded: input.storeKey),
            let signingData = Data(base64Encoded: input.signingKey),
            let signingKey = try? P256.Signing.PrivateKey(rawRepresentation: signingData)
        else {
            say("error bad input")
            return 2
        }
        do {
            let drain = input.mode == .drain
            let store = try OfflineStore(
                url: URL(fileURLWithPath: input.storePath), model: try ServiceModel.aircraftChecks,
                deviceID: input.deviceID, definingQueries: drain ? [] : Tablet.definingQueries)
            try await store.open(
                as: OfflineUser(name: input.user, signingKey: signingKey), key: SymmetricKey(data: storeKey))
            await store.setPhotoChunkSize(64 * 1024)
            say("open")
            for check in input.checks {
                say("try \(TabletSyncInput.entityID(check.id))")
                _ = try await store.create(
                    in: "PreflightChecks",
                    values: [
                        "ID": .guid(check.id), "TailNumber": .string(check.tail), "FuelKg": .decimal(check.fuel),
                        "TyrePressureMainPsi": .decimal(200), "TyrePressureNosePsi": .decimal(60),
                        "OilQuarts": .decimal(15), "Status": .string("final"), "Remarks": .string(check.remarks),
                    ])
                say("recorded")
                if let photo = check.photo {
                    say("try \(TabletSyncInput.photoID(photo))")
                    try await store.takePhoto(
                        ImageFixtures.jpeg(scanBytes: check.photoSize),
                        values: [
                            "ID": .guid(photo), "CheckID": .guid(check.id), "Caption": .string("\(input.run) photo"),
                        ])
                    say("recorded")
                }
            }
            let client = BatonClient(serverURL: serverURL)
            let (configuration, metadata) = try await client.discover()
            let session = AuthorizedSession(
                client: client, configuration: configuration,
                oauth: OAuthClient(metadata: metadata, clientID: configuration.clientID, transport: client.transport),
                tokens: OAuthTokens(
                    accessToken: input.accessToken, refreshToken: input.refreshToken,
                    expiresAt: input.expiresAt.map(Date.init(timeIntervalSince1970:)) ?? Date().addingTimeInterval(300))
            )
            say("uploading")
            var more = true
            while more {
                let report = try await store.upload(using: session, allowOnBehalf: true, chunkSize: 2)
                for entry in report.uploaded { say("uploaded \(entry.entityID)") }
                more = drain ? try await !store.pendingEntries().isEmpty : false
            }
            if !drain {
                say("downloading")
                _ = try await store.download(using: session)
            }
            await store.close()
            say("done")
            return 0
        } catch {
            say("error \((error as? OfflineError)?.message ?? "\(error)")")
            return 1
        }
    }
}

/// A sync process's output, read back.
struct TabletSyncLog {
    var recorded: Set<String> = []
    var uploaded: [String] = []
    var errors: [String] = []
    /// Where the process was when it ended: `local-write`, `upload`, `download`, or `end`.
    var phase = "open"

    init(_ output: String) {
        var current: String?
        for line in output.split(separator: "\n") {
            let words = line.split(separator: " ", maxSplits: 1).map(String.init)
            switch words.first {
            case "try":
                current = words.last
                phase = "local-write"
            case "recorded":
                if let id = current { recorded.insert(id) }
                current = nil
            case "uploading": phase = "upload"
            case "uploaded": if let id = words.last { uploaded.append(id) }
            case "downloading": phase = "download"
            case "done": phase = "end"
            case "error": errors.append(String(line))
            default: continue
            }
        }
    }
}

/// A child process of `baton-chaos` (one of its hidden commands), given its input as JSON on standard input —
/// keys and tokens never go on a command line — with its standard output piped back and its standard error
/// dropped.
package enum ChildProcess {
    package static func start(_ binary: URL, command: String, input: some Encodable) throws -> (Process, Pipe) {
        let process = Process()
        process.executableURL = binary
        process.arguments = [command]
        let stdin = Pipe()
        let stdout = Pipe()
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = FileHandle.nullDevice
        try process.run()
        stdin.fileHandleForWriting.write(try JSONEncoder().encode(input))
        try stdin.fileHandleForWriting.close()
        return (process, stdout)
    }

    /// The input a hidden command was given on its standard input.
    package static func input<Input: Decodable>(_ type: Input.Type) -> Input? {
        try? JSONDecoder().decode(type, from: FileHandle.standardInput.readDataToEndOfFile())
    }
}
