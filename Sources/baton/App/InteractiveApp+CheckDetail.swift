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
    // MARK: Changing a check

    /// One check with what the signed-in user may do to it: edit, finalize a draft, delete their own draft.
    func checkDetail(_ id: String) async throws {
        while true {
            let check = try await device.check(id)
            let v = check.values
            ui.newScreen()
            ui.heading(
                "Check of \(v["TailNumber"]?.display ?? "?")\(v["FlightNumber"].map { $0 == .null ? "" : " / " + $0.display } ?? "") · \(v["Status"]?.display ?? "")"
            )
            for measurement in Measurement.all {
                ui.say(
                    "  \(measurement.label.padding(toLength: 20, withPad: " ", startingAt: 0))\(v[measurement.property]?.display ?? "—") \(measurement.unit)"
                )
            }
            ui.say("  Remarks             \(Self.clip(v["Remarks"]?.display ?? "—", 56))")
            ui.say("  Checked by          \(v["CheckedBy"]?.display ?? "—")")
            ui.say("  Uploaded by         \(v["UploadedBy"]?.display ?? "—")")
            ui.say(
                "  Changed             \(check.pending ? "• on this device, not sent yet" : v["ChangedAt"]?.display ?? "—")"
            )
            let photos = (try? await device.photos(check: id)) ?? []
            for photo in photos {
                let p = photo.values
                ui.say(
                    "  Photo               \(Self.clip(p["Caption"]?.display ?? "(no caption)", 32)) · \(p["TakenBy"]?.display ?? "?")\(photo.pending ? " · not sent yet" : "")"
                )
            }
            let draft = v["Status"]?.display == "draft"
            ui.dim("e edits · p attaches a photo\(draft ? " · f finalizes · d deletes the draft" : "") · Enter back")
            guard let answer = await ui.ask("Check:")?.lowercased(), !answer.isEmpty else { return }
            do {
                switch answer {
                case "e":
                    try await device.requireMayChange(check)
                    guard let values = await askChanges(of: check) else { return }
                    guard !values.isEmpty else {
                        ui.notice("! Nothing changed.", .warning)
                        continue
                    }
                    try await device.edit(id, values: values)
                    ui.notice("✓ Changed on this device; it is sent with the next sync.")
                case "p":
                    // Evidence is added to a check by whoever may change it (the server refuses the rest).
                    try await device.requireMayChange(check)
                    guard let path = await ui.ask("Photo file (JPEG, PNG or HEIC; Enter goes back):"), !path.isEmpty
                    else { continue }
                    let caption = await ui.ask("What it shows (Enter for nothing):")
                    _ = try await device.takePhoto(
                        check: id, file: URL(fileURLWithPath: path),
                        caption: caption.flatMap { $0.isEmpty ? nil : $0 })
                    ui.notice("✓ Photo saved on this device, its location removed; it is sent with the next sync.")
                case "f" where draft:
                    try await device.finalize(id)
                    ui.notice("✓ Finalized on this device; it is sent with the next sync.")
                case "d" where draft:
                    guard await confirm("Delete this draft?") else {
                        ui.notice("! Kept.", .warning)
                        continue
                    }
                    try await device.deleteDraft(id)
                    ui.notice("✓ Draft deleted on this device; the deletion is sent with the next sync.")
                    return
                default:
                    ui.failure("'\(answer)' is not one of the choices.")
                }
            } catch let error as AppError
                where error.status == .notPermitted || error.status == .invalidInput || error.status == .notFound
            {
                ui.failure(error.message)
                _ = await ui.ask("Press Enter.")
            }
        }
    }
}
