import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A throw-away PostgreSQL cluster for tests: `initdb` into a new temporary directory, `pg_ctl start` on a free
/// port of 127.0.0.1, stopped and deleted by ``stop()``.
///
/// PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user (`runuser`), as
/// Debian's `postgresql` package creates it. The superuser is `baton` with a random password (SCRAM over TCP);
/// the password is in ``password`` and never on a command line (initdb reads it from a private file).
public final class PostgresCluster: Sendable {
    /// The cluster's data directory (inside ``directory``).
    public let dataDirectory: URL
    /// The temporary directory holding the cluster, its socket and its log.
    public let directory: URL
    /// The TCP port on 127.0.0.1.
    public let port: Int
    /// The superuser's name.
    public let user = "baton"
    /// The superuser's password.
    public let password: String
    let owner: String?

    /// Where this machine's PostgreSQL programs are: `/usr/lib/postgresql/<newest>/bin` (Debian), else `PATH`.
    public static var binDirectory: URL? {
        let root = URL(fileURLWithPath: "/usr/lib/postgresql")
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
        for version in versions.sorted(by: { Int($0) ?? 0 > Int($1) ?? 0 }) {
            let bin = root.appendingPathComponent(version).appendingPathComponent("bin")
            if FileManager.default.isExecutableFile(atPath: bin.appendingPathComponent("initdb").path) { return bin }
        }
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        for directory in path.split(separator: ":") {
            let bin = URL(fileURLWithPath: String(directory))
            if FileManager.default.isExecutableFile(atPath: bin.appendingPathComponent("initdb").path) { return bin }
        }
        return nil
    }

    /// What a test says when PostgreSQL is not installed: the command that installs it.
    public static var missing: String? {
        binDirectory == nil
            ? "PostgreSQL is not installed (no initdb). Run scripts/test, the README's test command: it installs the Debian package postgresql."
            : nil
    }

    /// Creates and starts a cluster. Blocks for a few seconds: call it off Swift's concurrency pool
    /// (`offThePool`).
    ///
    /// - Throws: ``PostgresClusterError`` naming the step that failed, with its output.
    public init() throws {
        guard let bin = Self.binDirectory else { throw PostgresClusterError(Self.missing ?? "") }
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-pg-\(UUID().uuidString)")
        dataDirectory = directory.appendingPathComponent("data")
        password = UUID().uuidString + UUID().uuidString
        owner = getuid() == 0 ? "postgres" : nil
        port = try Self.freePort()
        do {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
            let passwordFile = directory.appendingPathComponent("password")
            guard
                FileManager.default.createFile(
                    atPath: passwordFile.path, contents: Data(password.utf8), attributes: [.posixPermissions: 0o600])
            else { throw PostgresClusterError("Cannot write \(passwordFile.path).") }
            if let owner { try Self.run(URL(fileURLWithPath: "/usr/bin/chown"), ["-R", owner, directory.path]) }
            try run(
                bin.appendingPathComponent("initdb"),
                [
                    "-D", dataDirectory.path, "-U", user, "--pwfile=\(passwordFile.path)", "--auth-local=trust",
                    "--auth-host=scram-sha-256", "-E", "UTF8", "--locale=C", "--no-sync",
                ])
            try? FileManager.default.removeItem(at: passwordFile)
            try start()
        } catch {
            // Nothing half-made stays behind: no server, no directory (it held the password file).
            stop()
            throw error
        }
    }

    /// Starts the cluster's server (`pg_ctl start`, waiting until it accepts connections). Blocks.
    func start() throws {
        guard let bin = Self.binDirectory else { throw PostgresClusterError(Self.missing ?? "") }
        // Every server a test starts keeps its pool of connections open: room for a few dozen at once.
        let options =
            "-p \(port) -k \(directory.path) -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300"
        // The server pg_ctl leaves running writes to its log, not to the pipes `Program` reads to their end, and
        // inherits no other descriptor of this process (the child closes every one but the standard three).
        try run(
            bin.appendingPathComponent("pg_ctl"),
            [
                "-D", dataDirectory.path, "-o", options, "-l", directory.appendingPathComponent("log").path, "-w",
                "-t", "60", "start",
            ])
    }

