import BatonChaos
import BatonTesting
import Foundation
import Testing

@testable import BatonFiles
@testable import BatonSecureStore

@Suite struct SecureStoreTests {
    /// Cheap scrypt for tests; the stored parameters make it work the same as the real cost.
    static let fast = KeyDerivation(cost: 1 << 10)
    static var policy: PasscodePolicy {
        var policy = PasscodePolicy()
        policy.retryLimit = 3
        return policy
    }

    struct Tokens: Codable, Equatable {
        var access: String
        var refresh: String
        var expires: Date
    }

    let directory: URL

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-secure-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    }

    func file(_ name: String) -> URL { directory.appendingPathComponent(name) }

    @Test func typedValuesSurviveReopening() async throws {
        let url = file("alice.store")
        defer { try? FileManager.default.removeItem(at: directory) }
        let tokens = Tokens(
            access: "a.b.c", refresh: "opaque-refresh", expires: Date(timeIntervalSince1970: 1_800_000_000))
        let store = try SecureStore.create(at: url, passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        try await store.set(tokens, forKey: "tokens")
        try await store.set(42, forKey: "count")
        let reopened = try SecureStore.open(at: url, passcode: "alice-2026")
        #expect(try await reopened.value(Tokens.self, forKey: "tokens") == tokens)
        #expect(try await reopened.value(Int.self, forKey: "count") == 42)
        #expect(try await reopened.value(String.self, forKey: "missing") == nil)
        await #expect(throws: SecureStoreError.self) { try await reopened.value(Tokens.self, forKey: "count") }
        try await reopened.removeValue(forKey: "count")
        #expect(try await SecureStore.open(at: url, passcode: "alice-2026").keys == ["tokens"])
    }

    @Test func nothingSecretIsReadableInTheFile() async throws {
        let url = file("alice.store")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SecureStore.create(at: url, passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        try await store.set("super-secret-refresh-token", forKey: "refreshToken")
        let bytes = String(decoding: try Data(contentsOf: url), as: UTF8.self)
        #expect(!bytes.contains("super-secret-refresh-token"))
        #expect(!bytes.contains("refreshToken"))
        #expect(!bytes.contains("alice-2026"))
        let attributes = try FileManager.default.attributesOfItem(atPath: url.path)
        #expect(attributes[.posixPermissions] as? Int == 0o600)
    }

    @Test func wrongPasscodesCountAcrossRestartsAndTheLimitWipes() throws {
        let url = file("alice.store")
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try SecureStore.create(at: url, passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        #expect {
            try SecureStore.open(at: url, passcode: "alice-2025")
        } throws: { ($0 as? SecureStoreError)?.remainingAttempts == 2 }
        // A restart: the count is read from the file again.
        #expect {
            try SecureStore.open(at: url, passcode: "alice-2024")
        } throws: {
            ($0 as? SecureStoreError)?.message == "The passcode is wrong; 1 attempt(s) left."
        }
        #expect {
            try SecureStore.open(at: url, passcode: "alice-2023")
        } throws: { ($0 as? SecureStoreError)?.code == .wiped }
        #expect(!SecureStore.exists(at: url))
        #expect { try SecureStore.open(at: url, passcode: "alice-2026") } throws: {
            ($0 as? SecureStoreError)?.code == .notFound
        }
    }

    @Test func aCorrectPasscodeResetsTheCount() throws {
        let url = file("alice.store")
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try SecureStore.create(at: url, passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        for _ in 0..<2 { _ = try? SecureStore.open(at: url, passcode: "wrong-0000") }
        _ = try SecureStore.open(at: url, passcode: "alice-2026")
        #expect { try SecureStore.open(at: url, passcode: "wrong-0000") } throws: {
            ($0 as? SecureStoreError)?.remainingAttempts == 2
        }
    }

    @Test(arguments: ["garbage", "truncated", "tampered payload"])
    func damagedFilesAreReportedAsCorruptedNotAsWrongPasscodes(_ damage: String) async throws {
        let url = file("alice.store")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SecureStore.create(at: url, passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        try await store.set("value", forKey: "key")
        var data = try Data(contentsOf: url)
        switch damage {
        case "garbage": data = Data("not a store".utf8)
        case "truncated": data = data.prefix(data.count / 2)
        default:
            var object = try JSONSerialization.jsonObject(with: data) as? [String: Any] ?? [:]
            var payload = Data(base64Encoded: object["payload"] as? String ?? "") ?? Data()
            payload[payload.count - 1] ^= 0x01
            object["payload"] = payload.base64EncodedString()
            data = try JSONSerialization.data(withJSONObject: object)
        }
        try data.write(to: url)
        #expect {
            try SecureStore.open(at: url, passcode: "alice-2026")
        } throws: {
            ($0 as? SecureStoreError)?.code == .corrupted
                && ($0 as? SecureStoreError)?.message == "The secure store file is damaged and cannot be read."
        }
    }

    @Test func twoUsersStoresDoNotOpenWithEachOthersPasscodes() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try SecureStore.create(at: file("alice.store"), passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        _ = try SecureStore.create(at: file("bob.store"), passcode: "bob-20261", policy: Self.policy, kdf: Self.fast)
        #expect { try SecureStore.open(at: file("alice.store"), passcode: "bob-20261") } throws: {
            ($0 as? SecureStoreError)?.code == .wrongPasscode
        }
        #expect { try SecureStore.open(at: file("bob.store"), passcode: "alice-2026") } throws: {
            ($0 as? SecureStoreError)?.code == .wrongPasscode
        }
    }

    @Test func changingThePasscodeKeepsTheValues() async throws {
        let url = file("alice.store")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SecureStore.create(at: url, passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        try await store.set("kept", forKey: "key")
        try await store.changePasscode(to: "new-passcode-7", policy: Self.policy, kdf: Self.fast)
        #expect { try SecureStore.open(at: url, passcode: "alice-2026") } throws: {
            ($0 as? SecureStoreError)?.code == .wrongPasscode
        }
        #expect(
            try await SecureStore.open(at: url, passcode: "new-passcode-7").value(String.self, forKey: "key") == "kept")
    }

    @Test(arguments: [
        ("short7", "The passcode must have at least 8 characters."),
        ("longenough", "The passcode must contain a digit."),
    ])
    func passcodePolicyNamesTheBrokenRule(passcode: String, message: String) {
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect {
            try SecureStore.create(at: file("x.store"), passcode: passcode, policy: Self.policy, kdf: Self.fast)
        } throws: { ($0 as? SecureStoreError)?.message == message }
        var strict = PasscodePolicy()
        strict.requireSymbol = true
        #expect { try strict.check("abcdefg1") } throws: {
            ($0 as? SecureStoreError)?.message
                == "The passcode must contain a character that is neither a letter nor a digit."
        }
    }

    @Test func aStrayTemporaryFileFromACrashedWriteDoesNotHurt() async throws {
        let url = file("alice.store")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try SecureStore.create(at: url, passcode: "alice-2026", policy: Self.policy, kdf: Self.fast)
        try await store.set("before", forKey: "key")
        // What a write killed before its rename leaves behind: a half-written temporary file beside the store.
        try Data("half-written garbage".utf8).write(to: file(".alice.store.crash.tmp"))
        #expect(
            try await SecureStore.open(at: url, passcode: "alice-2026").value(String.self, forKey: "key") == "before")
    }

    @Test func defaultParametersAreOWASPs() {
        let recommended = KeyDerivation.recommended()
        #expect(recommended.cost == 1 << 17)
        #expect(recommended.blockSize == 8)
        #expect(recommended.parallelism == 1)
        #expect(recommended.salt != KeyDerivation.recommended().salt)
    }
}

