import BatonOData
import Crypto
import Foundation
import Hummingbird

/// The backups page: discarded changes devices sent, listed, read and downloaded (each read audited).
extension CockpitRoutes {
    /// `GET /admin/backups`.
    func showBackups(_ request: Request) async throws -> Response {
        try await viewing(request) { session in
            let query = request.uri.queryParameters
            let search = query["q"].map { $0.prefix(scalars: 128) } ?? ""
            let before = query["before"].flatMap { Int64(String($0)) }.flatMap { $0 > 0 ? $0 : nil }
            var shown = try await devices.discardedChanges(
                search: search, before: before, limit: Self.backupsPageSize + 1)
            var values: [String: Any] = ["query": search]
            func link(before: Int64?) -> String {
                CockpitPages.link("/admin/backups", [("q", search), ("before", before.map(String.init))])
            }
            if shown.count > Self.backupsPageSize {
                shown.removeLast()
                values["older"] = link(before: shown.last?.id)
            }
            if before != nil { values["newest"] = link(before: nil) }
            let formatter = ISO8601DateFormatter()
            values["rows"] = shown.map {
                [
                    "id": $0.id, "device": $0.device, "author": $0.author, "uploader": $0.uploader,
                    "count": $0.count, "received": formatter.string(from: $0.receivedAt),
                ] as [String: Any]
            }
            return CockpitPages.page("backups", title: "Discarded changes", values: values, session: session)
        }
    }

    /// `GET /admin/backups/:id`.
    func showBackup(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await viewing(request) { session in
            try await withOpenedBackup(session, context, audited: "backup-read") { id, opened in
                CockpitPages.page(
                    "backup", title: "Backup \(id)", values: ["id": id, "text": Self.readable(opened)],
                    session: session)
            }
        }
    }

    /// `GET /admin/backups/:id/download`.
    func downloadBackup(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await viewing(request) { session in
            try await withOpenedBackup(session, context, audited: "backup-downloaded") { id, opened in
                var fields = CockpitPages.headers
                fields[.contentType] = "application/json"
                fields[.contentDisposition] = "attachment; filename=\"baton-discarded-\(id).json\""
                return Response(status: .ok, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: opened)))
            }
        }
    }
}
