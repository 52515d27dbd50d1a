import BatonClient
import BatonOData
import BatonOffline
import BatonServer
import BatonTesting
import Crypto
import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import Synchronization

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `baton-bench --media`: photos. The upload of a 5 MiB photo (`POST /odata/CheckPhotos`, its check admitted, its
/// location removed, its bytes hashed and stored, its entity written) next to a plain `PUT` of the same bytes to a
/// bare Hummingbird route that streams them to a file, taking turns in the same run; the process's memory while 16
/// photos upload at once, against its memory idle; and the capture of a 5 MiB photo on the tablet (location
/// removed, bytes encrypted into the store, entity and signed queue entry), p50.
struct MediaBenchmark {
    let duration: Int
    static let photoSize = 5 * 1024 * 1024

    func run() async throws {
        var dataService = DataServiceConfiguration()
        dataService.mediaQuotaPerUser = .max
        dataService.maximumConcurrentChangesPerUser = 64
        let server = try await LiveServer.start(dataService: dataService)
        defer { Task { await server.shutDown() } }
        try await server.addUser("bench", displayName: "Bench", role: .supervisor, password: "load-generator-secret-1")
        _ = try await server.server.seed(aircraft: 2, checks: 10)
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-media-bench-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let photo = directory.appendingPathComponent("photo.jpg")
        try Data(Self.jpeg(size: Self.photoSize)).write(to: photo)

        // The bare route: the same bytes streamed to a file, nothing else.
        let uploads = directory.appendingPathComponent("bare", isDirectory: true)
        try FileManager.default.createDirectory(at: uploads, withIntermediateDirectories: true)
        let router = Router()
        router.put("/bare-upload") { request, _ -> HTTPResponse.Status in
            let file = uploads.appendingPathComponent(UUID().uuidString)
            guard FileManager.default.createFile(atPath: file.path, contents: nil) else { return .internalServerError }
            let handle = try FileHandle(forWritingTo: file)
            for try await buffer in request.body { try handle.write(contentsOf: buffer.readableBytesView) }
            try handle.synchronize()
            try handle.close()
            try FileManager.default.removeItem(at: file)
            return .created
        }
        let ports = AsyncStream<Int>.makeStream()
        var logger = Logger(label: "bench")
        logger.logLevel = .error
        let bare = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { ports.continuation.yield($0.localAddress?.port ?? 0) }, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await bare.run() }
            var iterator = ports.stream.makeAsyncIterator()
            guard let port = await iterator.next() else { throw BenchmarkFailure("the bare route did not start") }
            try await measure(
                server: server, bare: "http://127.0.0.1:\(port)/bare-upload", photo: photo, directory: directory)
            group.cancelAll()
        }
        try await capture(server: server, directory: directory)
    }

    func measure(server: LiveServer, bare: String, photo: URL, directory: URL) async throws {
        let token = try await Self.token(server.url.absoluteString)
        let check = try await Self.checkID(server.url.absoluteString, token: token)
        let bareScript = directory.appendingPathComponent("bare.lua")
        try Self.script(
            #"wrk.method = "PUT"; wrk.headers["Content-Type"] = "image/jpeg"; wrk.body = body"#, photo: photo
        ).write(to: bareScript, atomically: true, encoding: .utf8)
        // Each upload a photo of its own: its id from the run, the thread and a counter, in the Slug. The script
        // holds a token: owner-only.
        func batonScript(run: Int) throws -> URL {
            let file = directory.appendingPathComponent("baton-\(run).lua")
            let text = Self.script(
                """
                threads = 0
                function setup(thread) thread:set("tid", threads); threads = threads + 1 end
                n = 0
                function request()
                    n = n + 1
                    local slug = string.format("%%7B%%22ID%%22%%3A%%2200000000-0000-4%03d-8%03d-%012d%%22%%2C%%22CheckID%%22%%3A%%22\(check)%%22%%7D", \(run), tid, n)
                    return wrk.format("POST", "/odata/CheckPhotos", {["Authorization"] = "Bearer \(token)", ["Content-Type"] = "image/jpeg", ["Slug"] = slug}, body)
                end
                """, photo: photo)
            guard
                FileManager.default.createFile(
                    atPath: file.path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
            else { throw BenchmarkFailure("cannot write \(file.path)") }
            return file
        }
        let target = server.url.absoluteString + "/odata/CheckPhotos"
        print("Photos, 5 MiB JPEG, wrk -t2 -c4 -d\(duration)s over loopback, three rounds taking turns:\n")
        var ratios: [Double] = []
        for round in 1...3 {
            let plain = try await NIOThreadPool.singleton.runIfActive {
                try Benchmark.wrk(bare, script: bareScript, connections: 4, seconds: duration)
            }
            let script = try batonScript(run: round)
            let ours = try await NIOThreadPool.singleton.runIfActive {
                try Benchmark.wrk(target, script: script, connections: 4, seconds: duration)
            }
            ratios.append(Self.printRound(round, "Baton POST CheckPhotos", plain: plain, ours: ours))
        }
        let median = ratios.sorted()[1]
        print(
            String(
                format: "upload / bare PUT, median of 3: %.2f (target ≥ 0.50: %@)", median,
                median >= 0.5 ? "met" : "NOT MET"))

        try await resumable(server: server, bare: bare, photo: photo, token: token, check: check)

        // Memory: idle, then the most while 16 photos upload at once.
        try await Task.sleep(for: .seconds(1))
        let idle = memoryMegabytes("VmRSS")
        let peak = Mutex(idle)
        let sampling = Task {
            while !Task.isCancelled {
                let now = memoryMegabytes("VmRSS")
                peak.withLock { $0 = max($0, now) }
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
        let busy = try batonScript(run: 9)
        _ = try await NIOThreadPool.singleton.runIfActive {
            try Benchmark.wrk(target, script: busy, connections: 16, seconds: duration)
        }
        sampling.cancel()
        let grown = peak.withLock { $0 } - idle
        print(
            String(
                format:
                    "memory with 16 uploads at once: %.0f MB idle, %.0f MB at most: +%.0f MB (target ≤ 64 MiB more: %@)",
                idle, idle + grown, grown, grown <= 64 * 1.048576 ? "met" : "NOT MET"))
    }

    /// The tablet's way: a resumable upload (the creation with the first 1 MiB, then four `PATCH`es of 1 MiB, the
    /// photo written when the last arrives), one at a time from one client, against the same client's plain `PUT`
    /// of the whole photo to the bare route, taking turns.
    func resumable(server: LiveServer, bare: String, photo: URL, token: String, check: String) async throws {
        let bytes = [UInt8](try Data(contentsOf: photo))
        let transport = AsyncHTTPClientTransport()
        let chunk = 1024 * 1024
        guard let bareURL = URL(string: bare),
            let create = URL(string: server.url.absoluteString + "/odata/CheckPhotos")
        else { throw BenchmarkFailure("no URL") }
        var counter = 0
        func uploadOnce() async throws {
            counter += 1
            let slug =
                #"{"ID":"\#(UUID().uuidString.lowercased())","CheckID":"\#(check)"}"#
                .addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
            let created = try await transport.send(
                ClientRequest(
                    method: "POST", url: create,
                    headers: [
                        ("Authorization", "Bearer \(token)"), ("Content-Type", "image/jpeg"), ("Slug", slug),
                        ("Upload-Complete", "?0"), ("Upload-Length", String(bytes.count)),
                    ], body: Array(bytes.prefix(chunk))))
            guard created.status == 201, let location = created.header("Location").flatMap(URL.init(string:)) else {
                throw BenchmarkFailure("the resumable creation answered \(created.status)")
            }
            var offset = chunk
            while offset < bytes.count {
                let end = min(bytes.count, offset + chunk)
                let answer = try await transport.send(
                    ClientRequest(
                        method: "PATCH", url: location,
                        headers: [
                            ("Authorization", "Bearer \(token)"), ("Content-Type", "application/partial-upload"),
                            ("Upload-Offset", String(offset)),
                        ], body: Array(bytes[offset..<end])))
                guard answer.status < 300 else { throw BenchmarkFailure("a PATCH answered \(answer.status)") }
                offset = end
            }
        }
        func plainOnce() async throws {
            let answer = try await transport.send(
                ClientRequest(method: "PUT", url: bareURL, headers: [("Content-Type", "image/jpeg")], body: bytes))
            guard answer.status == 201 else { throw BenchmarkFailure("the bare PUT answered \(answer.status)") }
        }
        func rate(_ body: () async throws -> Void) async throws -> Double {
            let clock = ContinuousClock()
            let start = clock.now
            var done = 0
            while clock.now - start < .seconds(duration) {
                try await body()
                done += 1
            }
            let elapsed = clock.now - start
            return Double(done) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
        print("\nThe tablet's way, one client, one photo at a time, 1 MiB chunks, three rounds taking turns:\n")
        var ratios: [Double] = []
        for round in 1...3 {
            let plain = try await rate(plainOnce)
            let ours = try await rate(uploadOnce)
            ratios.append(Self.printRound(round, "resumable CheckPhotos", plain: plain, ours: ours))
        }
        let median = ratios.sorted()[1]
        print(
            String(
                format:
                    "resumable upload / bare PUT, median of 3: %.2f (the target's 0.50 is the one-request upload's)",
                median))
    }

    /// Prints one round's photos a second as MiB/s next to the bare route's, and returns their ratio.
    static func printRound(_ round: Int, _ label: String, plain: Double, ours: Double) -> Double {
        let megabytes = Double(photoSize) / 1_048_576
        print(
            String(
                format: "round %d: bare PUT to disk %6.1f MiB/s   %@ %6.1f MiB/s   ratio %.2f", round,
                plain * megabytes, label, ours * megabytes, ours / plain))
        return ours / plain
    }

    /// Capture on the tablet: a store opened as a user, a check downloaded, 5 MiB photos taken.
    func capture(server: LiveServer, directory: URL) async throws {
        let device = directory.appendingPathComponent("device")
        let (manager, session) = try await server.onboardSingleUserDevice(
            "bench", password: "load-generator-secret-1", passcode: "12345678", directory: device)
        let store = try OfflineStore(
            url: device.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: manager.deviceID, definingQueries: [DefiningQuery(name: "checks", url: "PreflightChecks")])
        try await store.open(
            as: OfflineUser(name: "bench", signingKey: try session.signingKey()),
            key: SymmetricKey(data: session.storeKey ?? Data(count: 32)))
        _ = try await store.download(using: session.authorized)
        guard let check = try await store.read("PreflightChecks?$top=1").first?.values["ID"] else {
            throw BenchmarkFailure("no check downloaded")
        }
        let clock = ContinuousClock()
        var times: [Duration] = []
        for _ in 0..<21 {
            let bytes = Self.jpeg(size: Self.photoSize)
            times.append(try await clock.measure { _ = try await store.takePhoto(bytes, values: ["CheckID": check]) })
        }
        await store.close()
        // The disk's floor, taking turns with nothing: the same bytes written to a file beside the store and
        // flushed (one fsync, as the store's commit does).
        var floors: [Duration] = []
        for index in 0..<21 {
            let bytes = Self.jpeg(size: Self.photoSize)
            let file = device.appendingPathComponent("floor-\(index)")
            floors.append(
                try clock.measure {
                    guard FileManager.default.createFile(atPath: file.path, contents: nil) else {
                        throw BenchmarkFailure("cannot write \(file.path)")
                    }
                    let handle = try FileHandle(forWritingTo: file)
                    try handle.write(contentsOf: bytes)
                    try handle.synchronize()
                    try handle.close()
                })
            try FileManager.default.removeItem(at: file)
        }
        func p50(_ values: [Duration]) -> Double {
            let median = values.sorted()[values.count / 2]
            return Double(median.components.attoseconds) / 1e15 + Double(median.components.seconds) * 1000
        }
        let milliseconds = p50(times)
        print(
            String(
                format:
                    "capture of a 5 MiB photo on the tablet (location removed, encrypted into the store, queued and signed): %.1f ms p50 of 21 (target ≤ 50 ms: %@)",
                milliseconds, milliseconds <= 50 ? "met" : "NOT MET"))
        print(
            String(
                format: "the disk's floor: the same 5 MiB written to a file and flushed once, %.1f ms p50 of 21",
                p50(floors)))
    }

    /// A JPEG's structure of `size` bytes: start, a scan of random bytes, end.
    static func jpeg(size: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes: [UInt8] = [0xFF, 0xD8, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]
        bytes.reserveCapacity(size)
        while bytes.count < size - 2 { bytes.append(UInt8.random(in: 0...0xFE, using: &generator)) }
        return bytes + [0xFF, 0xD9]
    }

    /// A wrk script whose global `body` is the photo's bytes, read from its file.
    static func script(_ text: String, photo: URL) -> String {
        #"local file = io.open("\#(photo.path)", "rb"); body = file:read("*a"); file:close()"# + "\n" + text
    }

    static func token(_ server: String) async throws -> String {
        guard let url = URL(string: server + "/oauth/token") else { throw BenchmarkFailure("no token URL") }
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data(
            "grant_type=password&client_id=baton-device&username=bench&password=load-generator-secret-1".utf8)
        let (data, _) = try await URLSession.shared.data(for: request)
        guard let token = (try JSONSerialization.jsonObject(with: data) as? [String: Any])?["access_token"] as? String
        else { throw BenchmarkFailure("cannot sign in") }
        return token
    }

    static func checkID(_ server: String, token: String) async throws -> String {
        guard let url = URL(string: server + "/odata/PreflightChecks?$top=1&$select=ID") else {
            throw BenchmarkFailure("no URL")
        }
        var request = URLRequest(url: url)
        request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        let (data, _) = try await URLSession.shared.data(for: request)
        guard
            let id =
                (((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["value"] as? [[String: Any]])?
                .first?["ID"]) as? String
        else { throw BenchmarkFailure("no check") }
        return id
    }
}
