import ArgumentParser
import BatonClient
import BatonFlows
import BatonOffline
import Foundation

/// An error of the app itself, with the exit status it ends a subcommand with.
struct AppError: Error, Sendable, CustomStringConvertible {
    /// The documented exit statuses of `baton` (docs/WALKTHROUGH.md, "Exit status").
    enum Status: Int32, Sendable {
        /// Something failed that is not one of the cases below (storage, server error).
        case failed = 1
        /// Wrong passcode or password, the user's secure store wiped, or nobody signed in.
        case authentication = 3
        /// The server is needed and cannot be reached (or `--offline`).
        case offline = 4
        /// The sync ran but left changes behind: moved to the error archive or waiting for their author.
        case incomplete = 5
        /// A value given is not valid (a check field out of range, an unknown flight).
        case invalidInput = 6
        /// No such user or aircraft on this device.
        case notFound = 7
        /// The pending-changes rule refused: upload first, or discard with `--discard-pending`.
        case pendingChanges = 8
        /// Not permitted: the signed-in user's role may not do this (another user's check or change, an aircraft's
        /// status), or the user has not given the consent Baton needs.
        case notPermitted = 9
        /// Bad command-line use (as swift-argument-parser reports it).
        case usage = 64
    }

    let status: Status
    let message: String

    init(_ status: Status, _ message: String) {
        self.status = status
        self.message = message
    }

    var description: String { message }

    /// The one place that turns any error of the SDK into what the person reads and the exit status.
    static func from(_ error: any Error) -> AppError {
        switch error {
        case let error as AppError:
            return error
        case let error as FlowsError:
            let status: Status =
                switch error.code {
                case .wrongPasscode, .invalidCredentials, .wiped, .notOpen, .userMismatch, .notAllowed:
                    .authentication
                case .offline: .offline
                case .unknownUser: .notFound
                case .consentDeclined: .notPermitted
                default: .failed
                }
            return AppError(status, error.message)
        case let error as OfflineError:
            let status: Status =
                switch error.code {
                case .offline: .offline
                case .notFound: .notFound
                case .badRequest: .invalidInput
                case .pendingChanges: .pendingChanges
                default: .failed
                }
            return AppError(status, error.message)
        case let error as BatonClientError:
            let status: Status =
                switch error.code {
                case .unreachable: .offline
                case .invalidCredentials, .unauthorized: .authentication
                default: .failed
                }
            return AppError(status, error.message)
        default:
            return AppError(.failed, "\(error)")
        }
    }

    /// The code of any error, for the device's log and usage events: letters only, never a message.
    static func code(of error: any Error) -> String {
        let raw: String =
            switch error {
            case let error as FlowsError: error.code.rawValue
            case let error as OfflineError: error.code.rawValue
            case let error as BatonClientError: error.serverCode ?? error.code.rawValue
            case let error as AppError: "\(error.status)"
            default: "Failed"
            }
        let letters = raw.filter { $0.isASCII && $0.isLetter }
        return letters.isEmpty ? "Failed" : String(letters.prefix(64))
    }

    /// The exit code for swift-argument-parser.
    var exitCode: ExitCode { ExitCode(status.rawValue) }
}
