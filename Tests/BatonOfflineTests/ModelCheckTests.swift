import AircraftChecks
import BatonOData
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

@testable import BatonOffline

/// The tablet applies the model as the server does: the same checks, in the same words, before any SQL runs.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct ModelCheckTests {
    @Test(arguments: InvalidCheckBodies.cases) func offlineCreateRefusesWhatTheServerRefusesInItsWords(
        invalid: InvalidCheckBodies.Case
    ) async throws {
        let directory = try LocalStoreTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStoreTests.openStore(in: directory)
        let values = try InvalidCheckBodies.values(of: invalid, id: UUID())
        let error = await #expect(throws: OfflineError.self) {
            try await store.create(in: "PreflightChecks", values: values)
        }
        #expect(error?.code == .badRequest)
        #expect(error?.message == invalid.message)
        #expect(error?.target == invalid.target)
        #expect(try await store.count("PreflightChecks") == 0)
        #expect(try await store.pendingEntries().isEmpty)
    }

    @Test func aCreateWithoutStatusGetsTheModelsDefaultAsOnTheServer() async throws {
        let directory = try LocalStoreTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStoreTests.openStore(in: directory)
        var values = try InvalidCheckBodies.values(of: InvalidCheckBodies.cases[0], id: UUID())
        values["FuelKg"] = .decimal(5200)
        values["Status"] = nil
        let id = try await store.create(in: "PreflightChecks", values: values)
        #expect(try await store.read(id).first?.values["Status"] == .string("final"))
        // The body queued for the server leaves Status out; the server applies the same default.
        let queued = try #require(try await store.pendingEntries().first)
        #expect(try JSONValue(parsing: queued.body)["Status"] == nil)
    }

    @Test func anUpdateCannotChangeTheKeyNorBreakAFacet() async throws {
        let directory = try LocalStoreTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStoreTests.openStore(in: directory)
        let check = PreflightCheck(
            id: UUID(), tailNumber: "D-AIBL", fuelKg: 5200, tyrePressureMainPsi: 200, tyrePressureNosePsi: 60,
            oilQuarts: 12)
        let id = try await store.create(check)
        let key = await #expect(throws: OfflineError.self) {
            try await store.update(id, values: ["ID": .guid(UUID())])
        }
        #expect(key?.message == "Key property 'ID' cannot change; create a new entity instead.")
        let long = await #expect(throws: OfflineError.self) {
            try await store.update(id, values: ["Remarks": .string(String(repeating: "x", count: 501))])
        }
        #expect(long?.message == "Property 'Remarks' allows at most 500 characters, but the value has 501")
        #expect(long?.target == "Remarks")
        #expect(try await store.pendingEntries().count == 1)
        // A string key compares by Unicode scalar: the Kelvin sign is not a K, so it is a change of key.
        let aircraft = try await store.create(
            Aircraft(tailNumber: "K-1", type: "A320", station: "FRA", status: "ready"))
        let lookalike = await #expect(throws: OfflineError.self) {
            try await store.update(aircraft, values: ["TailNumber": .string("\u{212A}-1"), "Status": .string("x")])
        }
        #expect(lookalike?.target == "TailNumber")
        // Repeating the key as it is changes nothing but what else is given.
        try await store.update(aircraft, values: ["TailNumber": .string("K-1"), "Status": .string("maintenance")])
        #expect(try await store.entity(Aircraft.self, id: aircraft)?.status == "maintenance")
    }

    /// A literal percent-encoded with `ODataURL.queryValue` stays one literal whatever it holds: `&`, `#`, `%`, `+`,
    /// a quote, CR and LF, each with a combining mark beside it, neither end the option nor change the filter.
    @Test func aQueryValueKeepsEveryCharacterOfItsLiteral() async throws {
        let directory = try LocalStoreTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try await LocalStoreTests.openStore(in: directory)
        let awkward = "a&\u{301}b#\u{301}c%2\u{301}+'\u{301}\r\u{301}\n<\u{301}\"&$top=0"
        let plain = PreflightCheck(
            id: UUID(), tailNumber: "D-AIBL", fuelKg: 1, tyrePressureMainPsi: 2, tyrePressureNosePsi: 3, oilQuarts: 4)
        var marked = plain
        marked.id = UUID()
        marked.remarks = awkward
        try await store.create(plain)
        try await store.create(marked)
        let literal = ODataURL.queryValue(PrimitiveValue.string(awkward).urlLiteral)
        let found = try await store.read(PreflightCheck.self, "$filter=Remarks eq \(literal)")
        #expect(found.map(\.id) == [marked.id])
        #expect(found.first?.remarks.map { Array($0.unicodeScalars) } == Array(awkward.unicodeScalars))
        #expect(!literal.unicodeScalars.contains { "&#+\r\n\"<".unicodeScalars.contains($0) })
    }
}
