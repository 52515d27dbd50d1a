import AircraftChecks
import BatonClient
import BatonFlows
import BatonOData
import BatonSecureStore
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import PropertyBased
import Testing

@testable import BatonOffline

/// The generated types of the aircraft-checks model, round-tripped: random entities of every entity type (text
/// with quotes, markup, combining marks and emoji; decimals at their facets' limits; instants to the millisecond)
/// are created on a tablet, read back from its store, uploaded, and read back from the server — each time equal.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct TypedEntityTests {
    /// Draws values from a list of random numbers.
    struct Choices {
        var numbers: [Int]
        var index = 0
        init(_ numbers: [Int]) { self.numbers = numbers }

        mutating func next(_ range: ClosedRange<Int>) -> Int {
            defer { index += 1 }
            let number = numbers.isEmpty ? 0 : numbers[index % numbers.count]
            return range.lowerBound + abs(number) % (range.upperBound - range.lowerBound + 1)
        }

        static let alphabet: [String] = [
            "A", "z", "7", " ", "'", "\"", "<", ">", "&", "%", "/", "#", "+", "?", "é", "e\u{301}", "ß", "Ж", "😀",
            "\u{200D}", ";", "\\",
        ]

        mutating func text(atMost count: Int, atLeast minimum: Int = 0) -> String {
            let length = next(minimum...count)
            var text = ""
            while text.unicodeScalars.count < length {
                let piece = Self.alphabet[next(0...Self.alphabet.count - 1)]
                if text.unicodeScalars.count + piece.unicodeScalars.count > length { break }
                text += piece
            }
            return text
        }

        /// A decimal with at most `before` digits before the point and `scale` after it, signed.
        mutating func decimal(before: Int, scale: Int) -> Decimal {
            let whole = (0..<next(1...before)).map { _ in String(next(0...9)) }.joined()
            let fraction = (0..<next(0...scale)).map { _ in String(next(0...9)) }.joined()
            let text = (next(0...3) == 0 ? "-" : "") + whole + (fraction.isEmpty ? "" : "." + fraction)
            return Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) ?? 0
        }

        mutating func instant(wholeSeconds: Bool) -> Date {
            let seconds = Double(next(1_600_000_000...1_900_000_000))
            return Date(timeIntervalSince1970: seconds + (wholeSeconds ? 0 : Double(next(0...999)) / 1000))
        }
    }

    /// A multi-user tablet in `directory` for `server`, keeping the aircraft, whose first person is `user`.
    static func tablet(
        _ server: LiveServer, in directory: URL, signingIn user: (name: String, password: String), passcode: String,
        transport: any HTTPTransport = AsyncHTTPClientTransport()
    ) throws -> (OnboardingSessionManager, OfflineStore) {
        var configuration = FlowsConfiguration(mode: .multiUser)
        configuration.keyDerivation = { KeyDerivation(cost: 1 << 10) }
        let store = try OfflineStore(
            url: directory.appendingPathComponent("offline.sqlite"), model: try ServiceModel.aircraftChecks,
            deviceID: try DeviceStorage(directory: directory).deviceID(),
            definingQueries: [DefiningQuery(name: "aircraft", url: "Aircraft")])
        let sessions = try OnboardingSessionManager(
            serverURL: server.url, directory: directory, configuration: configuration,
            presenter: ScriptedPresenter([
                .credentials(user.name, user.password), .newPasscode(passcode, confirmation: passcode),
            ]), flowProvider: StandardFlowProvider(appSteps: [OfflineStoreStep(store: store)]), transport: transport)
        return (sessions, store)
    }

    @Test func everyEntityTypeRoundTripsThroughTheTabletAndTheServer() async throws {
        let server = try await LiveServer.start()
        try await server.addUser("sam", displayName: "Sam", role: .supervisor, password: "correct-horse-battery")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("baton-typed-\(UUID())")
        defer { try? FileManager.default.removeItem(at: directory) }
        let (sessions, store) = try Self.tablet(
            server, in: directory, signingIn: ("sam", "correct-horse-battery"), passcode: "sam-pass-12")
        let session = try await sessions.open()

        var created: [(aircraft: Aircraft, flight: Flight, check: PreflightCheck)] = []
        var round = 0
        await propertyCheck(count: 40, input: Gen.int(in: 0...9999).array(of: 60...60)) { numbers in
            var choices = Choices(numbers)
            round += 1
            let tail = "T\(round)-" + choices.text(atMost: 6 - String(round).count)
            let aircraft = Aircraft(
                tailNumber: tail, type: choices.text(atMost: 40), station: choices.text(atMost: 3),
                status: choices.text(atMost: 20))
            let flight = Flight(
                flightNumber: "F\(round)", tailNumber: tail,
                scheduledDeparture: choices.instant(wholeSeconds: true),
                gate: choices.next(0...2) == 0 ? nil : choices.text(atMost: 6))
            let check = PreflightCheck(
                id: UUID(), tailNumber: tail, flightNumber: choices.next(0...1) == 0 ? nil : flight.flightNumber,
                fuelKg: choices.decimal(before: 8, scale: 1), tyrePressureMainPsi: choices.decimal(before: 4, scale: 1),
                tyrePressureNosePsi: choices.decimal(before: 4, scale: 1),
                oilQuarts: choices.decimal(before: 2, scale: 2),
                remarks: choices.next(0...2) == 0 ? nil : choices.text(atMost: 500),
                status: choices.next(0...1) == 0 ? "final" : "draft")
            do {
                try await store.create(aircraft)
                try await store.create(flight)
                try await store.create(check)
                #expect(try await store.entity(Aircraft.self, id: aircraft.entityID)?.values == aircraft.values)
                #expect(try await store.entity(Flight.self, id: flight.entityID)?.values == flight.values)
                let stored = try await store.entity(PreflightCheck.self, id: check.entityID)
                #expect(stored?.values == check.values)
                #expect(stored?.checkedBy == "sam")
                created.append((aircraft, flight, check))
            } catch {
                Issue.record("round \(round): \(error)")
            }
        }
        #expect(created.count == 40)
        let report = try await sessions.sync()
        #expect(report.upload.uploaded.count == created.count * 3)
        #expect(report.isComplete)
        for (aircraft, flight, check) in created {
            let onServer = try await session.authorized.entity(Aircraft.self, id: aircraft.entityID)
            #expect(onServer?.values == aircraft.values, "\(aircraft.entityID)")
            #expect(try await session.authorized.entity(Flight.self, id: flight.entityID)?.values == flight.values)
            let serverCheck = try await session.authorized.entity(PreflightCheck.self, id: check.entityID)
            #expect(serverCheck?.values == check.values)
            #expect(serverCheck?.checkedBy == "sam" && serverCheck?.uploadedBy == "sam")
        }
        // The client's typed reads follow the server's pages and its filters.
        let all = try await session.authorized.entities(PreflightCheck.self, "$orderby=FuelKg")
        #expect(Set(all.map(\.id)) == Set(created.map(\.check.id)))
        #expect(all.map(\.fuelKg) == all.map(\.fuelKg).sorted())
        let drafts = try await session.authorized.entities(PreflightCheck.self, "$filter=Status eq 'draft'")
        #expect(Set(drafts.map(\.id)) == Set(created.filter { $0.check.status == "draft" }.map(\.check.id)))
        await sessions.close()
        await server.shutDown()
    }
}
