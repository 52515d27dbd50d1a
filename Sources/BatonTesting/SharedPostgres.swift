import BatonServer
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Where a test keeps the server's state: the two engines of `ServerStorage`. Suites run their bodies once per
/// backend (`@Test(arguments: StorageBackend.allCases)`), so both engines pass the same tests.
public enum StorageBackend: String, Sendable, CaseIterable, CustomStringConvertible {
    /// SQLite files in a temporary data directory.
    case sqlite
    /// A database of its own on the test process's ``SharedPostgres`` cluster.
    case postgres

    public var description: String { rawValue }

    /// A fresh database for one test on this backend: `nil` for SQLite (the data directory is enough).
    public func freshDatabase() async throws -> PostgresLocation? {
        switch self {
        case .sqlite: nil
        case .postgres: try await SharedPostgres.freshDatabase()
        }
    }
}

/// One PostgreSQL cluster for the whole test process, started by the first test that needs it and stopped when
/// the process exits; every test gets a new, empty database on it.
public enum SharedPostgres {
    private static let cluster = Mutex<Result<PostgresCluster, PostgresClusterError>?>(nil)

    /// The shared cluster, started on first use (initdb, a few seconds).
    ///
    /// - Throws: ``PostgresClusterError`` when PostgreSQL is not installed or does not start (then every later
    ///   call throws the same).
    public static func shared() async throws -> PostgresCluster {
        try await offThePool {
            try cluster.withLock { state in
                if let state { return try state.get() }
                let started = Result { () throws(PostgresClusterError) -> PostgresCluster in
                    do { return try PostgresCluster() } catch let error as PostgresClusterError {
                        throw error
                    } catch { throw PostgresClusterError("\(error)") }
                }
                state = started
                if case .success = started { atexit { SharedPostgres.stopAtExit() } }
                return try started.get()
            }
        }
    }

    /// A new, empty database on the shared cluster, named at random; its location carries the superuser's
    /// password (as `BATON_DATABASE_URL` would).
    public static func freshDatabase() async throws -> PostgresLocation {
        let cluster = try await shared()
        let name = "t_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
        _ = try await offThePool { try cluster.psql("CREATE DATABASE \(name)") }
        var location = try PostgresLocation(parsing: cluster.url(database: name), fromCommandLine: false)
        location.password = cluster.password
        return location
    }

    private static func stopAtExit() {
        if case .success(let cluster) = cluster.withLock({ $0 }) { cluster.stop() }
    }
}
