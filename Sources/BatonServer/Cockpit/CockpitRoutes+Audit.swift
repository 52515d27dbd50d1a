import BatonOData
import Crypto
import Foundation
import Hummingbird

/// The audit page and its CSV download.
extension CockpitRoutes {
    /// `GET /admin/audit`.
    func showAudit(_ request: Request) async throws -> Response {
        try await viewing(request) { session in
            try await auditPage(
                session, filter: AuditFilter(request.uri.queryParameters.map { ($0.key, $0.value) }))
        }
    }

    /// `GET /admin/audit.csv`.
    func downloadAudit(_ request: Request) async throws -> Response {
        try await viewing(request) { _ in
            let filter = AuditFilter(request.uri.queryParameters.map { ($0.key, $0.value) })
            guard filter.problem == nil else {
                return CockpitPages.message(
                    "Audit", filter.problem ?? "", status: .badRequest, link: ("Audit", "/admin/audit"))
            }
            let rows = try await auditRows(filter, limit: Self.csvLimit)
            var fields = CockpitPages.headers
            fields[.contentType] = "text/csv; charset=utf-8"
            fields[.contentDisposition] = "attachment; filename=\"baton-audit.csv\""
            return Response(
                status: .ok, headers: fields, body: .init(byteBuffer: ByteBuffer(string: AuditRow.csv(rows))))
        }
    }
}
