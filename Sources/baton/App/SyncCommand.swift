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

struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync", abstract: "Upload the device's pending changes, then download what changed.")
    @OptionGroup var device: DeviceOptions
    @OptionGroup var signIn: SignInOptions
    @Flag(help: "Print JSON.") var json = false

    struct Result: Encodable {
        let uploaded: [String: Int]
        let archived: Int
        let waiting: Int
        let downloaded: Int
        let removed: Int
        let summary: String
        let traceID: String
    }

    func run() async throws {
        try await runScripted(device, signIn: signIn) { device, ui in
            // The trace spans the whole sync, token refresh included; a failed sync names it too, so its
            // requests can be found in the server's log.
            let (outcome, traceID) = await RequestTrace.run { traceID in
                do {
                    return (
                        Swift.Result<SyncReport, any Error>.success(try await device.sync { _ in }), traceID
                    )
                } catch {
                    return (.failure(error), traceID)
                }
            }
            var summary: SyncReport
            do {
                summary = try outcome.get()
            } catch {
                FileHandle.standardError.write(Data("trace id \(traceID)\n".utf8))
                throw error
            }
            // The sign-in already synced when the server was reachable: count what it uploaded too.
            if let atSignIn = try await device.session().syncReport {
                summary.upload.uploaded = atSignIn.upload.uploaded + summary.upload.uploaded
                summary.upload.archived = atSignIn.upload.archived + summary.upload.archived
            }
            if json {
                try printJSON(
                    Result(
                        uploaded: summary.upload.uploadedByAuthor, archived: summary.archived.count,
                        waiting: summary.waiting.count, downloaded: summary.download.updated,
                        removed: summary.download.removed, summary: summary.summary, traceID: traceID))
            } else {
                print(summary.summary)
                print("trace id \(traceID) (the server logs it with each request of this sync)")
                for archived in summary.archived {
                    print("archived: \(archived.entry.author)'s \(archived.entry.entityID): \(archived.message)")
                }
            }
            guard summary.upload.isComplete else {
                throw AppError(.incomplete, "The sync left changes behind: " + summary.summary)
            }
        }
    }
}
