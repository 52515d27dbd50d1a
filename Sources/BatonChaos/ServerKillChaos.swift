import BatonClient
import BatonOData
import BatonOffline
import BatonServer
import BatonTesting
import Foundation
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The server process killed with SIGKILL at random moments — in the middle of `$batch` requests, audit outbox
/// moves and delta writes — and started again on the same data directory and port, while a shared tablet keeps
/// recording, correcting and syncing its two users' changes. Afterwards the server is opened once more (its start
/// moves whatever the outbox held to the audit log) and the invariant checker reads it.
public struct ServerKillChaos: Sendable {
    public var kills: Int
    public var seed: UInt64
    /// The `baton-server` executable to run and kill.
    public var serverBinary: URL

    public init(kills: Int, seed: UInt64, serverBinary: URL) {
        self.kills = kills
        self.seed = seed
        self.serverBinary = serverBinary
    }

    public func run(progress: @Sendable (String) -> Void = { _ in }) async throws -> ChaosReport {
        var random = SplitMix64(seed: seed)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-kill-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let data = directory.appendingPathComponent("server")
        // Users and aircraft, written by the server library itself before the process serves.
        let setup = try await LiveServer.start(directory: data)
        try await setup.addUser(
            "alice", displayName: "alice", role: .supervisor, password: NetworkChaos.passwords["alice"] ?? "")
        try await setup.addUser("bob", displayName: "bob", password: NetworkChaos.passwords["bob"] ?? "")
        _ = try await setup.server.seed(aircraft: 4, checks: 0)
        // Stopped and closed, its data kept for the process to serve.
        await setup.stop()
        setup.server.close()

        let port = try await Self.freePort()
        guard let url = URL(string: "http://127.0.0.1:\(port)") else { throw ChaosFailure("No URL.") }
        let process = Mutex<Process?>(try await Self.startServer(serverBinary, data: data, port: port))
        defer { process.withLock { $0?.terminate() } }
        let tablet = try await Tablet.make(
            server: url, directory: directory.appendingPathComponent("tablet"), timeout: .seconds(10),
            users: ["alice", "bob"].map {
                TabletUser(
                    name: $0, password: NetworkChaos.passwords[$0] ?? "", passcode: NetworkChaos.passcodes[$0] ?? "")
            })
        let tails = try await tablet.store.read("Aircraft").compactMap { $0.values["TailNumber"] }
        guard !tails.isEmpty else { throw ChaosFailure("The tablet downloaded no aircraft.") }

        // The killer: at random moments, SIGKILL and a restart on the same port and data. Each kill waits until the
        // restarted server has served the tablet one complete sync, then a random while: on a loaded machine a
        // server killed again before any sync got through made runs of many kills and a handful of changes.
        let killed = Mutex(0)
        let completed = Mutex(0)
        let pauses = (0..<kills).map { _ in 20 + random.next(below: 400) }
        let killer = Task.detached {
            for pause in pauses {
                let before = completed.withLock { $0 }
                while completed.withLock({ $0 }) == before { try await Task.sleep(for: .milliseconds(5)) }
                try await Task.sleep(for: .milliseconds(pause))
                let victim = process.withLock { value in
                    defer { value = nil }
                    return value
                }
                if let victim {
                    kill(victim.processIdentifier, SIGKILL)
                    victim.waitUntilExit()
                }
                let restarted = try await Self.startServer(serverBinary, data: data, port: port)
                process.withLock { $0 = restarted }
                killed.withLock { $0 += 1 }
            }
        }
        defer { killer.cancel() }

        await tablet.store.setPhotoChunkSize(64 * 1024)
        var checker = InvariantChecker(run: "kill-\(seed)")
        var syncs = 0
        var retries = 0
        var user = "alice"
        var reported = 0
        while killed.withLock({ $0 }) < kills {
            if random.next(below: 3) == 0 {
                user = user == "alice" ? "bob" : "alice"
                try await persistently(&retries) { try await tablet.switchTo(user) }
            }
            let values = checker.newCheck(tail: tails[random.next(below: tails.count)], by: user)
            let id = try await tablet.store.create(in: "PreflightChecks", values: values)
            checker.created(id, by: user)
            if random.next(below: 2) == 0, case .guid(let checkID)? = values["ID"] {
                try await tablet.takePhoto(
                    of: checkID, size: 40_000 + random.next(below: 200_000), by: user, checker: &checker)
            }
            if let id = checker.correctable(by: user, pick: { random.next(below: $0) }) {
                let fuel = Decimal(1_000 + random.next(below: 90_000))
                try await tablet.store.update(id, values: ["FuelKg": .decimal(fuel)])
                checker.updated(id, by: user, fuel: fuel)
            }
            try await tablet.syncFully(
                checker: &checker, user: user, syncs: &syncs, retries: &retries, attempts: 600,
                pause: { .milliseconds($0 < 10 ? 20 : 100) })
            completed.withLock { $0 += 1 }
            let done = killed.withLock { $0 }
            if done >= reported + 10 {
                reported = done
                progress("\(done) kills, \(checker.changes) changes")
            }
        }
        try await killer.value
        try await tablet.syncFully(
            checker: &checker, user: user, syncs: &syncs, retries: &retries, attempts: 600,
            pause: { .milliseconds($0 < 10 ? 20 : 100) })
        let archived = try await tablet.store.archivedEntries()
        let pending = try await tablet.store.pendingEntries().count + archived.count
        let intact = try await tablet.store.integrityCheck()
        await tablet.store.close()
        await tablet.manager.close()
        process.withLock { value in
            value?.terminate()
            value?.waitUntilExit()
            value = nil
        }

        // The server once more, in this process: its start collects the audit outbox; then the checker reads it.
        let final = try await LiveServer.start(directory: data)
        defer { Task { await final.shutDown() } }
        var report = try await checker.check(
            server: final,
            token: try await LoadChaos.token(
                server: final, user: "alice", password: NetworkChaos.passwords["alice"] ?? ""))
        for entry in archived {
            report.problems.append("in the error archive: \(entry.entry.entityID): \(entry.status) \(entry.message)")
        }
        report.faults = ["server-killed": killed.withLock { $0 }]
        report.leftPending = pending
        report.storeIntact = intact
        report.syncs = syncs
        report.retries = retries
        return report
    }

    func persistently(_ retries: inout Int, _ body: () async throws -> Void) async throws {
        for _ in 0..<600 {
            do { return try await body() } catch {
                retries += 1
                try await Task.sleep(for: .milliseconds(50))
            }
        }
        throw ChaosFailure("600 attempts in a row failed.")
    }

    /// Starts `baton-server serve` (the executable `binary`) on `data` and `port` and waits until it listens.
    static func startServer(_ binary: URL, data: URL, port: Int) async throws -> Process {
        let process = Process()
        process.executableURL = binary
        process.arguments = ["serve", "--data-dir", data.path, "--port", "\(port)", "--log-level", "error"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let reader = output.fileHandleForReading
        let line: String = await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var bytes = Data()
                while !bytes.contains(UInt8(ascii: "\n")) {
                    let chunk = reader.availableData
                    guard !chunk.isEmpty else { break }
                    bytes.append(chunk)
                }
                continuation.resume(returning: String(decoding: bytes, as: UTF8.self))
            }
        }
        guard line.hasPrefix("listening on") else {
            process.terminate()
            throw ChaosFailure("baton-server did not start: \(line.prefix(200))")
        }
        return process
    }

    /// A port nobody listens on now (the server keeps it across restarts).
    static func freePort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress?.port
        try await channel.close()
        guard let port else { throw ChaosFailure("No free port.") }
        return port
    }
}
