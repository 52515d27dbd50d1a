import BatonOData
import Foundation
import HTTPTypes
import Hummingbird

/// Mounts the data service at `/odata/` behind bearer authentication.
struct ODataRoutes {
    let service: DataService
    let users: UserDirectory
    let audit: AuditLog
    let issuer: IssuerBox

    func add(to group: RouterGroup<BatonRequestContext>) {
        for path in ["/odata", "/odata/**"] {
            for method in [HTTPRequest.Method.get, .post, .patch, .put, .delete] {
                group.on(RouterPath(path), method: method) { request, context in
                    try await handle(request, context: context)
                }
            }
        }
    }

    func handle(_ request: Request, context: BatonRequestContext) async throws -> Response {
        let name = try context.userName()
        guard let user = try await users.user(named: name) else {
            throw ServerError.unauthorized("The user no longer exists.")
        }
        let version: ODataVersion
        do {
            version = try ODataVersion.negotiate(
                version: request.headers[.odataVersion], maxVersion: request.headers[.odataMaxVersion])
        } catch {
            throw ServerError(error)
        }
        var path = request.uri.path
        path = path.hasPrefix("/odata/") ? String(path.dropFirst("/odata/".count)) : ""
        let url = path + (request.uri.query.map { "?" + $0 } ?? "")
        var body: [UInt8] = []
        if request.method != .get {
            var request = request
            let buffer = try await request.collectBody(upTo: service.configuration.maximumBodySize)
            body = Array(buffer: buffer)
        }
        let dataRequest = DataRequest(
            method: request.method.rawValue, url: url,
            headers: request.headers.map { ($0.name.rawName, $0.value) }, body: body)
        let dataContext = DataService.Context(
            user: user.name, role: user.role, address: context.clientAddress, serviceRoot: issuer.value + "/odata/",
            version: version)
        let (response, entries) = await service.execute(dataRequest, context: dataContext)
        for entry in entries { try await audit.record(entry) }
        return Self.httpResponse(response, version: version)
    }

    static func httpResponse(_ response: DataResponse, version: ODataVersion) -> Response {
        var headers: HTTPFields = [.odataVersion: version.rawValue]
        for (name, value) in response.headers {
            if let field = HTTPField.Name(name) { headers[field] = value }
        }
        let status = HTTPResponse.Status(code: response.status)
        switch response.body {
        case .none:
            return Response(status: status, headers: headers)
        case .json(let json):
            headers[.contentType] = "application/json; odata.metadata=minimal"
            return Response(
                status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: json.serialized)))
        case .text(let text, let contentType):
            headers[.contentType] = contentType
            return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
        }
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
