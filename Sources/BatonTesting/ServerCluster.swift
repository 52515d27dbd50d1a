import BatonServer
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Real `baton-server serve` processes on one PostgreSQL database behind a real nginx, configured from
/// `deploy/nginx.conf` (only the ports differ): the deployment docs/OPERATIONS.md describes, for the tests that kill
/// instances.
///
/// Each instance gets its database URL (with the password) and the master-key file from its environment, as
/// `deploy/baton-server@.service` gives them, never on its command line.
public final class ServerCluster: Sendable {
    /// The balancer's address: `http://127.0.0.1:PORT`.
    public let url: URL
    /// The database every instance serves.
    public let database: PostgresLocation
    /// The master-key file every instance reads.
    public let masterKeyFile: URL
    let directory: URL
    let ports: [Int]
    /// `--changes-per-user` of every instance (`nil`: the default).
    let changesPerUser: Int?
    let instances: Mutex<[Process?]>
    let balancer: Mutex<Process?>

    /// Where `swift build` put the test's executables (`baton-server` among them).
    public static var buildDirectory: URL { builtExecutable("baton-server").deletingLastPathComponent() }

    /// nginx, or `nil` when it is not installed.
    public static var nginx: URL? {
        ["/usr/sbin/nginx", "/usr/bin/nginx"].map(URL.init(fileURLWithPath:)).first {
            FileManager.default.isExecutableFile(atPath: $0.path)
        }
    }