    /// Stops the server as an administrator would for maintenance (`pg_ctl stop -m fast`: open transactions
    /// roll back, connections are cut) and keeps its data, for ``resume()``. Blocks.
    public func pause() throws {
        guard let bin = Self.binDirectory else { throw PostgresClusterError(Self.missing ?? "") }
        try run(bin.appendingPathComponent("pg_ctl"), ["-D", dataDirectory.path, "-m", "fast", "-w", "stop"])
    }

    /// Starts the server again after ``pause()``, on the same port with the same data. Blocks.
    public func resume() throws {
        try start()
    }

    /// `postgres://baton@127.0.0.1:PORT/DATABASE` (the password is not in it: pass ``password`` apart).
    public func url(database: String = "postgres") -> String {
        "postgres://\(user)@127.0.0.1:\(port)/\(database)"
    }

    /// Runs `psql -c SQL` as the superuser over the cluster's socket and returns what it printed.
    @discardableResult
    public func psql(_ sql: String, database: String = "postgres") throws -> String {
        guard let bin = Self.binDirectory else { throw PostgresClusterError(Self.missing ?? "") }
        return try run(
            bin.appendingPathComponent("psql"),
            [
                "-h", directory.path, "-p", String(port), "-U", user, "-d", database, "-v", "ON_ERROR_STOP=1", "-At",
                "-c", sql,
            ])
    }

    /// Stops the cluster at once and deletes its directory, as `pg_ctl -m immediate stop` would: SIGQUIT to the
    /// postmaster that `postmaster.pid` names — only when the file's second line is this cluster's data directory
    /// (a file another cluster's data was copied with signals nobody; a pid since reused by another process with
    /// this very file left behind is not told apart) — then up to ten seconds for the file to go. It runs no
    /// program, so a test's `defer` and the end of the test process may call it from anywhere.
    public func stop() {
        let pidFile = dataDirectory.appendingPathComponent("postmaster.pid")
        if let text = try? String(contentsOf: pidFile, encoding: .utf8) {
            let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
            if lines.count > 1, lines[1] == dataDirectory.path, let pid = pid_t(lines[0]), pid > 1,
                kill(pid, SIGQUIT) == 0
            {
                for _ in 0..<1_000 where FileManager.default.fileExists(atPath: pidFile.path) && kill(pid, 0) == 0 {
                    usleep(10_000)
                }
            }
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Runs a PostgreSQL program as the cluster's owner.
    @discardableResult
    func run(_ program: URL, _ arguments: [String]) throws -> String {
        guard let owner else { return try Self.run(program, arguments) }
        return try Self.run(URL(fileURLWithPath: "/usr/sbin/runuser"), ["-u", owner, "--", program.path] + arguments)
    }

    /// Runs `program` to its end (off Swift's concurrency pool, as every caller of a cluster's blocking methods
    /// is) and returns what it wrote; a status other than 0 is an error that carries what it wrote.
    @discardableResult
    static func run(_ program: URL, _ arguments: [String]) throws -> String {
        let result = try Program.runBlocking(program, arguments, workingDirectory: URL(fileURLWithPath: "/"))
        let text = result.output + result.error
        guard result.status == 0 else {
            throw PostgresClusterError("\(program.lastPathComponent) failed (\(result.status)):\n\(text)")
        }
        return text
    }

    /// A port of 127.0.0.1 nobody listens on now (the kernel's choice for port 0).
    public static func freePort() throws -> Int {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw PostgresClusterError("socket() failed") }
        defer { close(socket) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(socket, pointer, length) == 0 && getsockname(socket, pointer, &length) == 0
            }
        }
        guard bound else { throw PostgresClusterError("Cannot find a free port.") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

/// A step of setting up or using a ``PostgresCluster`` failed.
public struct PostgresClusterError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
