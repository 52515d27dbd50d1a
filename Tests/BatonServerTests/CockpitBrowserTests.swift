import BatonServer
import BatonTestSupport
import BatonTesting
import Crypto
import Foundation
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The admin cockpit in a real browser: Debian's `chromium` driven through `chromium-driver` by Selenium
/// (`Interop/cockpit_browser.py`), against a real server on loopback. The script signs in through the
/// authorization code flow, adds, searches, re-roles, resets, disables and deletes users, tries bad input, forms
/// without their CSRF token, the last admin, a signed-out session's cookie and a non-admin, and saves a
/// screenshot of each page.
// 25 minutes: the limit counts the wait for the interactive slot (the terminal app's handover holds it for up to
// 10 minutes within the whole suite).
@Suite(.serverSlot, .timeLimit(.minutes(25)), .interactiveSlot, .serialized) struct CockpitBrowserTests {
    /// On both engines: the cockpit is built on the storage seam, so every instance on PostgreSQL serves it.
    @Test(arguments: StorageBackend.allCases) func anAdminRunsBatonFromTheBrowserAndOthersAreKeptOut(
        backend: StorageBackend
    ) async throws {
        for program in ["/usr/bin/chromium", "/usr/bin/chromedriver"] {
            try #require(
                FileManager.default.isExecutableFile(atPath: program),
                "\(program) is missing. Run scripts/test, the README's test command: it installs chromium and chromium-driver."
            )
        }
        let missing = try await offThePool { TestPython.missing(["selenium", "requests", "cryptography"]) }
        try #require(missing == nil, "\(missing ?? "")")
        let server = try await LiveServer.start(database: try await backend.freshDatabase())
        defer { Task { await server.stop() } }
        let adminPassword = "harbour-lantern-7391"
        let staffPassword = "ground-staff-password-1"
        try await server.addUser("admin", displayName: "Ada Admin", role: .admin, password: adminPassword)
        try await server.addUser("bob", displayName: "Bob B.", password: staffPassword)
        try await server.addUser("dana", displayName: "Dana D.", password: staffPassword)
        // Bob's tablet, registered as the app does it (a device key approves his signing key).
        var tokenRequest = URLRequest(url: server.url.appendingPathComponent("oauth/token"))
        tokenRequest.httpMethod = "POST"
        tokenRequest.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        tokenRequest.httpBody = Data(
            "grant_type=password&client_id=baton-device&username=bob&password=\(staffPassword)".utf8)
        let (tokenData, _) = try await URLSession.shared.data(for: tokenRequest)
        let token = try #require(
            (try JSONSerialization.jsonObject(with: tokenData) as? [String: Any])?["access_token"] as? String)
        var registration = URLRequest(url: server.url.appendingPathComponent("devices/tablet-9/registration"))
        registration.httpMethod = "PUT"
        registration.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        registration.setValue("application/json", forHTTPHeaderField: "Content-Type")
        registration.setValue("2.4.1", forHTTPHeaderField: "Baton-App-Version")
        registration.httpBody = Data(
            DeviceKeys.body(
                device: "tablet-9", token: token,
                publicKey: P256.Signing.PrivateKey().publicKey.x963Representation.base64EncodedString()
            ).utf8)
        let (_, registered) = try await URLSession.shared.data(for: registration)
        #expect((registered as? HTTPURLResponse)?.statusCode == 200)
        // Bob's check and a photo of its left main tyre, for the photos page.
        let checkID = UUID().uuidString.lowercased()
        var check = URLRequest(url: server.url.appendingPathComponent("odata/PreflightChecks"))
        check.httpMethod = "POST"
        check.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        check.setValue("application/json", forHTTPHeaderField: "Content-Type")
        check.httpBody = Data(
            #"{"ID":"\#(checkID)","TailNumber":"D-AIBL","FuelKg":5200,"TyrePressureMainPsi":200,"TyrePressureNosePsi":60,"OilQuarts":15}"#
                .utf8)
        let (_, checked) = try await URLSession.shared.data(for: check)
        #expect((checked as? HTTPURLResponse)?.statusCode == 201)
        var photo = URLRequest(url: server.url.appendingPathComponent("odata/CheckPhotos"))
        photo.httpMethod = "POST"
        photo.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
        photo.setValue("image/png", forHTTPHeaderField: "Content-Type")
        photo.setValue(
            #"{"CheckID":"\#(checkID)","Caption":"left main tyre"}"#.addingPercentEncoding(
                withAllowedCharacters: .alphanumerics), forHTTPHeaderField: "Slug")
        photo.httpBody = Data(ImageFixtures.png())
        let (photoAnswer, photographed) = try await URLSession.shared.data(for: photo)
        #expect(
            (photographed as? HTTPURLResponse)?.statusCode == 201, "\(String(decoding: photoAnswer, as: UTF8.self))")
        // The screenshots of docs/OPERATIONS.md come from the SQLite run.
        let shots =
            (backend == .sqlite ? ProcessInfo.processInfo.environment["BATON_COCKPIT_SCREENSHOTS"] : nil)
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("baton-cockpit-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: shots, withIntermediateDirectories: true)
        let script = try #require(
            Bundle.module.url(forResource: "cockpit_browser", withExtension: "py", subdirectory: "Interop"))
        let result = try await ServerExecutableTests.run(
            TestPython.executable, [script.path, server.url.absoluteString, shots],
            environment: [
                "BATON_ADMIN_PASSWORD": adminPassword, "BATON_STAFF_PASSWORD": staffPassword,
                "BATON_DEVICE_KEY": DeviceKeys.key(for: "tablet-9").rawRepresentation.map { String(format: "%02x", $0) }
                    .joined(),
            ])
        #expect(result.status == 0, "\(result.output)\(result.error)")
        #expect(result.output.contains("cockpit browser checks passed"), "\(result.output)\(result.error)")
        for name in [
            "overview.png", "users.png", "users-390.png", "forbidden.png", "settings.png", "audit.png", "devices.png",
            "backup.png", "sign-in-390.png", "device-390.png", "photos.png",
        ] {
            let data = try Data(contentsOf: URL(fileURLWithPath: shots).appendingPathComponent(name))
            #expect(data.starts(with: [0x89, 0x50, 0x4E, 0x47]) && data.count > 5_000, "\(name) is a PNG screenshot")
        }
        // The audit log and the server's state agree with what the browser did.
        #expect(try await server.server.users.user(named: "casey") == nil)
        #expect(try await server.server.users.user(named: "bob")?.disabled == false)
        #expect(try await server.server.users.user(named: "admin")?.role == .admin)
        #expect(try await server.server.devices.status(device: "tablet-9").map { $0.revoked && $0.wipeOrdered } == true)
    }
}
