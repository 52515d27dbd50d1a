import BatonClient
import BatonFlows
import BatonOData
import BatonSecureStore
import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Logging
import Testing

/// The device's sealed, rotating files (its log, its usage events) and what reaches the server from them.
@Suite struct SealedRecordFileTests {
    func temporaryFile() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent("baton-sealed-\(UUID())")
            .appendingPathComponent("log")
    }

    @Test func recordsAreSealedAndReadBackInOrder() throws {
        let url = temporaryFile()
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let file = SealedRecordFile(url: url, key: SymmetricKey(size: .bits256), purpose: "test")
        for index in 0..<20 { try file.append(Data("line \(index) fuel-sample-clear".utf8)) }
        #expect(
            try file.records().map { String(decoding: $0, as: UTF8.self) }
                == (0..<20).map { "line \($0) fuel-sample-clear" })
        let raw = try Data(contentsOf: url)
        #expect(raw.range(of: Data("fuel-sample-clear".utf8)) == nil, "a record is readable on disk")
        let mode = try FileManager.default.attributesOfItem(atPath: url.path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // Another key (another device, or a copy with the key lost) reads nothing.
        let other = SealedRecordFile(url: url, key: SymmetricKey(size: .bits256), purpose: "test")
        #expect(throws: FlowsError.self) { try other.records() }
        // So does the same key for another purpose: a usage record is not a log line.
        file.removeAll()
        #expect(try file.records().isEmpty)
    }

    @Test func rotationBoundsTheFilesAndKeepsTheNewest() throws {
        let url = temporaryFile()
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let file = SealedRecordFile(url: url, key: SymmetricKey(size: .bits256), purpose: "test", maxBytes: 4_096)
        for index in 0..<2_000 { try file.append(Data(String(format: "line %05d", index).utf8)) }
        let current = try Data(contentsOf: url).count
        let previous = try Data(contentsOf: URL(fileURLWithPath: url.path + ".1")).count
        #expect(current <= 4_096 && previous <= 4_096)
        let lines = try file.records().map { String(decoding: $0, as: UTF8.self) }
        // The newest survive, in order, without a gap; the oldest went.
        #expect(lines.last == "line 01999")
        #expect(lines.count > 100 && lines.count < 2_000)
        let numbers = lines.compactMap { Int($0.dropFirst(5)) }
        #expect(numbers == Array((2_000 - numbers.count)..<2_000))
    }

    @Test func twoProcessesShareTheFileWithoutLosingRecords() async throws {
        let url = temporaryFile()
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let key = SymmetricKey(size: .bits256)
        // The app and a scripted command: two handles on one file.
        let app = SealedRecordFile(url: url, key: key, purpose: "test")
        let script = SealedRecordFile(url: url, key: key, purpose: "test")
        try app.append(Data("x".utf8))
        try script.append(Data("y".utf8))
        #expect(try app.records() == [Data("x".utf8), Data("y".utf8)])
        script.removeAll()
        try app.append(Data("z".utf8))
        #expect(try script.records() == [Data("z".utf8)])

        // A failed send keeps what it took (first next time); what came meanwhile stays too.
        await #expect(throws: FlowsError.self) {
            try await app.drain { taken throws(FlowsError) in
                #expect(taken == [Data("z".utf8)])
                try script.append(Data("during".utf8))
                throw FlowsError(.offline, "no network")
            }
        }
        var sent: [Data] = []
        try await script.drain { taken throws(FlowsError) in sent = taken }
        #expect(sent == [Data("z".utf8)])
        #expect(try app.records() == [Data("during".utf8)])
    }

    @Test func aDamagedRecordIsSkippedAndTheRestRead() throws {
        let url = temporaryFile()
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let file = SealedRecordFile(url: url, key: SymmetricKey(size: .bits256), purpose: "test")
        for word in ["one", "two", "three"] { try file.append(Data(word.utf8)) }
        var data = try Data(contentsOf: url)
        data[data.startIndex + 10] ^= 0xFF  // inside the first record's sealed box
        try data.write(to: url)
        let read = try file.read()
        #expect(read.records == [Data("two".utf8), Data("three".utf8)] && read.damaged == 1)
    }

    @Test func aTornLastRecordIsSkippedAndWrittenOver() throws {
        let url = temporaryFile()
        defer { try? FileManager.default.removeItem(at: url.deletingLastPathComponent()) }
        let key = SymmetricKey(size: .bits256)
        try SealedRecordFile(url: url, key: key, purpose: "test").append(Data("first".utf8))
        // A crash in the middle of the second append: half a record at the end.
        let handle = try FileHandle(forWritingTo: url)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([0, 0, 0, 60, 1, 2, 3]))
        try handle.close()
        let reopened = SealedRecordFile(url: url, key: key, purpose: "test")
        #expect(try reopened.records() == [Data("first".utf8)])
        try reopened.append(Data("second".utf8))
        #expect(try reopened.records() == [Data("first".utf8), Data("second".utf8)])
    }
}

