import BatonOData
import Foundation
import HTTPTypes
import Hummingbird
import Logging

/// Mounts the data service at `/odata/` behind bearer authentication.
struct ODataRoutes {
    let service: DataService
    let users: UserDirectory
    let devices: DeviceRegistry
    let settings: SettingsStore
    let audit: AuditLog
    let issuer: IssuerBox
    let metrics: ServerMetrics

    func add(to group: RouterGroup<BatonRequestContext>) {
        for path in ["/odata", "/odata/**"] {
            for method in [HTTPRequest.Method.get, .post, .patch, .put, .delete] {
                group.on(RouterPath(path), method: method) { request, context in
                    try await handle(request, context: context)
                }
            }
        }
        // A resumable upload's offset (`HEAD $uploads/ID`).
        group.on(RouterPath("/odata/**"), method: .head) { request, context in
            try await handle(request, context: context)
        }
    }

    func handle(_ request: Request, context: BatonRequestContext) async throws -> Response {
        let name = try context.userName()
        guard let role = context.role else { throw ServerError.unauthorized("Sign in first.", error: nil) }
        let version: ODataVersion
        do {
            version = try ODataVersion.negotiate(
                version: request.headers.value(.odataVersion), maxVersion: request.headers.value(.odataMaxVersion))
        } catch {
            throw ServerError(error)
        }
        var path = request.uri.path
        path = path.hasPrefix("/odata/") ? String(path.dropFirst("/odata/".count)) : ""
        let url = path + (request.uri.query.map { "?" + $0 } ?? "")
        let dataContext = DataService.Context(
            user: name, role: role, forwardedAddress: context.forwardedAddress, remoteAddress: context.remoteAddress,
            serviceRoot: issuer.serviceRoot, version: version)
        if path.hasPrefix("$uploads/")
            || (path.hasPrefix("%24") && path.removingPercentEncoding?.hasPrefix("$uploads/") == true)
        {
            let id = String((path.removingPercentEncoding ?? path).dropFirst("$uploads/".count))
            return try await handleUpload(
                id: id, request: request, dataContext: dataContext, context: context, version: version)
        }
        guard request.method != .head else {
            throw ServerError(.methodNotAllowed, "MethodNotAllowed", "HEAD answers only for an upload in progress.")
        }
        // A media entity's bytes stream to storage; they are never collected into one body.
        // Only a POST's media type tells whether it is media: no other request looks its Content-Type up here.
        let contentType = request.method == .post ? request.headers.value(.contentType) : nil
        if let media = mediaRequest(method: request.method, url: url, contentType: contentType) {
            return try await handleMedia(
                media, request: request, url: url, dataContext: dataContext, context: context, version: version)
        }
        var body: [UInt8] = []
        if request.method != .get {
            var request = request
            let limit = service.configuration.maximumBodySize
            do {
                body = Array(buffer: try await request.collectBody(upTo: limit))
            } catch let error as any HTTPResponseError where error.status == .contentTooLarge {
                throw ServerError(
                    .contentTooLarge, "ContentTooLarge",
                    "The request body is larger than the data service accepts (\(limit / 1024) KiB).")
            }
        }
        let dataRequest = DataRequest(
            method: request.method.rawValue, url: url,
            headers: request.headers.map { ($0.name.rawName, $0.value) }, body: body)
        if path == "$batch" || (path.utf8.contains(UInt8(ascii: "%")) && path.removingPercentEncoding == "$batch") {
            guard request.method == .post else {
                throw ServerError(.methodNotAllowed, "MethodNotAllowed", "Send $batch requests with POST.")
            }
            return try await batch(dataRequest, context: dataContext, version: version, logger: context.logger)
        }
        let modelOnly = request.method == .get && (path.isEmpty || path == "$metadata")
        let response = try await execute(
            dataRequest, context: dataContext, modelOnly: modelOnly, logger: context.logger)
        return Self.httpResponse(response, version: version)
    }