    /// Prepares `database` (migrations, users, data) in process with `prepare`, then starts `count` instances
    /// and nginx in front of them, all with `masterKey` (a new one when `nil`) and `changesPerUser` (a load
    /// generator signed in as one user sends more changes at once than a tablet).
    ///
    /// - Throws: when a process does not start or does not listen.
    public static func start(
        instances count: Int = 2, database: PostgresLocation, masterKey: Data? = nil, changesPerUser: Int? = nil,
        prepare: @Sendable (BatonServer) async throws -> Void = { _ in }
    ) async throws -> ServerCluster {
        guard let nginx else {
            throw PostgresClusterError(
                "nginx is not installed. Run scripts/test, the README's test command: it installs the Debian package nginx-light."
            )
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-cluster-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let masterKeyFile = directory.appendingPathComponent("master.key")
        guard
            FileManager.default.createFile(
                atPath: masterKeyFile.path,
                contents: masterKey ?? Data((0..<32).map { _ in UInt8.random(in: 0...255) }),
                attributes: [.posixPermissions: 0o600])
        else { throw PostgresClusterError("Cannot write \(masterKeyFile.path).") }
        var configuration = BatonServerConfiguration()
        configuration.dataDirectory = directory.appendingPathComponent("prepare")
        configuration.database = database
        configuration.databaseConnections = 4
        configuration.masterKeyFile = masterKeyFile
        configuration.bcryptCost = 4
        let server = try await BatonServer(configuration: configuration, logger: .init(label: "cluster-prepare"))
        do {
            try await prepare(server)
        } catch {
            server.close()
            throw error
        }
        server.close()
        let ports = try (0..<count).map { _ in try PostgresCluster.freePort() }
        let balancerPort = try PostgresCluster.freePort()
        let cluster = ServerCluster(
            url: URL(fileURLWithPath: "/").loopback(port: balancerPort), database: database,
            masterKeyFile: masterKeyFile,
            directory: directory, ports: ports, changesPerUser: changesPerUser)
        do {
            try await offThePool {
                for index in ports.indices { try cluster.startInstance(index) }
                try cluster.startBalancer(port: balancerPort, nginx: nginx)
            }
        } catch {
            cluster.stop()
            throw error
        }
        return cluster
    }

    init(
        url: URL, database: PostgresLocation, masterKeyFile: URL, directory: URL, ports: [Int], changesPerUser: Int?
    ) {
        self.url = url
        self.database = database
        self.masterKeyFile = masterKeyFile
        self.directory = directory
        self.ports = ports
        self.changesPerUser = changesPerUser
        instances = Mutex(Array(repeating: nil, count: ports.count))
        balancer = Mutex(nil)
    }

    /// How many instances the cluster has.
    public var count: Int { ports.count }

    /// The URL of one instance, past the balancer.
    public func instanceURL(_ index: Int) -> URL { URL(fileURLWithPath: "/").loopback(port: ports[index]) }

    /// Starts instance `index` (again) on its port and waits until it listens. Blocks.
    public func startInstance(_ index: Int) throws {
        let process = Process()
        process.executableURL = Self.buildDirectory.appendingPathComponent("baton-server")
        process.arguments =
            [
                "serve", "--port", String(ports[index]), "--data-dir",
                directory.appendingPathComponent("instance-\(index)").path, "--public-url", url.absoluteString,
                "--trusted-proxy", "127.0.0.1", "--log-level", "error", "--database-connections", "4",
            ] + (changesPerUser.map { ["--changes-per-user", String($0)] } ?? [])
        var environment = ProcessInfo.processInfo.environment
        environment["BATON_DATABASE_URL"] = database.urlWithPassword
        environment["BATON_MASTER_KEY_FILE"] = masterKeyFile.path
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = try FileHandle(forWritingTo: log("instance-\(index).log"))
        process.standardInput = FileHandle.nullDevice
        try process.runAlone()
        var text = ""
        while !text.contains("\n") {
            let chunk = output.fileHandleForReading.availableData
            guard !chunk.isEmpty else { break }
            text += String(decoding: chunk, as: UTF8.self)
        }
        guard text.hasPrefix("listening on ") else {
            process.terminate()
            process.waitUntilExit()
            let log = (try? String(contentsOf: self.log("instance-\(index).log"), encoding: .utf8)) ?? ""
            throw PostgresClusterError("Instance \(index) did not start: \(text)\(log.suffix(2000))")
        }
        instances.withLock { $0[index] = process }
    }

    /// Kills instance `index` with SIGKILL (no graceful shutdown, requests in flight are cut) and reaps it.
    public func kill(_ index: Int) {
        guard let process = instances.withLock({ $0[index] }) else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        instances.withLock { $0[index] = nil }
    }

    /// The process ids of the running instances.
    public var processIdentifiers: [Int32] {
        instances.withLock { $0.compactMap { $0?.processIdentifier } }
    }

    /// Whether instance `index` runs.
    public func isRunning(_ index: Int) -> Bool { instances.withLock { $0[index]?.isRunning ?? false } }

    /// Stops everything (SIGTERM to the instances, nginx quits) and deletes the cluster's directory.
    public func stop() {
        for process in instances.withLock({ $0 }).compactMap({ $0 }) {
            process.terminate()
            process.waitUntilExit()
        }
        instances.withLock { $0 = Array(repeating: nil, count: ports.count) }
        if let nginx = balancer.withLock({ $0 }) {
            nginx.terminate()
            nginx.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// What instance `index` wrote to its standard error.
    public func instanceLog(_ index: Int) -> String {
        (try? String(contentsOf: log("instance-\(index).log"), encoding: .utf8)) ?? ""
    }

    func log(_ name: String) -> URL {
        let file = directory.appendingPathComponent(name)
        if !FileManager.default.fileExists(atPath: file.path) {
            _ = FileManager.default.createFile(
                atPath: file.path, contents: nil, attributes: [.posixPermissions: 0o600])
        }
        return file
    }

    /// nginx with the repository's `deploy/nginx.conf`, its ports replaced by this cluster's, in the foreground.
    func startBalancer(port: Int, nginx: URL) throws {
        let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/nginx.conf")
        var text = try String(contentsOf: shipped, encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard let first = lines.firstIndex(where: { $0.contains("server 127.0.0.1:8081") }),
            lines.contains(where: { $0.contains("listen 127.0.0.1:8080;") })
        else { throw PostgresClusterError("deploy/nginx.conf no longer has the upstreams this test replaces.") }
        // The shipped upstream line, with each instance's port.
        let upstreams = ports.map { lines[first].replacingOccurrences(of: "127.0.0.1:8081", with: "127.0.0.1:\($0)") }
        let rest = lines[(first + 1)...].drop { $0.contains("server 127.0.0.1:80") }
        text = (lines[..<first] + upstreams + rest).joined(separator: "\n")
            .replacingOccurrences(of: "listen 127.0.0.1:8080;", with: "listen 127.0.0.1:\(port);")
        let prefix = directory.appendingPathComponent("nginx")
        try FileManager.default.createDirectory(at: prefix, withIntermediateDirectories: true)
        // As root, nginx's workers run as nobody: they must pass through to the temporary directories under the
        // prefix (0711: they list nothing, and the instances' logs are 0600).
        try FileManager.default.setAttributes([.posixPermissions: 0o711], ofItemAtPath: directory.path)
        let configuration = prefix.appendingPathComponent("nginx.conf")
        try text.write(to: configuration, atomically: true, encoding: .utf8)
        let process = Process()
        process.executableURL = nginx
        process.arguments = ["-p", prefix.path, "-c", configuration.path, "-g", "daemon off;"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: log("nginx.log"))
        process.standardInput = FileHandle.nullDevice
        try process.runAlone()
        balancer.withLock { $0 = process }
        // Listening once /health answers through it.
        let deadline = Date().addingTimeInterval(15)
        while Date() < deadline {
            if Self.status(of: url.appendingPathComponent("health")) == 200 { return }
            guard process.isRunning else { break }
            usleep(50_000)
        }
        let log = (try? String(contentsOf: log("nginx.log"), encoding: .utf8)) ?? ""
        throw PostgresClusterError("nginx did not start: \(log.suffix(2000))")
    }

    /// The status of a GET, or `nil` when nothing answers. Blocks.
    static func status(of url: URL) -> Int? {
        let result = Mutex<Int?>(nil)
        let done = DispatchSemaphore(value: 0)
        var request = URLRequest(url: url)
        request.timeoutInterval = 2
        URLSession.shared.dataTask(with: request) { _, response, _ in
            result.withLock { $0 = (response as? HTTPURLResponse)?.statusCode }
            done.signal()
        }.resume()
        done.wait()
        return result.withLock { $0 }
    }
}

/// The executable `name` that `swift build` put beside the running test binary (or a few directories up from
/// it, as the test bundle nests on Linux).
public func builtExecutable(_ name: String) -> URL {
    var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    for _ in 0..<4 where !FileManager.default.isExecutableFile(atPath: directory.appendingPathComponent(name).path) {
        directory.deleteLastPathComponent()
    }
    return directory.appendingPathComponent(name)
}

extension URL {
    /// `http://127.0.0.1:PORT`.
    func loopback(port: Int) -> URL {
        var components = URLComponents()
        components.scheme = "http"
        components.host = "127.0.0.1"
        components.port = port
        return components.url ?? self
    }
}

extension PostgresLocation {
    /// The location as a URL with its password, as `BATON_DATABASE_URL` carries it.
    var urlWithPassword: String {
        let password = (password ?? "").addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        return "postgres://\(user):\(password)@\(host):\(port)/\(database)"
            + "?sslmode=\(tls.rawValue)"
    }
}
