import ArgumentParser
import BatonClient
import BatonFlows
import BatonOData
import BatonOffline
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A check as the JSON output shows it.
struct CheckJSON: Encodable {
    let id: String
    let tailNumber: String
    let flightNumber: String?
    let fuelKg: String
    let tyrePressureMainPsi: String
    let tyrePressureNosePsi: String
    let oilQuarts: String
    let remarks: String?
    let status: String
    let checkedBy: String?
    let uploadedBy: String?
    let changedAt: String?
    let onDevice: Bool

    init(_ entity: LocalEntity) {
        func text(_ name: String) -> String? { entity.values[name]?.jsonText }
        id = entity.id
        tailNumber = text("TailNumber") ?? ""
        flightNumber = text("FlightNumber")
        fuelKg = text("FuelKg") ?? ""
        tyrePressureMainPsi = text("TyrePressureMainPsi") ?? ""
        tyrePressureNosePsi = text("TyrePressureNosePsi") ?? ""
        oilQuarts = text("OilQuarts") ?? ""
        remarks = text("Remarks")
        status = text("Status") ?? ""
        checkedBy = text("CheckedBy")
        uploadedBy = text("UploadedBy")
        changedAt = text("ChangedAt")
        onDevice = entity.pending
    }
}

struct AircraftCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "aircraft", abstract: "The aircraft on this device with their latest check.",
        subcommands: [List.self, SetStatus.self], defaultSubcommand: List.self)

    struct SetStatus: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-status", abstract: "Set an aircraft's status, as a supervisor (ready or maintenance).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The aircraft's tail number.") var tail: String
        @Argument(help: "ready or maintenance.") var status: String

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.setStatus(tail: tail, to: status)
                print(
                    "\(tail.uppercased()) is \(status.lowercased()) on this device; it is uploaded with the next sync.")
            }
        }
    }
}

extension AircraftCommand {
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list", abstract: "The aircraft on this device with their latest check.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Option(help: "Only this station (e.g. FRA).") var station: String?
        @Option(help: "Only this status (e.g. ready, maintenance).") var status: String?
        @Flag(help: "Print JSON.") var json = false

        struct Entry: Encodable {
            let tailNumber: String
            let type: String
            let station: String
            let status: String
            let latestCheck: CheckJSON?
        }

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, ui in
                let rows = try await device.aircraft(station: station, status: status)
                if json {
                    try printJSON(
                        rows.map {
                            Entry(
                                tailNumber: $0.tail, type: $0.aircraft.values["Type"]?.display ?? "",
                                station: $0.aircraft.values["Station"]?.display ?? "",
                                status: $0.aircraft.values["Status"]?.display ?? "",
                                latestCheck: $0.latest.map(CheckJSON.init))
                        })
                    return
                }
                print(InteractiveApp.aircraftHeader)
                for row in rows { print(InteractiveApp.line(row)) }
            }
        }
    }
}

/// New values for a check (`checks edit`, `archive resolve --edit`), validated by the form's rules.
struct CheckChanges: ParsableArguments {
    @Option(help: "Fuel in kg (0–400000).") var fuelKg: String?
    @Option(help: "Main tyre pressure in psi (30–350).") var mainPsi: String?
    @Option(help: "Nose tyre pressure in psi (30–350).") var nosePsi: String?
    @Option(help: "Oil in quarts (0–50).") var oilQuarts: String?
    @Option(help: "Remarks (up to 500 characters; empty clears them).") var remarks: String?

    func values() throws -> [String: PrimitiveValue] {
        var values: [String: PrimitiveValue] = [:]
        for (measurement, text) in zip(Measurement.all, [fuelKg, mainPsi, nosePsi, oilQuarts]) {
            guard let text else { continue }
            switch measurement.parse(text) {
            case .success(let value): values[measurement.property] = .decimal(value)
            case .failure(let problem): throw AppError(.invalidInput, problem.message)
            }
        }
        if let remarks {
            switch CheckForm.parseRemarks(remarks) {
            case .success(let text): values["Remarks"] = text.isEmpty ? .null : .string(text)
            case .failure(let problem): throw AppError(.invalidInput, problem.message)
            }
        }
        return values
    }
}

struct ChecksCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checks", abstract: "Pre-flight checks: record, list, edit, finalize or delete them.",
        subcommands: [Add.self, List.self, Edit.self, Finalize.self, Delete.self])

    struct Edit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Correct a check on this device: your own, or anyone's as a supervisor (uploaded with the next sync).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id (from `checks list --json`).") var id: String
        @OptionGroup var changes: CheckChanges

        func run() async throws {
            let values = try validated { try changes.values() }
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.edit(id, values: values)
                print("Changed \(id) on this device; it is uploaded with the next sync.")
            }
        }
    }

    struct Finalize: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Turn a draft check into a final one.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id.") var id: String

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.finalize(id)
                print("Finalized \(id) on this device; it is uploaded with the next sync.")
            }
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete one of your draft checks.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id.") var id: String

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.deleteDraft(id)
                print("Deleted \(id) on this device; the deletion is uploaded with the next sync.")
            }
        }
    }

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Record a pre-flight check on this device (uploaded with the next sync).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Option(help: "The aircraft's tail number.") var tail: String
        @Option(help: "The flight (optional; one of the aircraft's flights).") var flight: String?
        @Option(help: "Fuel in kg (0–400000).") var fuelKg: String
        @Option(help: "Main tyre pressure in psi (30–350).") var mainPsi: String
        @Option(help: "Nose tyre pressure in psi (30–350).") var nosePsi: String
        @Option(help: "Oil in quarts (0–50).") var oilQuarts: String
        @Option(help: "Remarks (up to 500 characters).") var remarks: String?
        @Option(help: "final or draft.") var status: String = "final"
        @Flag(help: "Print JSON.") var json = false

        func form() throws -> CheckForm {
            var form = CheckForm(tailNumber: tail, flightNumber: flight)
            for (measurement, text) in zip(Measurement.all, [fuelKg, mainPsi, nosePsi, oilQuarts]) {
                switch measurement.parse(text) {
                case .success(let value): form.measurements[measurement.property] = value
                case .failure(let problem): throw AppError(.invalidInput, problem.message)
                }
            }
            if let remarks {
                switch CheckForm.parseRemarks(remarks) {
                case .success(let text): form.remarks = text
                case .failure(let problem): throw AppError(.invalidInput, problem.message)
                }
            }
            switch CheckForm.parseStatus(status) {
            case .success(let text): form.status = text
            case .failure(let problem): throw AppError(.invalidInput, problem.message)
            }
            return form
        }

        func run() async throws {
            // Validate the values before asking for a passcode.
            let form = try validated { try self.form() }
            try await runScripted(device, signIn: signIn) { device, ui in
                let id = try await device.record(form)
                let saved = try await device.store.read(id)
                if json, let entity = saved.first {
                    try printJSON(CheckJSON(entity))
                } else {
                    print("Saved \(id) on this device; it is uploaded with the next sync.")
                }
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List checks, newest first (unsynced first).")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Option(help: "Only this aircraft.") var tail: String?
        @Option(help: "At most this many.") var top = 20
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, ui in
                if let tail { _ = try await device.aircraft(tail: tail) }
                let checks = try await device.checks(tail: tail, top: max(1, min(top, 1000)))
                if json {
                    try printJSON(checks.map(CheckJSON.init))
                } else {
                    for check in checks {
                        print(check.values["TailNumber"]?.display ?? "", InteractiveApp.describe(check))
                    }
                }
            }
        }
    }
}
