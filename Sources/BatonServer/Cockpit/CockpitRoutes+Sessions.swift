import BatonOData
import Crypto
import Foundation
import Hummingbird

extension CockpitRoutes {
    // MARK: Sessions

    /// Runs `page` for a signed-in admin; anyone else is sent to sign in.
    func viewing(_ request: Request, _ page: (CockpitSessions.Session) async throws -> Response) async throws
        -> Response
    {
        guard let cookie = request.cookies[Self.sessionCookie]?.value,
            let session = try await sessions.session(cookie: cookie)
        else { return CockpitPages.redirect(to: "/admin/sign-in") }
        return try await page(session)
    }

    /// Runs `change` for a signed-in admin whose form carries the session's CSRF token; a form without it
    /// changes nothing (403).
    func changing(
        _ request: Request, _ context: BatonRequestContext,
        _ change: (CockpitSessions.Session, FormBody) async throws -> Response
    ) async throws -> Response {
        guard let cookie = request.cookies[Self.sessionCookie]?.value,
            let session = try await sessions.session(cookie: cookie)
        else {
            return CockpitPages.message(
                "Signed out", "Your cockpit session has ended; sign in again. Nothing was changed.",
                status: .unauthorized, link: ("Sign in", "/admin/sign-in"))
        }
        // A body that is not a form carries no token either.
        let form = try? await FormBody.read(request, context: context)
        guard let form, CockpitSessions.isCSRFToken(form["csrf"], of: session) else {
            return CockpitPages.message(
                "Refused",
                "The form did not carry this session's security token (reload the page and try again). "
                    + "Nothing was changed.", status: .forbidden, session: session, link: ("Overview", "/admin/"))
        }
        return try await change(session, form)
    }

    /// Runs an admin action and shows the users page with its outcome: the success notice, or the server's
    /// message for a refused change (nothing changed).
    func acting(
        _ session: CockpitSessions.Session, _ context: BatonRequestContext, success: String,
        audited: (action: String, subject: String, detail: String?), _ action: () async throws -> Void
    ) async throws -> Response {
        do {
            try await action()
        } catch let error as ServerError {
            return try await usersPage(session, error: error.message)
        }
        try await record(session, context, audited)
        return try await usersPage(session, notice: success)
    }

    /// Records what an admin did in the cockpit.
    func record(
        _ session: CockpitSessions.Session, _ context: BatonRequestContext,
        _ entry: (action: String, subject: String, detail: String?)
    ) async throws {
        try await audit.record(
            AuditEntry(
                at: clock.now(), actor: session.user, action: entry.action, subject: entry.subject,
                address: context.clientAddress, detail: entry.detail.map { "\($0) (cockpit)" } ?? "cockpit"))
    }
}
