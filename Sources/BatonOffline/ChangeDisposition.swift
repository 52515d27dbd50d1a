import BatonOData

/// What becomes of a queued change once its upload was answered — the device's half of the handover
/// (docs/ARCHITECTURE.md §2, step 11), decided in one place from the answer alone; the upload only acts on it.
///
/// | answer | disposition |
/// | --- | --- |
/// | 2xx | ``applied`` |
/// | none, 408, 424, 429, 5xx | ``retryLater`` (the same request id next time) |
/// | 403 `OnBehalfNotAllowed` | ``waitForAuthor`` (the server takes no change on another's behalf) |
/// | 412 | ``archive(withServerVersion:)`` with the server's version |
/// | another refusal of a change to an entity the server has (not a create, not 404 or 410) | archived with the server's version |
/// | any other refusal | archived without it |
public enum ChangeDisposition: Sendable, Equatable {
    /// The server applied it: it leaves the queue, and the entity takes the answer's ETag.
    case applied
    /// Not applied, for now (no answer, a timeout, a failed dependency, a busy or failing server): it stays queued
    /// and goes again with the same request id.
    case retryLater
    /// The server does not take changes uploaded on someone else's behalf: it stays queued for its author.
    case waitForAuthor
    /// Refused: it goes to the error archive with the server's reason, and the server's current version of the
    /// entity when `withServerVersion` (to compare, and to take).
    case archive(withServerVersion: Bool)

    /// The disposition of a queued change sent with `method`, answered `status` (`nil`: no answer) with the
    /// OData error `code`.
    ///
    /// - Parameters:
    ///   - status: the answer's status, or `nil` when none came.
    ///   - code: the OData error code of an error answer, if any.
    ///   - method: the queued change's method (`POST`, `PATCH`, `PUT`, `DELETE`).
    /// - Returns: what becomes of the change.
    public static func of(status: Int?, code: String?, method: String) -> ChangeDisposition {
        guard let status else { return .retryLater }
        switch status {
        case 200..<300:
            return .applied
        case let status where status >= 400 && !ChangeAnswer.isRefusal(status: status):
            return .retryLater
        case 403 where code == "OnBehalfNotAllowed":
            return .waitForAuthor
        default:
            // For a conflict, and for any refused change to an entity the server still has (a 403 leaves the
            // device's copy differing from the server's).
            let refusedChange = method != "POST" && status != 404 && status != 410
            return .archive(withServerVersion: status == 412 || refusedChange)
        }
    }
}
