import Foundation
import Testing

/// Which libraries each target reaches, read from `Package.swift` (its targets' `dependencies`, transitively): the
/// dependencies point one way, as docs/ARCHITECTURE.md says.
@Suite struct PackageGraphTests {
    /// Each target's direct dependencies: target names and `.product(name:)` names.
    static func graph() throws -> [String: Set<String>] {
        let manifest = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Package.swift")
        let text = try String(contentsOf: manifest, encoding: .utf8)
        var graph: [String: Set<String>] = [:]
        // Each target declaration runs from `name: "X"` to the next `swiftSettings:` (every target ends with it).
        let targetPattern = try Regex(
            #"\.(?:target|executableTarget|testTarget)\(\s*name:\s*"([^"]+)"(.*?)swiftSettings:"#
        ).dotMatchesNewlines()
        let namePattern = try Regex(#"\.product\(name:\s*"([^"]+)"|"([^"]+)""#)
        for match in text.matches(of: targetPattern) {
            guard let name = match.output[1].substring.map(String.init),
                let rest = match.output[2].substring.map(String.init)
            else { continue }
            guard let start = rest.range(of: "dependencies:") else {
                graph[name] = []
                continue
            }
            var dependencies: Set<String> = []
            let list = rest[start.upperBound...].prefix { $0 != "]" }
            for found in String(list).matches(of: namePattern) {
                if let product = found.output[1].substring {
                    dependencies.insert(String(product))
                } else if let target = found.output[2].substring {
                    dependencies.insert(String(target))
                }
            }
            graph[name] = dependencies
        }
        return graph
    }

    /// Everything `target` reaches.
    static func closure(of target: String, in graph: [String: Set<String>]) -> Set<String> {
        var seen: Set<String> = []
        var next = [target]
        while let current = next.popLast() {
            for dependency in graph[current] ?? [] where seen.insert(dependency).inserted {
                next.append(dependency)
            }
        }
        return seen
    }

    @Test func theGraphIsRead() throws {
        let graph = try Self.graph()
        #expect(graph.count >= 30)
        #expect(graph["BatonServer"]?.contains("Hummingbird") == true)
        #expect(Self.closure(of: "BatonFlows", in: graph).contains("BatonSecureStore"))
    }

    @Test func theServerReachesNoDeviceLibrary() throws {
        let reached = Self.closure(of: "BatonServer", in: try Self.graph())
        #expect(reached.contains("Hummingbird") && reached.contains("BatonOData"), "the graph is read")
        for device in ["BatonSecureStore", "BatonOffline", "BatonFlows", "BatonClient"] {
            #expect(!reached.contains(device), "BatonServer reaches \(device)")
        }
    }

    @Test func thePureTranslatorNeedsNoDatabaseLibrary() throws {
        let graph = try Self.graph()
        #expect(graph["BatonSQL"] == ["BatonOData"], "the graph is read: BatonSQL depends on BatonOData alone")
        let reached = Self.closure(of: "BatonSQL", in: graph)
        #expect(!reached.contains("GRDB") && !reached.contains("PostgresNIO"), "\(reached.sorted())")
    }

    /// The app that ships to tablets links no server library: `baton demo` starts `baton-demo`, which is not linked in.
    @Test func theAppReachesNoServerLibrary() throws {
        let reached = Self.closure(of: "baton", in: try Self.graph())
        for server in ["BatonServer", "BatonTesting", "Hummingbird", "baton-demo"] {
            #expect(!reached.contains(server), "baton reaches \(server)")
        }
        #expect(reached.contains("BatonOffline"), "the graph is read: baton reaches the offline store")
    }
}
