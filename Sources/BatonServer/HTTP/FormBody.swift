import BatonOData
import Foundation
import Hummingbird

/// An `application/x-www-form-urlencoded` body (OAuth requests), parsed strictly: each parameter at most once
/// (RFC 6749 §3.1).
struct FormBody: Sendable {
    var values: [String: String]

    subscript(name: String) -> String? { values[name] }

    /// Reads and parses a request body.
    ///
    /// - Throws: ``OAuthError`` (`invalid_request`) for a wrong content type, a malformed or repeated
    ///   parameter; 413 for an oversized body.
    static func read(_ request: Request, context: some RequestContext) async throws -> FormBody {
        guard HeaderScanner.mediaType(of: request.headers[.contentType]) == "application/x-www-form-urlencoded" else {
            throw OAuthError.invalidRequest("The body must be application/x-www-form-urlencoded.")
        }
        var request = request
        let buffer = try await request.collectBody(upTo: context.maxUploadSize)
        return try parse(String(buffer: buffer))
    }

    static func parse(_ text: String) throws(OAuthError) -> FormBody {
        var values: [String: String] = [:]
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = decode(parts[0]), let value = decode(parts.count > 1 ? parts[1] : "") else {
                throw OAuthError.invalidRequest("The form body is not valid percent-encoding.")
            }
            guard values[name] == nil else {
                throw OAuthError.invalidRequest("Parameter '\(name.prefix(40))' is given more than once.")
            }
            values[name] = value
        }
        return FormBody(values: values)
    }

    static func decode(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}
