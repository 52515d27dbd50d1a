import ArgumentParser
import BatonSQLGRDB
import BatonServer
import BatonTesting
import Foundation
import GRDB
import Hummingbird
import Logging
import NIOPosix
import PostgresNIO

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// CPU seconds used so far by this process (the servers) and by its finished children (wrk), and this
/// process's context switches.
struct CPUTime {
    var server: Double
    var generator: Double
    var switches: Double

    static func now() -> CPUTime {
        func usage(_ who: Int32) -> rusage {
            var usage = rusage()
            getrusage(who, &usage)
            return usage
        }
        func seconds(_ usage: rusage) -> Double {
            Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec)
                + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        }
        let own = usage(RUSAGE_SELF.rawValue)
        return CPUTime(
            server: seconds(own), generator: seconds(usage(RUSAGE_CHILDREN.rawValue)),
            switches: Double(own.ru_nvcsw + own.ru_nivcsw))
    }

    /// Nothing used yet: where slices of a measurement are added up.
    static let zero = CPUTime(server: 0, generator: 0, switches: 0)

    static func + (lhs: CPUTime, rhs: CPUTime) -> CPUTime {
        CPUTime(
            server: lhs.server + rhs.server, generator: lhs.generator + rhs.generator,
            switches: lhs.switches + rhs.switches)
    }

    static func - (lhs: CPUTime, rhs: CPUTime) -> CPUTime {
        CPUTime(
            server: lhs.server - rhs.server, generator: lhs.generator - rhs.generator,
            switches: lhs.switches - rhs.switches)
    }
}

/// CPU seconds other processes have used, from `/proc/PID/stat` (user + system time).
enum ProcessCPU {
    static let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))

    /// The CPU seconds of the processes with these ids (0 for those gone).
    static func of(_ pids: [Int32]) -> Double {
        pids.reduce(0) { $0 + seconds(pid: String($1)) }
    }

    /// The CPU seconds of every process named `name` (its `comm`).
    static func named(_ name: String) -> Double {
        let all = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return all.filter { $0.allSatisfy(\.isNumber) }.reduce(0) { total, pid in
            let comm = (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8)) ?? ""
            return comm.hasPrefix(name) ? total + seconds(pid: pid) : total
        }
    }

    /// Every PostgreSQL server process of this machine (the postmaster and its backends).
    static func postgres() -> Double { named("postgres") }

    static func seconds(pid: String) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        // After the command name in parentheses: state is field 3; utime and stime are fields 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / ticks
    }
}

/// A memory figure of this process from `/proc/self/status` (`VmRSS`, `VmHWM`), in MB; 0 if absent.
func memoryMegabytes(_ field: String) -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    for line in status.split(separator: "\n") where line.hasPrefix(field + ":") {
        return (line.split(separator: " ").compactMap { Double($0) }.first ?? 0) / 1024
    }
    return 0
}