/// Usage events and the device's log, from a real device session to a live server.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DeviceTelemetryTests {
    static let forms = [
        ConsentForm(kind: .data, title: "Data consent", text: "Your checks are stored and sent with your name."),
        ConsentForm(kind: .usage, title: "Usage data", text: "Counts of use, no values."),
    ]

    @Test func usageEventsAndLogsReachTheServerOnceAndBadOnesAreRefused() async throws {
        try await withServer { server in
            let device = try Device.make(
                server: server, flowProvider: StandardFlowProvider(consentForms: Self.forms),
                [.credentials("alice", Passwords.alice), .consent(true), .consent(true)]
                    + [.newPasscode("12345678", confirmation: "12345678")])
            let session = try await device.manager.open()
            let storage = try DeviceStorage(directory: device.directory)
            #expect(UsageRecorder.allowed(consent: await device.manager.consent, settings: session.settings))
            let usage = try UsageRecorder(storage: storage)
            let start = UsageEvent(at: Date(), name: .appStart)
            try usage.record(start)
            try usage.record(UsageEvent(at: Date(), name: .sync, count: 12, durationMs: 340))
            try usage.record(UsageEvent(at: Date(), name: .error, code: "PreconditionFailed"))
            #expect(try await usage.send(session: session) == 3)
            #expect(try usage.pending().isEmpty)
            // A retried upload (the answer was lost) adds nothing.
            let deviceKey = try P256.Signing.PrivateKey(rawRepresentation: try #require(session.info[.deviceKey]))
            #expect(
                try await session.authorized.sendUsage(
                    deviceID: session.deviceID, events: [start], deviceKey: deviceKey)
                    == 0)
            let kept = try await server.server.devices.usage(device: session.deviceID)
            #expect(kept.map(\.name).sorted() == ["app-start", "error", "sync"])
            let sync = try #require(kept.first { $0.name == "sync" })
            #expect(sync.count == 12 && sync.durationMs == 340 && sync.code == nil)
            #expect(kept.first { $0.name == "error" }?.code == "PreconditionFailed")

            // The log: swift-log lines, sealed on the device, sent and forgotten.
            let log = try DeviceLog(storage: storage)
            let logger = Logger(label: "baton.test") { log.handler(label: $0) }
            logger.info("sync done", metadata: ["uploaded": "3"])
            logger.warning("sync failed", metadata: ["code": "Offline"])
            #expect(try await log.send(reason: "support", session: session) == 2)
            #expect(try log.lines().isEmpty)
            let uploads = try await server.server.devices.logs(device: session.deviceID)
            #expect(uploads.count == 1 && uploads[0].uploader == "alice" && uploads[0].reason == "support")
            #expect(uploads[0].lines.count == 2)
            #expect(uploads[0].lines[0].hasSuffix("info baton.test: sync done uploaded=3"), "\(uploads[0].lines)")

            // A log larger than one request goes in parts, every line once.
            for index in 0..<3_000 { logger.info("step \(index) of a long shift", metadata: ["n": "\(index)"]) }
            #expect(try await log.send(reason: "support", session: session) == 3_000)
            let parts = try await server.server.devices.logs(device: session.deviceID).dropLast()
            #expect(parts.count > 1 && parts.map(\.lineCount).reduce(0, +) == 3_000)

            // An admin's order shows in the device's status and is settled only by the log it asked for.
            try await server.server.devices.requestLogs(device: session.deviceID)
            logger.info("not what was asked for")
            try await log.send(reason: "support", session: session)
            #expect(try await server.server.devices.logsRequested(device: session.deviceID))
            let configuration = try #require(session.info[.serverConfiguration])
            let token = try await session.authorized.accessToken()
            #expect(
                try await device.manager.client.deviceStatus(
                    configuration, deviceID: session.deviceID, as: .token(token)
                ).logsRequested)
            #expect(try await device.manager.contactServer().logsRequested)
            logger.info("after the order")
            try await log.send(reason: "requested", session: session)
            #expect(try await !server.server.devices.logsRequested(device: session.deviceID))

            // Bad bodies are refused with the reason, and nothing is kept.
            // With the device's proof as well as the token (a token alone is refused: tested in the server's
            // tests), dated a little ahead so that it never meets the app's own proofs.
            var proofTime = Int64(Date().timeIntervalSince1970 * 1000) + 5_000
            func post(_ path: String, _ body: String) async throws -> (Int, String) {
                proofTime += 1
                let message = DeviceRequestProof.message(
                    method: "POST", path: "/devices/\(session.deviceID)/\(path)", device: session.deviceID,
                    time: proofTime, bodySHA256: SHA256.hash(data: Array(body.utf8)).lowercaseHex)
                let proof = DeviceRequestProof.header(
                    time: proofTime, signature: Array(try deviceKey.signature(for: message).rawRepresentation))
                let response = try await session.authorized.send(
                    ClientRequest(
                        method: "POST",
                        url: try #require(
                            URL(string: "\(server.url.absoluteString)/devices/\(session.deviceID)/\(path)")),
                        headers: [("Content-Type", "application/json"), ("Baton-Device-Proof", proof)],
                        body: Array(body.utf8)))
                return (response.status, String(decoding: response.body, as: UTF8.self))
            }
            let id = UUID().uuidString
            for (body, reason) in [
                (#"{"events": [{"id": "\#(id)", "at": "2026-11-24T07:00:00Z", "name": "keystrokes"}]}"#, "name"),
                (#"{"events": [{"id": "not-a-uuid", "at": "2026-11-24T07:00:00Z", "name": "sync"}]}"#, "UUID"),
                (#"{"events": [{"id": "\#(id)", "at": "yesterday", "name": "sync"}]}"#, "time"),
                (
                    #"{"events": [{"id": "\#(id)", "at": "2026-11-24T07:00:00Z", "name": "error", "code": "alice typed 5200"}]}"#,
                    "code"
                ),
                (
                    #"{"events": [{"id": "\#(id)", "at": "2026-11-24T07:00:00Z", "name": "sync", "count": -1}]}"#,
                    "count"
                ),
                (#"{"events": "all"}"#, "events"),
            ] {
                let (status, text) = try await post("usage", body)
                #expect(status == 400 && text.contains(reason), "\(body): \(status) \(text)")
            }
            let many = (0...500).map { _ in
                #"{"id": "\#(UUID().uuidString)", "at": "2026-11-24T07:00:00Z", "name": "sync"}"#
            }
            let tooMany = try await post("usage", #"{"events": [\#(many.joined(separator: ","))]}"#)
            #expect(tooMany.0 == 400 && tooMany.1.contains("at most 500"), "\(tooMany)")
            for body in [
                #"{"reason": "curiosity", "lines": ["x"]}"#, #"{"reason": "support", "lines": ["one\ntwo"]}"#,
                #"{"reason": "support", "lines": []}"#, #"{"reason": "support", "lines": ["\u001b]0;owned\u0007"]}"#,
                #"{"reason": "support", "lines": ["fake\r## header"]}"#,
                #"{"reason": "support", "lines": [12]}"#,
                #"{"reason": "support", "lines": ["\#(String(repeating: "x", count: 2_001))"]}"#,
            ] {
                #expect(try await post("logs", body).0 == 400, "\(body.prefix(60))")
            }
            #expect(try await server.server.devices.usage(device: session.deviceID).count == 3)
            #expect(try await server.server.devices.logs(device: session.deviceID).count == parts.count + 3)
            // Kept per device: the newest uploads; the oldest go.
            for index in 0..<DeviceRegistry.keptLogUploads {
                logger.info("filler \(index)")
                try await log.send(reason: "support", session: session)
            }
            let newest = try await server.server.devices.logs(device: session.deviceID)
            #expect(newest.count == DeviceRegistry.keptLogUploads)
            #expect(newest.last?.lines.first?.hasSuffix("filler 0") == true, "\(newest.last?.lines ?? [])")
            // Another device's id: she is not registered there, and nothing is kept for it.
            let elsewhere = try await session.authorized.send(
                ClientRequest(
                    method: "POST",
                    url: try #require(URL(string: "\(server.url.absoluteString)/devices/device-elsewhere/usage")),
                    headers: [("Content-Type", "application/json")],
                    body: Array(
                        #"{"events": [{"id": "\#(UUID().uuidString)", "at": "2026-11-24T07:00:00Z", "name": "sync"}]}"#
                            .utf8)))
            #expect(elsewhere.status == 404, "HTTP \(elsewhere.status)")
            #expect(try await server.server.devices.usage(device: "device-elsewhere").isEmpty)

            // The server stops collecting usage: uploads are refused.
            _ = try await server.server.settings.set("telemetry.usage", to: "false")
            let refused = await #expect(throws: BatonClientError.self) {
                try await session.authorized.sendUsage(
                    deviceID: session.deviceID, events: [UsageEvent(at: Date(), name: .sync)], deviceKey: deviceKey)
            }
            #expect(refused?.message.contains("telemetry.usage") == true, "\(String(describing: refused))")
        }
    }

    @Test func withoutUsageConsentNothingIsRecorded() async throws {
        try await withServer { server in
            let device = try Device.make(
                server: server, flowProvider: StandardFlowProvider(consentForms: Self.forms),
                [.credentials("bob", Passwords.bob), .consent(true), .consent(false)]
                    + [.newPasscode("12345678", confirmation: "12345678")])
            let session = try await device.manager.open()
            #expect(!UsageRecorder.allowed(consent: await device.manager.consent, settings: session.settings))
            try await device.manager.changeConsent(.usage, to: true)
            #expect(UsageRecorder.allowed(consent: await device.manager.consent, settings: session.settings))
            var off = session.settings
            off.telemetry.usage = false
            #expect(!UsageRecorder.allowed(consent: await device.manager.consent, settings: off))
        }
    }
}