/// Kills a process in the middle of secure-store writes: the store always opens, with the old or the new
/// content.
@Suite struct SecureStoreCrashTests {
    /// `baton-chaos store-writer`.
    static var writer: URL { builtExecutable("baton-chaos") }

    @Test func killingTheWriterLeavesOldOrNewContentNeverGarbage() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("crash-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent("user.securestore")
        var policy = PasscodePolicy()
        policy.minLength = 4
        _ = try SecureStore.create(at: url, passcode: "1234", policy: policy, kdf: KeyDerivation(cost: 1 << 10))
        var random = SystemRandomNumberGenerator()
        var lastSeen = 0
        // Kills that came before the writer's first write (a loaded machine starts it slowly) lengthen the next
        // wait, so every run ends up killing writes in flight.
        var quietKills = 0
        for _ in 0..<12 {
            let process = Process()
            process.executableURL = Self.writer
            process.arguments = ["store-writer"]
            let input = Pipe()
            let output = Pipe()
            process.standardInput = input
            process.standardOutput = output
            try process.runAlone()
            input.fileHandleForWriting.write(
                try JSONEncoder().encode(StoreWriterInput(storePath: url.path, passcode: "1234")))
            try input.fileHandleForWriting.close()
            // Let it write for a random while, then kill it without warning.
            try await Task.sleep(for: .milliseconds(Int.random(in: 30...150, using: &random) + 250 * quietKills))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            #expect(process.terminationReason == .uncaughtSignal)
            let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                .split(separator: "\n").compactMap { Int($0) }
            let confirmed = printed.last ?? lastSeen
            let store = try SecureStore.open(at: url, passcode: "1234")
            guard let payload = try await store.value([String].self, forKey: "payload") else {
                // Killed before its first write reached the file (a busy machine starts it slowly): nothing was
                // confirmed, and the store still opens.
                #expect(confirmed == 0 && lastSeen == 0, "a confirmed write is missing")
                quietKills += 1
                continue
            }
            let counter = try #require(Int(payload[0]))
            // The last confirmed write, or the one in flight when it was killed.
            #expect(counter == confirmed || counter == confirmed + 1, "counter \(counter), confirmed \(confirmed)")
            #expect(payload[1].count == 256 * 1024)
            lastSeen = counter
        }
        #expect(lastSeen > 0)
    }
}

/// Creating a file that must not be replaced: the first writer's content stays, whoever comes second, with hard
/// links and without them (the fallback for file systems that have none), and no temporary file is left.
@Suite struct AtomicFileTests {
    @Test func createKeepsTheFirstContentAndLeavesNoTemporaryFile() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-atomic-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for (name, create) in [
            ("linked", AtomicFile.create), ("exclusive", AtomicFile.createExclusively),
        ] as [(String, (Data, URL) throws(AtomicFileError) -> Bool)] {
            let file = directory.appendingPathComponent(name)
            #expect(try create(Data("first".utf8), file))
            #expect(try !create(Data("second".utf8), file))
            #expect(try Data(contentsOf: file) == Data("first".utf8))
            let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
            #expect((attributes[.posixPermissions] as? Int) == 0o600)
        }
        #expect(
            try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() == ["exclusive", "linked"])
        // A folder that does not exist is an error that names it, not a crash.
        let nowhere = directory.appendingPathComponent("missing/file")
        let error = #expect(throws: AtomicFileError.self) { try AtomicFile.create(Data(), at: nowhere) }
        #expect(error?.message.contains("missing") == true)
    }
}
