import AircraftChecks
import BatonFlows
import BatonOData
import BatonOffline
import Dispatch
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension InteractiveApp {
    // MARK: Aircraft

    func aircraftList() async throws {
        var station: String?
        var status: String?
        var page = 0
        while true {
            let rows = try await device.aircraft(station: station, status: status)
            let pageSize = 14
            let pages = max(1, (rows.count + pageSize - 1) / pageSize)
            page = min(page, pages - 1)
            ui.newScreen()
            var title = "Aircraft"
            if let station { title += " at \(station.uppercased())" }
            if let status { title += " (\(status))" }
            ui.heading("\(title) — \(rows.count), page \(page + 1) of \(pages)")
            ui.say(Self.aircraftHeader)
            for row in rows.dropFirst(page * pageSize).prefix(pageSize) {
                ui.say(Self.line(row), row.latest?.pending == true ? .warning : .plain)
            }
            ui.dim("TAIL opens it · s STATION, t STATUS filters (alone: all) · n/p page · Enter back")
            guard let answer = await ui.ask("Aircraft:"), !answer.isEmpty else { return }
            let words = answer.split(separator: " ", maxSplits: 1).map(String.init)
            switch words[0].lowercased() {
            case "s": station = words.count > 1 ? words[1] : nil
            case "t": status = words.count > 1 ? words[1] : nil
            case "n": page += 1
            case "p": page = max(0, page - 1)
            default:
                do { try await aircraftDetail(tail: answer) } catch let error as AppError
                    where error.status == .notFound
                {
                    ui.failure(error.message)
                    _ = await ui.ask("Press Enter.")
                }
            }
        }
    }

    static let aircraftHeader = row("TAIL", "TYPE", "STN", "STATUS", "FUEL kg", "BY", "WHEN")

    /// One aircraft with its latest check, in the columns of ``aircraftHeader``.
    static func line(_ row: Device.AircraftRow) -> String {
        let aircraft = row.aircraft.values
        let check = row.latest?.values
        let when = check?["ChangedAt"].map { $0 == .null ? "on device" : $0.display } ?? "—"
        return Self.row(
            row.tail, aircraft["Type"]?.display ?? "", aircraft["Station"]?.display ?? "",
            aircraft["Status"]?.display ?? "", check?["FuelKg"]?.display ?? "—", check?["CheckedBy"]?.display ?? "",
            row.latest?.pending == true ? "• on device" : when)
    }

    static func row(_ columns: String...) -> String {
        let widths = [8, 16, 4, 12, 9, 10, 18]
        return zip(columns, widths).map { text, width in
            let clipped = text.count > width - 1 ? String(text.prefix(width - 2)) + "…" : text
            return clipped.padding(toLength: width, withPad: " ", startingAt: 0)
        }.joined().trimmingCharacters(in: .whitespaces)
    }

    func aircraftDetail(tail: String) async throws {
        while true {
            let aircraft = try await device.aircraft(tail: tail)
            let tail = aircraft.tailNumber
            ui.newScreen()
            ui.heading("\(tail) · \(aircraft.type) · \(aircraft.station) · \(aircraft.status)")
            ui.say("Flights:")
            for flight in try await device.flights(tail: tail).prefix(4) {
                let departure = PrimitiveValue.shortTime(ODataDateTimeOffset(flight.scheduledDeparture))
                ui.say("  \(flight.flightNumber)  departs \(departure)  gate \(flight.gate ?? "—")")
            }
            ui.say("Checks (newest first):")
            let checks = try await device.checks(tail: tail, top: 9).prefix(9)
            for (index, check) in checks.enumerated() {
                ui.say("\(index + 1)" + Self.describe(check), check.pending ? .warning : .plain)
            }
            let supervisor = ["supervisor", "admin"].contains(try await device.session().user.role ?? "")
            ui.dim(
                "r records a check · a number opens that check"
                    + (supervisor ? " · s ready|maintenance sets the status" : "") + " · Enter back")
            guard let answer = await ui.ask("\(tail):"), !answer.isEmpty else { return }
            let words = answer.split(separator: " ").map(String.init)
            do {
                switch words[0].lowercased() {
                case "r": try await recordCheck(tail: tail)
                case "s" where words.count == 2:
                    try await device.setStatus(tail: tail, to: words[1])
                    ui.notice("✓ \(tail) is \(words[1].lowercased()) on this device; it is sent with the next sync.")
                case let word where Int(word).map { checks.indices.contains($0 - 1) } == true:
                    try await checkDetail(checks[(Int(word) ?? 1) - 1].id)
                default:
                    ui.failure("'\(Self.clip(answer, 30))' is not one of the choices.")
                    _ = await ui.ask("Press Enter.")
                }
            } catch let error as AppError
                where error.status == .notPermitted || error.status == .invalidInput || error.status == .notFound
            {
                ui.failure(error.message)
                _ = await ui.ask("Press Enter.")
            }
        }
    }

    /// "5200 kg · 200.5/60 psi · 15 qt · final · alice · 2026-11-21 14:05Z" (or "• on device").
    static func describe(_ check: LocalEntity) -> String {
        let v = check.values
        var text = "  \(v["FuelKg"]?.display ?? "?") kg · \(v["TyrePressureMainPsi"]?.display ?? "?")/"
        text += "\(v["TyrePressureNosePsi"]?.display ?? "?") psi · \(v["OilQuarts"]?.display ?? "?") qt"
        text += " · \(v["Status"]?.display ?? "") · \(v["CheckedBy"]?.display ?? "")"
        text += check.pending ? " · • on device" : " · \(v["ChangedAt"]?.display ?? "")"
        return text
    }

    // MARK: Recording a check

    func recordCheck(tail: String?) async throws {
        ui.newScreen()
        ui.heading("Record a pre-flight check")
        ui.dim("Enter on its own goes back; nothing is saved until you confirm.")
        var form = CheckForm()
        if let tail {
            form.tailNumber = tail
        } else {
            let device = device
            var chosen: String?
            while chosen == nil {
                guard let answer = await ui.ask("Aircraft tail number:"), !answer.isEmpty else { return }
                do { chosen = try await device.aircraft(tail: answer).tailNumber } catch {
                    ui.failure(AppError.from(error).message)
                }
            }
            form.tailNumber = chosen ?? ""
        }
        let flights = try await device.flights(tail: form.tailNumber).map(\.flightNumber)
        if !flights.isEmpty {
            ui.dim("Flights of \(form.tailNumber): \(flights.joined(separator: ", "))")
            guard
                let flight = await ui.ask(
                    "Flight (Enter for none):", optional: true,
                    { text in
                        flights.contains(text.uppercased())
                            ? .success(text.uppercased())
                            : .failure(
                                InputProblem("Flight: '\(text)' is not one of \(flights.joined(separator: ", ")).")
                            )
                    })
            else { return }
            form.flightNumber = flight
        }
        for measurement in Measurement.all {
            guard let value = await ui.ask(measurement.prompt, measurement.parse), let value else { return }
            form.measurements[measurement.property] = value
        }
        guard let remarks = await ui.ask("Remarks (Enter for none):", optional: true, CheckForm.parseRemarks) else {
            return
        }
        form.remarks = remarks
        guard let status = await ui.ask("Status (final/draft, Enter for final):", optional: true, CheckForm.parseStatus)
        else { return }
        form.status = status ?? "final"
        let summary = Measurement.all.map { "\($0.short) \(form.measurements[$0.property] ?? 0) \($0.unit)" }
        ui.say("\(form.tailNumber)\(form.flightNumber.map { " / \($0)" } ?? ""): " + summary.joined(separator: " · "))
        guard await confirm("Save this check?") else {
            ui.notice("! Not saved.", .warning)
            return
        }
        _ = try await device.record(form)
        ui.notice("✓ \(form.tailNumber) check saved on this device; it is sent with the next sync.")
    }
}