    /// Runs one request in the user's slots (a change takes one of their change slots, a read of data one of
    /// their read slots, before it reads anything: its on-behalf policy; the service document and $metadata come
    /// from the model alone), and counts and audits what it changed or was refused.
    func execute(
        _ dataRequest: DataRequest, context dataContext: DataService.Context, modelOnly: Bool, slotTaken: Bool = false,
        logger: Logger
    ) async throws -> DataResponse {
        let start = ContinuousClock.now
        let reading = dataRequest.method == "GET"
        let name = dataContext.user
        let slots = reading ? service.reads : service.changes
        let (response, entries) = try await slots.run(for: name, taking: !modelOnly && !slotTaken) {
            var dataContext = dataContext
            dataContext.onBehalf = try await onBehalfPolicy(for: dataRequest, signedIn: name)
            return await service.execute(dataRequest, context: dataContext)
        }
        metrics.database(reading ? "read" : "change", ContinuousClock.now - start)
        if response.isDeltaPage { metrics.deltaPage() }
        if !reading, ChangeAnswer.isRefusal(status: response.status) {
            metrics.refusedChange(code: response.errorCode ?? "unknown")
            await recordRefusals(
                [(dataRequest, response.errorCode ?? "unknown")], uploadedBy: name, address: dataContext.address,
                logger: logger)
        }
        count(entries, uploadedBy: name)
        await recordAudit(entries, logger: logger)
        return response
    }

    /// Decodes a JSON or multipart batch, runs it, and encodes the answer in the same format.
    func batch(_ request: DataRequest, context: DataService.Context, version: ODataVersion, logger: Logger)
        async throws -> Response
    {
        if request.header("Repeatability-Request-ID") != nil || request.header("Repeatability-First-Sent") != nil {
            throw ServerError.badRequest(
                "Repeatability headers belong on the requests inside a $batch, not on the $batch itself.",
                target: "Repeatability-Request-ID")
        }
        let contentType = request.header("Content-Type") ?? ""
        let requests: [BatchRequest]
        let multipart = MultipartBatch.isMultipartMixed(contentType)
        do {
            if multipart {
                requests = try MultipartBatch.decodeRequests(
                    request.body, boundary: try MultipartBatch.boundary(fromContentType: contentType))
            } else if HeaderScanner.mediaType(of: contentType) == "application/json" {
                requests = try JSONBatch.decodeRequests(request.body)
            } else {
                throw ServerError(
                    .unsupportedMediaType, "UnsupportedMediaType",
                    "A $batch body must be application/json or multipart/mixed.")
            }
        } catch let error as ODataError {
            throw ServerError(error)
        }
        guard requests.count <= service.configuration.maximumBatchRequests else {
            throw ServerError(
                .contentTooLarge, "BatchTooLarge",
                "A $batch may hold at most \(service.configuration.maximumBatchRequests) requests; this one has \(requests.count)."
            )
        }
        // A batch with a change takes one of the user's change slots, and one with a read one of their read slots,
        // before it reads anything (the on-behalf policies).
        let changing = requests.contains { $0.method != "GET" }
        let reading = requests.contains { $0.method == "GET" }
        return try await service.changes.run(for: context.user, taking: changing) {
            try await service.reads.run(for: context.user, taking: reading) {
                var context = context
                context.onBehalf = try await onBehalfPolicy(for: request, signedIn: context.user)
                return try await run(
                    requests, multipart: multipart, context: context, version: version, logger: logger)
            }
        }
    }

