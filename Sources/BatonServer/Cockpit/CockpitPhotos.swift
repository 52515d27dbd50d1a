import BatonOData
import Foundation
import Hummingbird
import NIOCore

/// The cockpit's photos page: the newest photos (or one check's), with who took and who uploaded each, and their
/// thumbnails — the photo's own bytes from this server, scaled by the page (no image decoding on the server; a
/// HEIC, which browsers do not show, is a link), under the cockpit's Content-Security-Policy.
extension CockpitRoutes {
    static let photosPageSize = 50

    func addPhotos(to router: Router<BatonRequestContext>) {
        router.get("/admin/photos") { request, _ in
            try await viewing(request) { session in
                let check = request.uri.queryParameters["check"].map(String.init).flatMap(UUID.init(uuidString:))
                var values: [String: Any] = [:]
                if let check { values["check"] = check.uuidString.lowercased() }
                guard let photos = try await photos(check: check) else {
                    values["noPhotos"] = true
                    return CockpitPages.page("photos", title: "Photos", values: values, session: session)
                }
                values["rows"] = photos.map { photo -> [String: Any] in
                    func text(_ name: String) -> String {
                        guard let value = photo[name], !value.isNull else { return "—" }
                        if case .string(let text) = value { return text }
                        return value.urlLiteral
                    }
                    let id = text("ID")
                    var row: [String: Any] = [
                        "id": id, "check": text("CheckID"), "takenAt": text("TakenAt"), "takenBy": text("TakenBy"),
                        "uploadedBy": text("UploadedBy"), "caption": text("Caption"), "size": text("Size"),
                        "sha": String(text("SHA256").prefix(12)), "image": "/admin/photos/\(id)/image",
                    ]
                    if text("ContentType") != ImageKind.heic.rawValue { row["shown"] = true }
                    return row
                }
                return CockpitPages.page("photos", title: "Photos", values: values, session: session)
            }
        }
        router.get("/admin/photos/:id/image") { request, context in
            try await viewing(request) { _ in
                guard let id = context.parameters.get("id").flatMap(UUID.init(uuidString:)),
                    let photo = try await photo(id),
                    case .string(let sha256)? = photo["SHA256"], case .string(let type)? = photo["ContentType"],
                    let kind = ImageKind(contentType: type), let media = data?.media,
                    let reader = try? await media.open(sha256)
                else {
                    return CockpitPages.message(
                        "No such photo", "There is no photo with that id, or its bytes are missing.",
                        status: .notFound, link: ("Photos", "/admin/photos"))
                }
                var fields = CockpitPages.headers
                fields[.contentType] = kind.rawValue
                fields[.contentDisposition] =
                    "inline; filename=\"\(id.uuidString.lowercased()).\(kind.fileExtension)\""
                return Response(
                    status: .ok, headers: fields,
                    body: ResponseBody { writer in
                        try await reader.forEachPart { try await writer.write(ByteBuffer(bytes: $0)) }
                        try await writer.finish(nil)
                    })
            }
        }
    }

    /// The newest photos, or a check's; `nil` when the model has no `CheckPhotos`.
    func photos(check: UUID?) async throws -> [[String: PrimitiveValue]]? {
        guard let data, data.model.entitySet(named: "CheckPhotos") != nil else { return nil }
        var url = "CheckPhotos?$orderby=TakenAt%20desc&$top=\(Self.photosPageSize)"
        if let check { url += "&$filter=CheckID%20eq%20\(check.uuidString.lowercased())" }
        return try await read(url, in: data)
    }

    func photo(_ id: UUID) async throws -> [String: PrimitiveValue]? {
        guard let data, data.model.entitySet(named: "CheckPhotos") != nil else { return nil }
        return try await read("CheckPhotos(\(id.uuidString.lowercased()))", in: data)?.first
    }

    /// The entities at `url`, read as the data service reads them (as an admin: every entity).
    func read(_ url: String, in data: DataService) async throws -> [[String: PrimitiveValue]]? {
        let parsed = try data.parse(url)
        return try await data.store.storage.read { db in
            let target = try await data.resolve(parsed, in: db)
            return try await data.fetch(target, options: parsed.query, in: db).map(\.values)
        }
    }
}
