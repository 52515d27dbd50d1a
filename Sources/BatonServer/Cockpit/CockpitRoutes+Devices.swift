import BatonOData
import Crypto
import Foundation
import Hummingbird

/// The devices page: list and search, each device's actions (revoke, wipe, request logs), and its logs.
extension CockpitRoutes {
    /// `GET /admin/devices`.
    func showDevices(_ request: Request) async throws -> Response {
        try await viewing(request) { session in
            let query = request.uri.queryParameters
            return try await devicesPage(
                session, search: query["q"].map { $0.prefix(scalars: 128) } ?? "",
                page: max(0, min(100_000, query["page"].flatMap { Int(String($0)) } ?? 0)))
        }
    }

    /// `POST /admin/devices/:device/:action`.
    func changeDevice(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await changing(request, context) { session, _ in
            let device = context.parameters.get("device") ?? ""
            let action = context.parameters.get("action") ?? ""
            do {
                switch action {
                case "revoke":
                    guard try await devices.revoke(device: device) else {
                        return try await devicesPage(session, notice: "\(device) was already revoked.")
                    }
                case "wipe": try await devices.orderWipe(device: device)
                case "request-logs":
                    try await devices.requestLogs(device: device)
                    try await record(session, context, ("device-log-requested", device, nil))
                    return try await devicesPage(
                        session, notice: "Asked \(device) for its log: it comes with the device's next sync.")
                default:
                    return CockpitPages.message(
                        "Not found", "There is no such action.", status: .notFound, session: session,
                        link: ("Devices", "/admin/devices"))
                }
            } catch let error as ServerError {
                return try await devicesPage(session, error: error.message)
            }
            let revoked = action == "revoke"
            try await record(session, context, (revoked ? "device-revoked" : "device-wipe-ordered", device, nil))
            return try await devicesPage(
                session,
                notice: revoked
                    ? "Revoked \(device): the sign-ins it used are revoked, its store key is no longer released "
                        + "and nobody can register on it again."
                    : "Ordered \(device) to wipe itself at its next contact.")
        }
    }

    /// `GET /admin/devices/:device/logs`.
    func showDeviceLogs(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await viewing(request) { session in
            let device = (context.parameters.get("device") ?? "").prefix(scalars: 128)
            let formatter = ISO8601DateFormatter()
            let uploads: [[String: Any]] = try await devices.logs(device: device, limit: 20).map {
                [
                    "id": $0.id, "received": formatter.string(from: $0.receivedAt), "lines": $0.lineCount,
                    "reason": $0.reason, "uploader": $0.uploader, "text": $0.lines.joined(separator: "\n"),
                ]
            }
            let events: [[String: Any]] = try await devices.usage(device: device, limit: 500).reversed().map {
                [
                    "at": formatter.string(from: $0.at), "name": $0.name, "count": $0.count.map(String.init) ?? "",
                    "duration": $0.durationMs.map(String.init) ?? "", "code": $0.code ?? "",
                ]
            }
            return CockpitPages.page(
                "device-logs", title: "Logs of \(device)",
                values: [
                    "device": device, "uploads": uploads, "events": events,
                    "requested": try await devices.logsRequested(device: device),
                ], session: session)
        }
    }
}