    /// Runs a decoded `$batch` and encodes its answer.
    func run(
        _ requests: [BatchRequest], multipart: Bool, context: DataService.Context, version: ODataVersion,
        logger: Logger
    ) async throws -> Response {
        var context = context
        var authors: [String: DataService.OnBehalfPolicy.Author] = [:]
        var seen: Set<[String]> = []
        for request in requests {
            let inner = DataRequest(method: request.method, url: request.url, headers: request.headers, body: [])
            // A queue's changes share few (author, device) pairs: each is looked up once.
            let pair = [inner.header("Baton-Author") ?? "", inner.header("Baton-Device") ?? ""]
            guard inner.header("Baton-Device") != nil, seen.insert(pair).inserted else { continue }
            let policy = try await onBehalfPolicy(for: inner, signedIn: context.user)
            context.onBehalf.allowed = context.onBehalf.allowed || policy.allowed
            context.onBehalf.uploaderDevices.formUnion(policy.uploaderDevices)
            authors.merge(policy.authors) { first, second in
                var merged = first
                merged.keys.merge(second.keys) { a, _ in a }
                return merged
            }
        }
        context.onBehalf.authors = authors
        context.budget = ResponseBudget(limit: service.configuration.maximumBatchResponseSize)
        metrics.batch(size: requests.count)
        let start = ContinuousClock.now
        let (responses, entries) = await service.batch(requests, context: context)
        metrics.database("batch", ContinuousClock.now - start)
        let methods = Dictionary(requests.map { ($0.id, $0.method) }) { first, _ in first }
        let byID = Dictionary(requests.map { ($0.id, $0) }) { first, _ in first }
        var refused: [(DataRequest, String)] = []
        for response in responses where methods[response.id] != "GET" && ChangeAnswer.isRefusal(status: response.status)
        {
            let code = response.body?["error"]?["code"]?.stringValue ?? "unknown"
            metrics.refusedChange(code: code)
            if let request = byID[response.id] {
                refused.append(
                    (DataRequest(method: request.method, url: request.url, headers: request.headers, body: []), code))
            }
        }
        await recordRefusals(refused, uploadedBy: context.user, address: context.address, logger: logger)
        count(entries, uploadedBy: context.user)
        await recordAudit(entries, logger: logger)
        var headers: HTTPFields = [.odataVersion: version.rawValue]
        if multipart {
            // Lower case: some clients lower-case the whole Content-Type, boundary included.
            let boundary = "batchresponse_\(UUID().uuidString.lowercased())"
            headers[.contentType] = "multipart/mixed; boundary=\(boundary)"
            return Response(
                status: .ok, headers: headers,
                body: .init(
                    byteBuffer: ByteBuffer(bytes: MultipartBatch.encodeResponses(responses, boundary: boundary))))
        }
        headers[.contentType] = "application/json"
        return Response(
            status: .ok, headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: JSONBatch.encodeResponses(responses).serializedBytes)))
    }

    /// Counts applied changes (each has one audit entry, its actor the author): the uploader's own, or on behalf.
    func count(_ entries: [AuditEntry], uploadedBy uploader: String) {
        for entry in entries {
            metrics.uploaded(onBehalf: entry.actor != uploader)
        }
    }

    /// Records the changes the server refused (the ones a device moves to its error archive), so that the
    /// cockpit can show them: the author (the signed one, or the uploader), what, why — the first of each
    /// uploader, code and minute in full, the others counted in its ``AuditEntry/repeats`` (the key is the signed-in
    /// uploader's, never the `Baton-Author` a request claims). A failure to record them is logged; the answer
    /// stands.
    func recordRefusals(
        _ refused: [(DataRequest, String)], uploadedBy uploader: String, address: String, logger: Logger
    )
        async
    {
        guard !refused.isEmpty else { return }
        let now = service.clock.now()
        let entries = refused.map { request, code in
            (
                // The actor is the account that sent the change: a refused change's `Baton-Author` is a claim the
                // server may not have checked (a bad signature is one reason to refuse), so it goes in the detail.
                entry: AuditEntry(
                    at: now, actor: uploader, action: "change-refused",
                    // The path without its query, cut at the first `?` byte (a `?` with a mark after it is one
                    // `Character`, which a split by `Character` passes over).
                    subject:
                        "\(request.method) \(String(decoding: request.url.utf8.prefix { $0 != UInt8(ascii: "?") }, as: UTF8.self))"
                        .prefix(scalars: 200),
                    address: address,
                    detail: "\(code), uploaded by \(uploader)"
                        + (request.header("Baton-Author").map { ", for author \($0.prefix(scalars: 64)) (unchecked)" }
                            ?? "")),
                key: AuditLog.countingKey(["change-refused", uploader, code], at: now)
            )
        }
        do {
            try await audit.recordAggregated(entries)
        } catch {
            logger.error(
                "Refused changes could not be audited",
                metadata: ["count": "\(entries.count)", "error.type": "\(type(of: error))"])
        }
    }

    /// Records the audit entries of committed changes, which wait in the data database's outbox already (on
    /// PostgreSQL they are in the log already, and this does nothing). The
    /// changes are applied, so a failure here does not turn their answer into an error: it is logged, and the
    /// entries stay in the outbox, moved by the next change whose entries reach the log (or the next start).
    func recordAudit(_ entries: [AuditEntry], logger: Logger) async {
        do {
            try await audit.record(staged: entries, outbox: service.outbox)
        } catch {
            service.outbox.noteBacklog()
            logger.error(
                "Audit entries wait in the outbox until the audit log can be written again",
                metadata: ["count": "\(entries.count)", "error.type": "\(type(of: error))"])
            return
        }
        guard service.outbox.takeBacklog() else { return }
        do {
            try await audit.collect(from: service.store.storage)
        } catch {
            service.outbox.noteBacklog()
        }
    }

    /// Fetches what a signed change needs: the setting, the author's account and key history on the device named,
    /// and whether the signed-in user is registered there (the policy itself is the data service's:
    /// ``DataService/onBehalfPolicy(for:signedIn:devices:users:settings:)``).
    func onBehalfPolicy(for request: DataRequest, signedIn: String) async throws -> DataService.OnBehalfPolicy {
        try await DataService.onBehalfPolicy(
            for: request, signedIn: signedIn, devices: devices, users: users, settings: settings)
    }

    static func httpResponse(_ response: DataResponse, version: ODataVersion) -> Response {
        // The fields are gathered in an array and made `HTTPFields` once: setting them one by one through its
        // subscript copied every field already set, each time.
        var fields: [HTTPField] = []
        fields.reserveCapacity(response.headers.count + 2)
        // As `HTTPFields`' subscript does, a value replaces every earlier one of its name (here it goes last: the
        // order of fields of different names means nothing in HTTP).
        func set(_ name: HTTPField.Name, _ value: String) {
            fields.removeAll { $0.name == name }
            fields.append(HTTPField(name: name, value: value))
        }
        set(.odataVersion, version.rawValue)
        for (name, value) in response.headers {
            if let field = HTTPField.Name(name) { set(field, value) }
        }
        func headers() -> HTTPFields {
            var headers = HTTPFields()
            headers.reserveCapacity(fields.count)
            headers.append(contentsOf: fields)
            return headers
        }
        let status = HTTPResponse.Status(code: response.status)
        let body: ResponseBody
        switch response.body {
        case .none:
            return Response(status: status, headers: headers())
        case .json(let json):
            set(.contentType, "application/json; odata.metadata=minimal")
            body = .init(byteBuffer: ByteBuffer(bytes: json.serializedBytes))
        case .rawJSON(let bytes):
            set(.contentType, "application/json; odata.metadata=minimal")
            body = .init(byteBuffer: ByteBuffer(bytes: bytes))
        case .text(let text, let contentType):
            set(.contentType, contentType)
            body = .init(byteBuffer: ByteBuffer(string: text))
        }
        return Response(status: status, headers: headers(), body: body)
    }
}

extension HTTPField.Name {
    static let odataVersion: HTTPField.Name = {
        guard let name = HTTPField.Name("OData-Version") else { preconditionFailure("valid header name") }
        return name
    }()
    static let odataMaxVersion: HTTPField.Name = {
        guard let name = HTTPField.Name("OData-MaxVersion") else { preconditionFailure("valid header name") }
        return name
    }()
}
