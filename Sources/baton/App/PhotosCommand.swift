import ArgumentParser
import BatonOData
import BatonOffline
import Foundation

/// `baton photos`: take a photo for a check from a file, list a check's photos, export one.
struct PhotosCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "photos", abstract: "Photos of pre-flight checks: take one from a file, list them, export one.",
        subcommands: [Add.self, List.self, Export.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Attach a photo (JPEG, PNG or HEIC) to a check on this device: its location removed, kept encrypted, uploaded with the next sync."
        )
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id (from `checks list --json`).") var check: String
        @Option(help: "The photo's file.") var file: String
        @Option(help: "What it shows (up to 200 characters).") var caption: String?

        func run() async throws {
            if let caption, caption.unicodeScalars.count > 200 {
                throw AppError(.invalidInput, "A caption takes at most 200 characters.")
            }
            try await runScripted(device, signIn: signIn) { device, _ in
                let id = try await device.takePhoto(
                    check: check, file: URL(fileURLWithPath: file), caption: caption)
                print("Saved \(id) on this device; it is uploaded with the next sync, after its check.")
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a check's photos, oldest first.")
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The check's id.") var check: String
        @Flag(help: "Print JSON.") var json = false

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                let photos = try await device.photos(check: check)
                if json {
                    try printJSON(photos.map(PhotoJSON.init))
                    return
                }
                if photos.isEmpty { print("No photos of \(check).") }
                for photo in photos.map(PhotoJSON.init) {
                    print(
                        photo.id, photo.takenBy ?? "", photo.takenAt ?? "", "\(photo.size ?? 0) bytes",
                        photo.pending ? "(not uploaded yet)" : "", photo.caption ?? "")
                }
            }
        }
    }

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Write a photo, decrypted, to a new file (downloaded first when it is not on this device); the file is readable by you only."
        )
        @OptionGroup var device: DeviceOptions
        @OptionGroup var signIn: SignInOptions
        @Argument(help: "The photo's id (from `photos list`).") var photo: String
        @Option(help: "The new file to write.") var to: String

        func run() async throws {
            try await runScripted(device, signIn: signIn) { device, _ in
                try await device.exportPhoto(photo, to: URL(fileURLWithPath: to))
                print("Wrote \(photo) to \(to).")
            }
        }
    }
}

/// A photo as `photos list --json` prints it.
struct PhotoJSON: Encodable {
    let id: String
    let checkID: String?
    let takenAt: String?
    let takenBy: String?
    let uploadedBy: String?
    let caption: String?
    let contentType: String?
    let size: Int64?
    let sha256: String?
    let pending: Bool

    init(_ entity: LocalEntity) {
        func text(_ name: String) -> String? {
            guard let value = entity.values[name], !value.isNull else { return nil }
            if case .string(let text) = value { return text }
            return value.urlLiteral
        }
        id = entity.id
        checkID = text("CheckID")
        takenAt = text("TakenAt")
        takenBy = text("TakenBy")
        uploadedBy = text("UploadedBy")
        caption = text("Caption")
        contentType = text("ContentType")
        if case .integer(let bytes)? = entity.values["Size"] { size = bytes } else { size = nil }
        sha256 = text("SHA256")
        pending = entity.pending
    }
}
