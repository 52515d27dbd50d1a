import BatonOData
import BatonSQL
import Foundation
import HTTPTypes

/// One OData request, whether it came over HTTP or inside a `$batch`.
struct DataRequest: Sendable {
    /// The HTTP method, upper-case.
    var method: String
    /// The URL relative to the service root (`PreflightChecks?$top=5`), still percent-encoded.
    var url: String
    /// Header fields, names as sent.
    var headers: [(String, String)]
    /// The body. Replacing it forgets ``json``.
    var body: [UInt8] { didSet { json = nil } }
    /// For a media entity's bytes (a `POST` of a photo, a `PUT` of its `$value`): the stored media, whose SHA-256
    /// an author's signature covers in place of the body's; ``body`` then holds the entity's properties as JSON
    /// (from `Slug`), or nothing.
    var media: StoredMedia?
    /// ``body`` as parsed JSON, when it came parsed (a request inside a JSON `$batch`, whose ``body`` is its
    /// serialization, for signatures and repeatability): decoded from here rather than parsed again.
    var json: JSONValue?

    /// The first value of the header `name` (case-insensitive).
    func header(_ name: String) -> String? { headers.first { HeaderScanner.sameName($0.0, name) }?.1 }

    /// Every value of the header `name` (case-insensitive).
    func headers(_ name: String) -> [String] {
        var values: [String] = []
        for (field, value) in headers where HeaderScanner.sameName(field, name) { values.append(value) }
        return values
    }
}

/// The answer to a ``DataRequest``.
struct DataResponse: Sendable {
    /// What the body holds.
    enum Body: Sendable {
        case none
        case json(JSONValue)
        /// JSON already serialized (the fast read path).
        case rawJSON([UInt8])
        case text(String, contentType: String)
    }

    var status: Int
    var headers: [(String, String)] = []
    var body: Body = .none
    /// Whether this answers a read with a delta token (for the metrics).
    var isDeltaPage = false

    /// An OData error response.
    static func error(_ error: ServerError) -> DataResponse {
        var members: [(String, JSONValue)] = [("code", .string(error.code)), ("message", .string(error.message))]
        if let target = error.target { members.append(("target", .string(target))) }
        return DataResponse(
            status: Int(error.status.code), headers: error.headers.map { ($0.0.rawName, $0.1) },
            body: .json(.object([("error", .object(members))])))
    }

    /// The OData error code of an error response.
    var errorCode: String? {
        guard case .json(let value) = body else { return nil }
        return value["error"]?["code"]?.stringValue
    }

    var jsonBody: JSONValue? {
        switch body {
        case .json(let value): return value
        case .rawJSON(let bytes): return try? JSONValue(parsing: bytes)
        default: return nil
        }
    }
}

extension ServerError {
    /// The HTTP error for a query the SQL translation refuses (too large, unsupported): 400.
    init(_ error: BatonSQLError) {
        self.init(.badRequest, error.code.rawValue, error.message)
    }

    /// 400 `ExpressionNotEvaluable` for a read whose expression PostgreSQL could not evaluate (a data exception,
    /// SQLSTATE class 22: `FuelKg mul 1e308 mul 1e308`, `substring(Remarks,1,9223372036854775807)`): the query is
    /// at fault, not the server. The message says what kind of value was refused, by SQLSTATE, and never the value.
    static func unevaluable(sqlState state: String) -> ServerError {
        let what =
            switch state {
            case "22003": "a number is out of range (a result or a conversion overflowed its type)"
            case "22012": "a number was divided by zero"
            case "22011", "22023", "2202E", "22013", "22014", "22016", "2201W", "2201X":
                "a position, length or count is out of range"
            case "22P02", "22018", "2201B": "a text is not a valid value of the type it is used as"
            case "22007", "22008", "22009", "22015", "2201E", "2201F", "2201G":
                "a date, time or number is outside what its operation accepts"
            case "22021", "22P05", "22P06": "a text holds a character the database does not store (such as NUL)"
            case "22001": "a text is longer than its type allows"
            default: "a value is outside what its operation accepts"
            }
        return ServerError(
            .badRequest, "ExpressionNotEvaluable",
            "The request's expression cannot be evaluated: \(what) (SQLSTATE \(state)). Change the $filter, $orderby or key so that its values stay in range."
        )
    }

    /// The HTTP error for a protocol-core error: 501 for what Baton does not implement, 400 otherwise.
    init(_ error: ODataError) {
        let status: HTTPResponse.Status = error.code == .notImplemented ? .notImplemented : .badRequest
        self.init(status, error.code.rawValue, error.description, target: error.target)
    }
}
