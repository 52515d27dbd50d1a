// Examples/QuickStart/Shift.swift
import AircraftChecks
import BatonFlows
import BatonOData
import BatonOffline
import Foundation

extension Tablet {
    /// Opens the tablet: the first user onboards (sign-in, passcode, first download); after that, the people on
    /// the tablet pick themselves and unlock with their passcode — no network needed.
    public func signIn() async throws -> OnboardingSession {
        try await sessions.open()
    }

    /// Records a pre-flight check on the tablet, signed by whoever is signed in. No network needed: it waits in
    /// the queue until a sync, whoever runs it.
    public func recordCheck(tail: String, fuelKg: Decimal) async throws -> PreflightCheck {
        let check = PreflightCheck(
            id: UUID(), tailNumber: tail, fuelKg: fuelKg, tyrePressureMainPsi: 200, tyrePressureNosePsi: 60,
            oilQuarts: 15)  // Status: the model's default, "final"
        try await store.create(check)
        return check
    }

    /// The checks of one aircraft on the tablet, newest first: the tablet's own unsynced ones included.
    public func checks(of tail: String) async throws -> [PreflightCheck] {
        // The tail as an OData literal ('D-AIBL', a quote doubled), percent-encoded so no character ends the option.
        let tail = ODataURL.queryValue(PrimitiveValue.string(tail).urlLiteral)
        return try await store.read(PreflightCheck.self, "$filter=TailNumber eq \(tail)&$orderby=ChangedAt desc")
    }

    /// Shift change: the tablet locks, and someone new joins it (a person already on it would
    /// `switchUser()` instead, with no network).
    public func handOverToNewcomer() async throws -> OnboardingSession {
        try await sessions.addUser()
    }

    /// Uploads the tablet's queue — other people's changes on their behalf, when the server allows it — then
    /// downloads what changed.
    public func sync() async throws -> SyncReport {
        let report = try await sessions.sync()
        print(report.summary)  // "uploaded 1 change: 1 alice's on their behalf; downloaded 2 updates"
        for refused in report.archived {
            print("\(refused.entry.author)'s change was refused: \(refused.message)")
        }
        return report
    }
}
