/// One request inside a `$batch`.
public struct BatchRequest: Sendable, Hashable {
    /// The request id, unique within the batch (JSON `id`, multipart `Content-ID`).
    public var id: String
    /// The atomicity group (JSON) or changeset (multipart) the request belongs to; all requests of a group
    /// succeed or fail together.
    public var atomicityGroup: String?
    /// Ids of requests or groups that must succeed first.
    public var dependsOn: [String]
    /// The HTTP method, upper-case.
    public var method: String
    /// The URL: relative to the service root, absolute, or starting with a `$n` reference.
    public var url: String
    /// Header fields in order; names as sent.
    public var headers: [(String, String)]
    /// The JSON body, if any.
    public var body: JSONValue?

    /// Creates a request.
    public init(
        id: String, atomicityGroup: String? = nil, dependsOn: [String] = [], method: String, url: String,
        headers: [(String, String)] = [], body: JSONValue? = nil
    ) {
        self.id = id
        self.atomicityGroup = atomicityGroup
        self.dependsOn = dependsOn
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }

    /// The first header named `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { HeaderScanner.sameName($0.0, name) }?.1
    }

    /// The URL with a leading `$n` reference replaced by the location of request `n`'s result
    /// (JSON Format 4.01 §19.1, Part 1 §11.7.7.2).
    ///
    /// - Throws: ``ODataError`` (`invalidBatch`) when the reference names no earlier request with a location.
    public func resolvedURL(locations: [String: String]) throws(ODataError) -> String {
        guard url.hasPrefix("$"), !url.hasPrefix("$batch"), !url.hasPrefix("$metadata") else { return url }
        let reference = url.dropFirst().prefix { $0 != "/" && $0 != "?" }
        guard let location = locations[String(reference)] else {
            throw ODataError(
                .invalidBatch,
                "Request '\(id)' refers to '$\(reference)', which names no earlier request that created an entity",
                target: id)
        }
        return location + url.dropFirst(reference.count + 1)
    }

    public static func == (lhs: BatchRequest, rhs: BatchRequest) -> Bool {
        lhs.id == rhs.id && lhs.atomicityGroup == rhs.atomicityGroup && lhs.dependsOn == rhs.dependsOn
            && lhs.method == rhs.method && lhs.url == rhs.url && lhs.body == rhs.body
            && lhs.headers.elementsEqual(rhs.headers) { $0.0 == $1.0 && $0.1 == $1.1 }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
        hasher.combine(method)
        hasher.combine(url)
    }
}

/// One response inside a `$batch` response.
public struct BatchResponse: Sendable, Hashable {
    /// The id of the request this answers.
    public var id: String
    /// The atomicity group of that request.
    public var atomicityGroup: String?
    /// The HTTP status code.
    public var status: Int
    /// Header fields in order.
    public var headers: [(String, String)]
    /// The JSON body, if any.
    public var body: JSONValue?

    /// Creates a response.
    public init(
        id: String, atomicityGroup: String? = nil, status: Int, headers: [(String, String)] = [], body: JSONValue? = nil
    ) {
        self.id = id
        self.atomicityGroup = atomicityGroup
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// The first header named `name` (case-insensitive).
    public func header(_ name: String) -> String? {
        headers.first { HeaderScanner.sameName($0.0, name) }?.1
    }

    public static func == (lhs: BatchResponse, rhs: BatchResponse) -> Bool {
        lhs.id == rhs.id && lhs.atomicityGroup == rhs.atomicityGroup && lhs.status == rhs.status
            && lhs.body == rhs.body && lhs.headers.elementsEqual(rhs.headers) { $0.0 == $1.0 && $0.1 == $1.1 }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
        hasher.combine(status)
    }
}

/// Checks the structural rules every batch must follow, whatever its format.
enum BatchValidation {
    static let methods: Set<String> = ["GET", "POST", "PATCH", "PUT", "DELETE"]
    static let maximumRequests = 1000

    static func validate(_ requests: [BatchRequest]) throws(ODataError) {
        guard requests.count <= maximumRequests else {
            throw ODataError(.limitExceeded, "A batch may hold at most \(maximumRequests) requests")
        }
        var ids: Set<String> = []
        var groups: Set<String> = []
        var closedGroups: Set<String> = []
        var currentGroup: String?
        for request in requests {
            guard !request.id.isEmpty, ids.insert(request.id).inserted else {
                throw ODataError(
                    .invalidBatch, "Request id '\(request.id)' is empty or used twice; ids must be unique",
                    target: request.id)
            }
            guard methods.contains(request.method) else {
                throw ODataError(
                    .invalidBatch,
                    "Request '\(request.id)' has method '\(request.method)'; use GET, POST, PATCH, PUT or DELETE",
                    target: request.id)
            }
            if let group = request.atomicityGroup {
                guard !closedGroups.contains(group), !ids.contains(group) || group == request.id else {
                    throw ODataError(
                        .invalidBatch,
                        "Requests of atomicity group '\(group)' must be adjacent, and the group name must differ from request ids",
                        target: group)
                }
                if request.method == "GET" {
                    throw ODataError(
                        .invalidBatch,
                        "Request '\(request.id)' is a GET inside atomicity group '\(group)'; "
                            + "only changes belong in a group", target: request.id)
                }
                if currentGroup != group, let previous = currentGroup { closedGroups.insert(previous) }
                currentGroup = group
                groups.insert(group)
            } else if let previous = currentGroup {
                closedGroups.insert(previous)
                currentGroup = nil
            }
            for dependency in request.dependsOn {
                guard ids.contains(dependency) && dependency != request.id || groups.contains(dependency) else {
                    throw ODataError(
                        .invalidBatch,
                        "Request '\(request.id)' depends on '\(dependency)', which is not an earlier request or group",
                        target: request.id)
                }
            }
        }
    }
}
