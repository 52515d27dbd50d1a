import BatonOData
import BatonSQL
import Foundation

/// Fills the aircraft-checks model with realistic demo or benchmark data: stations, tail numbers, flights,
/// plausible fuel, tyre-pressure and oil values. Deterministic for a given seed.
struct Seeder {
    let store: DataStore
    let clock: ServerClock

    static let stations = ["FRA", "MUC", "HAM", "BER", "DUS", "CGN", "STR", "VIE", "ZRH", "LHR"]
    static let types: [(name: String, fuel: ClosedRange<Int>, main: ClosedRange<Int>, nose: ClosedRange<Int>)] = [
        ("A320", 4_000...18_000, 190...205, 55...62), ("A320neo", 4_000...19_000, 190...205, 55...62),
        ("A321", 5_000...23_000, 195...210, 56...64), ("B737-800", 4_000...20_000, 195...205, 50...60),
        ("A350-900", 20_000...110_000, 215...235, 60...70), ("B787-9", 20_000...100_000, 210...230, 60...70),
    ]

    /// Adds `aircraft` aircraft with one flight each, and `checks` pre-flight checks spread over them.
    ///
    /// - Throws: ``ServerSetupError`` when the model is not the aircraft-checks model.
    func seed(aircraft: Int, checks: Int, seed: UInt64 = 1) async throws -> (aircraft: Int, flights: Int, checks: Int) {
        guard model.entitySet(named: "Aircraft") != nil, model.entitySet(named: "Flights") != nil,
            model.entitySet(named: "PreflightChecks") != nil
        else { throw ServerSetupError("seed fills the aircraft-checks model only; this server serves another model.") }
        var random = SplitMix64(seed: seed)
        let translator = SQLTranslator(model: model, dialect: store.storage.dialect)
        let now = clock.now()
        let changedAt = PrimitiveValue.dateTimeOffset(ODataDateTimeOffset(now))
        var planes: [(tail: String, type: Int)] = []
        var used: Set<String> = []
        while planes.count < aircraft {
            let letters = (0..<4).map { _ in String(UnicodeScalar(UInt8.random(in: 65...90, using: &random))) }.joined()
            let tail = "D-" + letters
            guard used.insert(tail).inserted else { continue }
            planes.append((tail, Int.random(in: 0..<Self.types.count, using: &random)))
        }
        let chosen = planes
        let start = random
        try await store.write { db in
            var random = start
            let planes = chosen
            for (index, plane) in planes.enumerated() {
                let station = Self.stations[Int.random(in: 0..<Self.stations.count, using: &random)]
                let insert = try translator.insert(
                    into: "Aircraft",
                    values: [
                        "TailNumber": .string(plane.tail), "Type": .string(Self.types[plane.type].name),
                        "Station": .string(station),
                        "Status": .string(index % 17 == 0 ? "maintenance" : "ready"), "ChangedAt": changedAt,
                    ], systemValues: DataStore.created(at: try await DataStore.nextSequence(db), on: nil))
                try await db.execute(insert.sql, insert.arguments)
                let departure = ODataDateTimeOffset(
                    now.addingTimeInterval(Double(Int.random(in: 1...48, using: &random)) * 1800).roundedToMinute)
                let flight = try translator.insert(
                    into: "Flights",
                    values: [
                        "FlightNumber": .string("LH\(1000 + index)"), "TailNumber": .string(plane.tail),
                        "ScheduledDeparture": .dateTimeOffset(departure),
                        "Gate": .string("\(["A", "B", "C", "G", "H"][index % 5])\(index % 60 + 1)"),
                        "ChangedAt": changedAt,
                    ], systemValues: DataStore.created(at: try await DataStore.nextSequence(db), on: nil))
                try await db.execute(flight.sql, flight.arguments)
            }
            guard !planes.isEmpty else { return }
            for n in 0..<checks {
                let planeIndex = Int.random(in: 0..<planes.count, using: &random)
                let plane = planes[planeIndex]
                let type = Self.types[plane.type]
                var bytes = [UInt8](repeating: 0, count: 16)
                for i in 0..<16 { bytes[i] = UInt8.random(in: 0...255, using: &random) }
                bytes[6] = (bytes[6] & 0x0F) | 0x40
                bytes[8] = (bytes[8] & 0x3F) | 0x80
                let id = UUID(
                    uuid: (
                        bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8],
                        bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
                    ))
                func decimal(_ range: ClosedRange<Int>, scale: Int) -> PrimitiveValue {
                    let whole = Int.random(in: range, using: &random)
                    let fraction = Int.random(in: 0..<(scale == 1 ? 10 : 100), using: &random)
                    return .decimal(
                        Decimal(string: "\(whole).\(scale == 1 ? String(fraction) : String(format: "%02d", fraction))")
                            ?? Decimal(whole))
                }
                let remarks = [
                    "", "", "", "Left main tyre worn", "Oil topped up", "Nose tyre pressure rechecked",
                    "Fuel sample clear",
                ]
                let remark = remarks[Int.random(in: 0..<remarks.count, using: &random)]
                let insert = try translator.insert(
                    into: "PreflightChecks",
                    values: [
                        "ID": .guid(id), "TailNumber": .string(plane.tail),
                        "FlightNumber": .string("LH\(1000 + planeIndex)"),
                        "FuelKg": decimal(type.fuel, scale: 1), "TyrePressureMainPsi": decimal(type.main, scale: 1),
                        "TyrePressureNosePsi": decimal(type.nose, scale: 1), "OilQuarts": decimal(10...19, scale: 2),
                        "Remarks": remark.isEmpty ? .null : .string(remark),
                        "Status": .string(n % 9 == 0 ? "draft" : "final"),
                        "CheckedBy": .string("seed"), "UploadedBy": .string("seed"), "ChangedAt": changedAt,
                    ], systemValues: DataStore.created(at: try await DataStore.nextSequence(db), on: nil))
                try await db.execute(insert.sql, insert.arguments)
            }
        }
        if case .postgres(let postgres) = store.storage {
            try await postgres.analyze(["Aircraft", "Flights", "PreflightChecks"].map(SQLDialect.postgres.quote))
        }
        return (planes.count, planes.count, planes.isEmpty ? 0 : checks)
    }

    var model: ServiceModel { store.model }
}

extension Date {
    var roundedToMinute: Date { Date(timeIntervalSince1970: (timeIntervalSince1970 / 60).rounded(.down) * 60) }
}

extension BatonServer {
    /// Adds demo or benchmark data to the aircraft-checks model: `aircraft` aircraft (one flight each) and
    /// `checks` pre-flight checks. Deterministic for a given `seed`.
    ///
    /// - Returns: how many aircraft, flights and checks were added.
    /// - Throws: ``ServerSetupError`` for another model; database errors (for example, a tail number that
    ///   already exists when seeding twice with the same seed).
    public func seed(aircraft: Int, checks: Int, seed: UInt64 = 1) async throws -> (
        aircraft: Int, flights: Int, checks: Int
    ) {
        try await Seeder(store: data.store, clock: configuration.clock).seed(
            aircraft: aircraft, checks: checks, seed: seed)
    }
}
