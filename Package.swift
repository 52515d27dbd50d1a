// swift-tools-version:6.1
import PackageDescription

/// One set of Swift settings for every target: Swift 6 language mode with strict concurrency comes from the
/// tools version; `ExistentialAny` makes every existential spelled `any`.
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "Baton",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .library(name: "BatonOData", targets: ["BatonOData"]),
        .library(name: "BatonSQL", targets: ["BatonSQL"]),
        .library(name: "BatonSecureStore", targets: ["BatonSecureStore"]),
        .library(name: "BatonClient", targets: ["BatonClient"]),
        .library(name: "BatonFlows", targets: ["BatonFlows"]),
        .library(name: "BatonOffline", targets: ["BatonOffline"]),
        .library(name: "BatonServer", targets: ["BatonServer"]),
        .library(name: "BatonTesting", targets: ["BatonTesting"]),
        .executable(name: "baton", targets: ["baton"]),
        .executable(name: "baton-server", targets: ["baton-server"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.2"),
        .package(url: "https://github.com/groue/GRDB.swift.git", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-auth.git", from: "2.5.0"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/jwt-kit.git", from: "5.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/vapor/console-kit.git", from: "4.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context.git", from: "1.0.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
    ],
    targets: [
        // OData 4.01 protocol core: model, $metadata, URLs, $filter, payloads, batch, headers. No I/O.
        .target(
            name: "BatonOData",
            resources: [.copy("Resources/AircraftChecks.csdl.json")],
            swiftSettings: swiftSettings
        ),
        // OData query AST -> parameterised SQL (SQLite and PostgreSQL dialects).
        .target(
            name: "BatonSQL",
            dependencies: ["BatonOData", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        // Per-user encrypted store behind a passcode (SDK).
        .target(
            name: "BatonSecureStore",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "CryptoExtras", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The device's HTTP client: transport, OAuth 2.0, settings, device registration, store key.
        .target(
            name: "BatonClient",
            dependencies: [
                "BatonOData",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            swiftSettings: swiftSettings
        ),
        // The offline OData store: local OData on SQLite, request queue, upload, download, error archive.
        .target(
            name: "BatonOffline",
            dependencies: [
                "BatonClient",
                "BatonOData",
                "BatonSQL",
                "BatonSecureStore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        // The onboarding lifecycle: session manager, controller, flows and steps, user registry.
        .target(
            name: "BatonFlows",
            dependencies: [
                "BatonClient",
                "BatonOData",
                "BatonOffline",
                "BatonSecureStore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // The server library: identity (OAuth 2.0, OpenID Connect sign-in, SCIM), settings exchange, devices, audit,
        // storage.
        .target(
            name: "BatonServer",
            dependencies: [
                "BatonOData",
                "BatonSQL",
                "BatonSecureStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdBcrypt", package: "hummingbird-auth"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        // The fault and load harness: a fault-injecting HTTP proxy, simulated devices, one invariant checker.
        .target(
            name: "BatonChaos",
            dependencies: [
                "BatonClient",
                "BatonFlows",
                "BatonOData",
                "BatonOffline",
                "BatonSecureStore",
                "BatonServer",
                "BatonTesting",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // `baton-chaos`: the harness's short (CI) and long runs, with their figures.
        .executableTarget(
            name: "baton-chaos",
            dependencies: ["BatonChaos", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: swiftSettings
        ),
        // Test helper: writes to a secure store until killed (crash-safety test).
        .executableTarget(
            name: "baton-store-writer",
            dependencies: ["BatonSecureStore", "BatonTesting"],
            swiftSettings: swiftSettings
        ),
        // Test helper: uploads an offline store's queue until killed (sync crash-safety test).
        .executableTarget(
            name: "baton-sync-helper",
            dependencies: [
                "BatonClient", "BatonOData", "BatonOffline", .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The test kit: a live in-process baton-server, a scripted presenter, a test clock.
        .target(
            name: "BatonTesting",
            dependencies: [
                "BatonClient",
                "BatonFlows",
                "BatonServer",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // Test-only: the trait that keeps the number of tests serving Baton at once small.
        .target(
            name: "BatonTestSupport",
            swiftSettings: swiftSettings
        ),
        // The server executable: serve, user, settings.
        .executableTarget(
            name: "baton-server",
            dependencies: [
                "BatonOData",
                "BatonServer",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // Benchmarks the data service against a bare Hummingbird route with wrk (run with -c release).
        .executableTarget(
            name: "baton-bench",
            dependencies: [
                "BatonClient",
                "BatonFlows",
                "BatonOData",
                "BatonOffline",
                "BatonSQL",
                "BatonSecureStore",
                "BatonServer",
                "BatonTesting",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: swiftSettings
        ),
        // The ground-crew app: interactive (no subcommand), scriptable subcommands, `baton demo`, `baton sql`.
        .executableTarget(
            name: "baton",
            dependencies: [
                "BatonClient",
                "BatonFlows",
                "BatonOData",
                "BatonOffline",
                "BatonSQL",
                "BatonTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ConsoleKitTerminal", package: "console-kit"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        // One fuzz input through one parser (its first byte picks which), for baton-fuzz and the corpus replay test.
        .target(
            name: "BatonFuzzing",
            dependencies: ["BatonOData", "BatonSQL"],
            swiftSettings: swiftSettings
        ),
        // Replays inputs through the parsers; built with `-sanitize=fuzzer` it is a libFuzzer target.
        .executableTarget(
            name: "baton-fuzz",
            dependencies: ["BatonFuzzing"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonODataTests",
            dependencies: [
                "BatonOData",
                .product(name: "Yams", package: "Yams"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            resources: [.copy("Corpus")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonServerTests",
            dependencies: [
                "BatonTestSupport",
                "BatonServer",
                "BatonTesting",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            resources: [.copy("Interop")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonClientTests",
            dependencies: ["BatonTestSupport", "BatonClient", "BatonTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonFlowsTests",
            dependencies: ["BatonTestSupport", "BatonFlows", "BatonTesting", "BatonSecureStore", "BatonClient"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonOfflineTests",
            dependencies: [
                "BatonTestSupport", "BatonOffline", "BatonTesting", "BatonFlows", "BatonClient", "BatonOData",
                "BatonServer", "BatonChaos", .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonSecureStoreTests",
            dependencies: ["BatonSecureStore", "BatonTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonSQLTests",
            dependencies: [
                "BatonFuzzing",
                "BatonSQL",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            swiftSettings: swiftSettings
        ),
        // Runs the built `baton` executable, as a user would.
        .testTarget(
            name: "batonTests",
            dependencies: ["BatonTestSupport", "baton", "BatonTesting"],
            resources: [.copy("Terminal")],
            swiftSettings: swiftSettings
        ),
    ]
)
