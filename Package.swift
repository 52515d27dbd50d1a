// swift-tools-version:6.2
import PackageDescription

/// One set of Swift settings for every target: Swift 6 language mode with strict concurrency comes from the
/// tools version; `ExistentialAny` makes every existential spelled `any`.
// Every target of the package builds without a warning: CI fails on one (dependencies keep their own warnings).
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .treatAllWarnings(as: .error),
]

/// The server's settings add `NonisolatedNonsendingByDefault` (SE-0461): an async function without isolation runs on
/// its caller's executor instead of hopping to the global one. The server makes NIO's event loops Swift concurrency's
/// global executor (`BatonServer.runConcurrencyOnEventLoops()`), whose jobs run as the loop's serial executor, so
/// every such hop was a job enqueued on the loop and run at its next tick: it took a key read from 64 such jobs to 49
/// (`EventLoopTaskExecutor` took the rest down to 26; docs/BENCHMARKS.md).
let serverSwiftSettings = swiftSettings + [.enableUpcomingFeature("NonisolatedNonsendingByDefault")]

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
        .library(name: "AircraftChecks", targets: ["AircraftChecks"]),
        .executable(name: "baton", targets: ["baton"]),
        .executable(name: "baton-demo", targets: ["baton-demo"]),
        .executable(name: "baton-server", targets: ["baton-server"]),
        .executable(name: "baton-codegen", targets: ["baton-codegen"]),
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
        // The test kit's runner for a program run to its end (`BatonTesting.Program`).
        .package(url: "https://github.com/swiftlang/swift-subprocess.git", from: "1.0.2"),
        .package(url: "https://github.com/apple/swift-system.git", from: "1.8.1"),
        // Only `baton-bench --multipart`: the yardstick Baton's own `$batch` multipart layer is measured against.
        .package(url: "https://github.com/vapor/multipart-kit.git", from: "4.7.1"),
        // `swift package generate-documentation`: the DocC catalogs, built in CI with warnings as errors.
        .package(url: "https://github.com/swiftlang/swift-docc-plugin.git", from: "1.5.0"),
    ],
    targets: [
        // OData 4.01 protocol core: model, $metadata, URLs, $filter, payloads, batch, headers. No I/O.
        .target(
            name: "BatonOData",
            resources: [.copy("Resources/AircraftChecks.csdl.json")],
            swiftSettings: swiftSettings
        ),
        // Swift types for a model's entity types (one struct per entity type), written by `baton-codegen`.
        .target(name: "BatonCodegen", dependencies: ["BatonOData"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "baton-codegen",
            dependencies: [
                "BatonCodegen", "BatonOData", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // The aircraft-checks model's entity types, generated by `scripts/codegen` and checked in.
        .target(name: "AircraftChecks", dependencies: ["BatonOData"], swiftSettings: swiftSettings),
        // The "Getting started" article's app (BatonFlows.docc): built with everything else, run by QuickStartTests.
        .target(
            name: "QuickStart",
            dependencies: ["AircraftChecks", "BatonFlows", "BatonOData", "BatonOffline", "BatonSecureStore"],
            path: "Examples/QuickStart",
            swiftSettings: swiftSettings
        ),
        // OData query AST -> parameterised SQL (SQLite and PostgreSQL dialects).
        .target(
            name: "BatonSQL",
            dependencies: ["BatonOData"],
            swiftSettings: swiftSettings
        ),
        // BatonSQL's values and queries as GRDB binds and reads them (the device's store and the server's SQLite).
        .target(
            name: "BatonSQLGRDB",
            dependencies: ["BatonSQL", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: swiftSettings
        ),
        // Files written whole or not at all (the secure stores, the server's keys): the device and the server share it.
        .target(
            name: "BatonFiles",
            swiftSettings: swiftSettings
        ),
        // Per-user encrypted store behind a passcode (SDK).
        .target(
            name: "BatonSecureStore",
            dependencies: [
                "BatonFiles",
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
                "BatonFiles",
                "BatonOData",
                "BatonSQL",
                "BatonSQLGRDB",
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
                "BatonFiles",
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
                "BatonFiles",
                "BatonOData",
                "BatonSQL",
                "BatonSQLGRDB",
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
            swiftSettings: serverSwiftSettings
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
                "BatonTestSupport",
                "BatonTesting",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // `baton-chaos`: the harness's short (CI) and long runs, with their figures; its hidden commands are the
        // processes the harness and the crash tests kill (`tablet-sync`, `disk-writer`, `store-writer`).
        .executableTarget(
            name: "baton-chaos",
            dependencies: ["BatonChaos", .product(name: "ArgumentParser", package: "swift-argument-parser")],
            swiftSettings: swiftSettings
        ),
        // The test kit: a live in-process baton-server, a shared test tablet, a scripted presenter, a test clock, a
        // program runner.
        .target(
            name: "BatonTesting",
            dependencies: [
                "BatonClient",
                "BatonOData",
                "BatonFlows",
                "BatonOffline",
                "BatonSecureStore",
                "BatonServer",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Subprocess", package: "swift-subprocess"),
                .product(name: "SystemPackage", package: "swift-system"),
            ],
            swiftSettings: swiftSettings
        ),
        // Test-only: the trait that keeps the number of tests serving Baton at once small, and image fixtures.
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
                "BatonSQLGRDB",
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
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "MultipartKit", package: "multipart-kit"),
            ],
            swiftSettings: swiftSettings
        ),
        // The ground-crew app: interactive (no subcommand) and scriptable subcommands. Device libraries only: `baton
        // demo` and `baton sql` start `baton-demo`, which is not linked in.
        .executableTarget(
            name: "baton",
            dependencies: [
                "AircraftChecks",
                "BatonClient",
                "BatonFlows",
                "BatonOData",
                "BatonOffline",
                "BatonSecureStore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ConsoleKitTerminal", package: "console-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // `baton-demo`: the shift handover on an in-process server, the OData core on SQLite, `sql`.
        .executableTarget(
            name: "baton-demo",
            dependencies: [
                "BatonClient",
                "BatonFlows",
                "BatonOData",
                "BatonOffline",
                "BatonSQL",
                "BatonSQLGRDB",
                "BatonTesting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
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
                "BatonTestSupport",
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
            swiftSettings: serverSwiftSettings
        ),
        .testTarget(
            name: "BatonClientTests",
            dependencies: ["AircraftChecks", "BatonOData", "BatonTestSupport", "BatonClient", "BatonTesting"],
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
                "BatonServer", "BatonChaos", "AircraftChecks", "QuickStart",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonSecureStoreTests",
            dependencies: ["BatonChaos", "BatonFiles", "BatonSecureStore", "BatonTesting"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonSQLTests",
            dependencies: [
                "BatonFuzzing",
                "BatonSQL",
                "BatonSQLGRDB",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BatonCodegenTests",
            dependencies: ["AircraftChecks", "BatonCodegen", "BatonOData"],
            exclude: ["AllTypes.csdl.json"],
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
