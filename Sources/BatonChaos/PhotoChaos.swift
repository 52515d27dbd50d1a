import BatonClient
import BatonOData
import BatonOffline
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation

/// Photos in the chaos runs: taken offline beside the checks, uploaded resumably through the same faults, and
/// checked on the server — every photo once, by its author, uploaded by whoever synced it, its bytes those the
/// device took (SHA-256 of what `$value` serves).
extension Tablet {
    /// Takes a photo of the check `checkID` (the current user's) with `size` bytes of scan data, and tells the
    /// checker.
    func takePhoto(of checkID: UUID, size: Int, by user: String, checker: inout InvariantChecker) async throws {
        let id = try await store.takePhoto(
            ImageFixtures.jpeg(scanBytes: size),
            values: ["CheckID": .guid(checkID), "Caption": .string("\(checker.run) photo")])
        try await checker.tookPhoto(id, by: user, in: store)
    }
}

extension InvariantChecker {
    /// A photo a device took: its SHA-256 as the device keeps it (after the location was removed).
    mutating func tookPhoto(_ id: String, by user: String, in store: OfflineStore) async throws {
        guard case .string(let sha256)? = try await store.read(id).first?.values["SHA256"] else {
            throw ChaosFailure("The device does not have the photo \(id) it just took.")
        }
        photos[id] = (user, sha256)
    }

    /// Reads every photo of the run from the server (not through the proxy) and its bytes, and compares.
    func checkPhotos(server: LiveServer, token: String, created: [String: Int], into report: inout ChaosReport)
        async throws
    {
        guard !photos.isEmpty else { return }
        report.photosChecked = photos.count
        let root = server.url.absoluteString + "/odata/"
        let transport = AsyncHTTPClientTransport()
        let authorization = ("Authorization", "Bearer \(token)")
        let filter = "Caption eq '\(run) photo'".addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
        var onServer: [String: JSONValue] = [:]
        var next: String? = root + "CheckPhotos?$filter=\(filter)&$select=ID,TakenBy,UploadedBy,SHA256"
        while let link = next, let url = URL(string: link) {
            let response = try await transport.send(
                ClientRequest(url: url, headers: [authorization, ("Accept", "application/json")]))
            guard response.status == 200, let json = try? JSONValue(parsing: response.body),
                let rows = json["value"]?.arrayValue
            else { throw ChaosFailure("The server's photos could not be read (HTTP \(response.status)).") }
            for row in rows {
                let id = "CheckPhotos(\(row["ID"]?.stringValue ?? ""))"
                if onServer[id] != nil { report.duplicates += 1 }
                onServer[id] = row
            }
            next = json["@odata.nextLink"]?.stringValue.flatMap { URL(string: $0) }.map {
                root + $0.lastPathComponent + ($0.query.map { "?" + $0 } ?? "")
            }
        }
        report.duplicates += onServer.keys.filter { photos[$0] == nil }.count
        for (id, expected) in photos.sorted(by: { $0.key < $1.key }) {
            guard let row = onServer[id] else {
                report.losses += 1
                report.problems.append("\(id) (a photo) is not on the server")
                continue
            }
            if row["TakenBy"]?.stringValue != expected.author {
                report.problems.append(
                    "\(id): TakenBy \(row["TakenBy"]?.stringValue ?? "-"), expected \(expected.author)")
            }
            if let uploader = uploaders[id], row["UploadedBy"]?.stringValue != uploader {
                report.problems.append(
                    "\(id): UploadedBy \(row["UploadedBy"]?.stringValue ?? "-"), expected \(uploader)")
            }
            if row["SHA256"]?.stringValue != expected.sha256 {
                report.losses += 1
                report.problems.append(
                    "\(id): SHA256 \(row["SHA256"]?.stringValue ?? "-"), expected \(expected.sha256)")
            }
            guard let url = URL(string: root + id + "/$value") else { continue }
            let bytes = try await transport.send(ClientRequest(url: url, headers: [authorization]))
            let served = SHA256.hash(data: bytes.body).map { String(format: "%02x", $0) }.joined()
            if bytes.status != 200 || served != expected.sha256 {
                report.losses += 1
                report.problems.append("\(id): its bytes on the server (HTTP \(bytes.status)) are not the device's")
            }
            let creations = created[id] ?? 0
            if creations != 1 {
                report.problems.append("\(id): \(creations) audit entries of its creation")
                if creations > 1 { report.duplicates += 1 }
            }
        }
    }
}
