import Testing

@testable import BatonOffline

/// The device's half of the handover, as docs/ARCHITECTURE.md §2 step 11 describes it: what becomes of a queued
/// change for every kind of answer.
@Suite struct ChangeDispositionTests {
    struct Row: Sendable, CustomTestStringConvertible {
        var status: Int?
        var code: String?
        var method: String
        var expected: ChangeDisposition
        var testDescription: String { "\(method) → \(status.map(String.init) ?? "no answer") \(code ?? "")" }
    }

    static let table: [Row] = [
        // 2xx: applied.
        Row(status: 201, code: nil, method: "POST", expected: .applied),
        Row(status: 200, code: nil, method: "PATCH", expected: .applied),
        Row(status: 204, code: nil, method: "DELETE", expected: .applied),
        // No answer, 408, 424, 429, 5xx: retried later with the same request id.
        Row(status: nil, code: nil, method: "POST", expected: .retryLater),
        Row(status: 408, code: nil, method: "PATCH", expected: .retryLater),
        Row(status: 424, code: "FailedDependency", method: "PATCH", expected: .retryLater),
        Row(status: 429, code: "TooManyRequests", method: "POST", expected: .retryLater),
        Row(status: 500, code: "InternalError", method: "PATCH", expected: .retryLater),
        Row(status: 503, code: "DatabaseUnavailable", method: "DELETE", expected: .retryLater),
        // The server takes no change on another's behalf: it waits for its author.
        Row(status: 403, code: "OnBehalfNotAllowed", method: "POST", expected: .waitForAuthor),
        Row(status: 403, code: "OnBehalfNotAllowed", method: "PATCH", expected: .waitForAuthor),
        // Anything else is archived; with the server's version for 412 and for a refused change to an entity the
        // server has.
        Row(status: 412, code: "PreconditionFailed", method: "PATCH", expected: .archive(withServerVersion: true)),
        Row(status: 412, code: "PreconditionFailed", method: "POST", expected: .archive(withServerVersion: true)),
        Row(status: 403, code: "NotTheAuthor", method: "PATCH", expected: .archive(withServerVersion: true)),
        Row(status: 409, code: "Conflict", method: "DELETE", expected: .archive(withServerVersion: true)),
        Row(status: 403, code: "SignatureInvalid", method: "POST", expected: .archive(withServerVersion: false)),
        Row(status: 400, code: "BadRequest", method: "POST", expected: .archive(withServerVersion: false)),
        Row(status: 404, code: "NotFound", method: "PATCH", expected: .archive(withServerVersion: false)),
        Row(status: 410, code: "Gone", method: "DELETE", expected: .archive(withServerVersion: false)),
        Row(status: 413, code: "MediaQuotaExceeded", method: "POST", expected: .archive(withServerVersion: false)),
    ]

    @Test(arguments: table) func everyAnswerHasOneDisposition(_ row: Row) {
        #expect(ChangeDisposition.of(status: row.status, code: row.code, method: row.method) == row.expected)
    }
}
