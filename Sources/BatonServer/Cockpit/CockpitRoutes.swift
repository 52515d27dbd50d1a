import BatonOData
import Crypto
import Foundation
import Hummingbird

/// The admin cockpit at `/admin/`: server-rendered pages for the people who run Baton.
///
/// Sign-in is Baton's own authorization code flow with PKCE (the cockpit is the OAuth client `baton-cockpit`,
/// redirected only to this server's `/admin/callback`): the state and verifier travel in a short-lived cookie
/// sealed under a key derived from the master key, so any instance can finish a sign-in another began. The
/// redeemed code opens a ``CockpitSessions`` session (no tokens are issued); only enabled admins get one.
/// Every form that changes something carries the session's CSRF token; cookies are `HttpOnly`,
/// `SameSite=Strict`, path `/admin`, and `Secure` unless the server is reached on loopback.
struct CockpitRoutes: Sendable {
    let tokens: TokenService
    let users: UserDirectory
    let devices: DeviceRegistry
    let settings: SettingsStore
    let audit: AuditLog
    let sessions: CockpitSessions
    let database: ServerDatabase
    let clock: ServerClock
    /// Seals the sign-in cookie.
    let key: SymmetricKey
    /// The identity providers (their own page).
    let providers: IdentityProviders
    /// The data service, for the photos page (`nil` in tests that mount the cockpit alone).
    var data: DataService? = nil

    static let sessionCookie = "baton_cockpit"
    static let signInCookie = "baton_cockpit_sign_in"
    /// How long a sign-in may take, from the cockpit's redirect to the callback.
    static let signInWindow: TimeInterval = 600
    /// Users per page.
    static let pageSize = 25
    /// Devices per page.
    static let devicesPageSize = 50
    /// Backups per page.
    static let backupsPageSize = 50

    /// The cockpit's routes: what each path does is the handler it names (`CockpitRoutes+Users.swift` and the
    /// other page files).
    func add(to router: Router<BatonRequestContext>) {
        addPhotos(to: router)
        router.get("/admin/style.css") { _, _ in Self.stylesheet() }
        router.get("/admin/sign-in") { _, _ in try startSignIn() }
        router.get("/admin/callback") { request, _ in try await finishSignIn(request) }
        router.post("/admin/sign-out") { request, context in try await signOut(request, context) }
        router.get("/admin/") { request, _ in try await showOverview(request) }
        router.get("/admin/users") { request, _ in try await showUsers(request) }
        router.post("/admin/users") { request, context in try await addUser(request, context) }
        router.get("/admin/devices") { request, _ in try await showDevices(request) }
        router.post("/admin/devices/:device/:action") { request, context in try await changeDevice(request, context) }
        router.get("/admin/devices/:device/logs") { request, context in try await showDeviceLogs(request, context) }
        router.get("/admin/backups") { request, _ in try await showBackups(request) }
        router.get("/admin/backups/:id") { request, context in try await showBackup(request, context) }
        router.get("/admin/backups/:id/download") { request, context in try await downloadBackup(request, context) }
        router.get("/admin/settings") { request, _ in try await showSettings(request) }
        router.post("/admin/settings") { request, context in try await changeSetting(request, context) }
        router.get("/admin/identity-providers") { request, _ in try await showProviders(request) }
        router.post("/admin/identity-providers") { request, context in try await addProvider(request, context) }
        router.post("/admin/identity-providers/:name/remove") { request, context in
            try await removeProvider(request, context)
        }
        router.get("/admin/audit") { request, _ in try await showAudit(request) }
        router.get("/admin/audit.csv") { request, _ in try await downloadAudit(request) }
        router.post("/admin/users/:name/:action") { request, context in try await changeUser(request, context) }
    }
}
