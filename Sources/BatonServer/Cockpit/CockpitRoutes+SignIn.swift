import BatonOData
import Crypto
import Foundation
import Hummingbird

extension CockpitRoutes {
    // MARK: Sign-in

    /// Sends the browser to the authorization endpoint, with a fresh state and PKCE verifier sealed in a cookie.
    func startSignIn() throws -> Response {
        let state = randomSecret()
        let verifier = randomSecret() + randomSecret()
        let expires = clock.now().timeIntervalSince1970 + Self.signInWindow
        let sealed = try AES.GCM.seal(
            Data("\(state) \(verifier) \(Int(expires))".utf8), using: key, authenticating: Data(Self.signInCookie.utf8))
        guard let combined = sealed.combined else {
            throw ServerError(.internalServerError, "InternalError", "Cannot seal the sign-in state.")
        }
        var query = URLComponents()
        query.queryItems = [
            URLQueryItem(name: "response_type", value: "code"),
            URLQueryItem(name: "client_id", value: OAuthClient.cockpit.id),
            URLQueryItem(name: "redirect_uri", value: callbackURL),
            URLQueryItem(name: "state", value: state),
            URLQueryItem(name: "code_challenge", value: PKCE.challenge(for: verifier)),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ]
        var response = CockpitPages.redirect(to: "/oauth/authorize?" + (query.percentEncodedQuery ?? ""))
        response.setCookie(cookie(Self.signInCookie, base64URL(combined), maxAge: Int(Self.signInWindow)))
        return response
    }

    /// The authorization endpoint's redirect: the state must be the one sealed in this browser's cookie, the code
    /// is redeemed with its verifier, and an enabled admin gets a session; anyone else a 403 page.
    func finishSignIn(_ request: Request) async throws -> Response {
        let parameters = request.uri.queryParameters
        let restart = (text: "Sign in again", href: "/admin/sign-in")
        guard let sealed = request.cookies[Self.signInCookie]?.value, let bytes = Data(base64URLEncoded: sealed),
            let box = try? AES.GCM.SealedBox(combined: bytes),
            let opened = try? AES.GCM.open(box, using: key, authenticating: Data(Self.signInCookie.utf8))
        else {
            return CockpitPages.message(
                "Sign-in not started here", "This browser did not start a cockpit sign-in, or it took too long.",
                status: .badRequest, link: restart)
        }
        let fields = String(decoding: opened, as: UTF8.self).split(separator: " ").map(String.init)
        guard fields.count == 3, let expires = Double(fields[2]), expires > clock.now().timeIntervalSince1970,
            let state = parameters["state"].map(String.init), state == fields[0],
            let code = parameters["code"].map(String.init), !code.isEmpty
        else {
            var response = CockpitPages.message(
                "Sign-in failed", "The sign-in answer does not belong to this browser's sign-in, or it expired.",
                status: .badRequest, link: restart)
            response.setCookie(expired(Self.signInCookie))
            return response
        }
        let user: String
        do {
            user = try await tokens.redeem(
                code: code, verifier: fields[1], redirectURI: callbackURL, client: .cockpit
            ).user
        } catch let error as OAuthError {
            var response = CockpitPages.message(
                "Sign-in failed", error.description, status: .badRequest, link: restart)
            response.setCookie(expired(Self.signInCookie))
            return response
        }
        guard let account = try await users.user(named: user), account.role == .admin, !account.disabled else {
            var response = CockpitPages.message(
                "Not an administrator",
                "\(user) signed in, but the cockpit is only for users with the admin role. Ask an administrator.",
                status: .forbidden, link: restart)
            response.setCookie(expired(Self.signInCookie))
            return response
        }
        let secret = try await sessions.open(for: user)
        // Not a redirect: when the sign-in went through an identity provider on another site, the browser holds
        // every request of that redirect chain to be cross-site and sends no `SameSite=Strict` cookie on it, so
        // /admin/ would not see the new session. A page that moves on by itself starts a same-site navigation.
        var response = CockpitPages.message(
            "Signed in", "Opening the cockpit…", status: .ok, link: ("Open the cockpit", "/admin/"))
        response.headers[CockpitPages.field("Refresh")] = "0; url=/admin/"
        response.setCookie(expired(Self.signInCookie))
        response.setCookie(cookie(Self.sessionCookie, secret, maxAge: Int(CockpitSessions.lifetime)))
        return response
    }

    /// This server's `/admin/callback`, as registered for ``OAuthClient/cockpit``.
    var callbackURL: String { tokens.issuer.value + "/admin/callback" }

    /// Whether cookies may go without `Secure`: only when the server is reached on loopback over plain HTTP.
    var isLoopback: Bool { tokens.issuer.isLoopbackHTTP }

    /// A cookie of the cockpit: `SameSite=Strict`, except the sign-in's own (``signInCookie``), which must come
    /// back on the top-level redirect from the authorization endpoint, possibly by way of an identity provider on
    /// another site (`Lax`: sent on top-level GETs only).
    func cookie(_ name: String, _ value: String, maxAge: Int) -> Cookie {
        Cookie(
            name: name, value: value, maxAge: maxAge, path: "/admin", secure: !isLoopback, httpOnly: true,
            sameSite: name == Self.signInCookie ? .lax : .strict)
    }

    func expired(_ name: String) -> Cookie {
        cookie(name, "", maxAge: 0)
    }

    /// `POST /admin/sign-out`.
    func signOut(_ request: Request, _ context: BatonRequestContext) async throws -> Response {
        try await changing(request, context) { session, _ in
            if let cookie = request.cookies[Self.sessionCookie]?.value { try await sessions.close(cookie: cookie) }
            var response = CockpitPages.page(
                "message", title: "Signed out",
                values: [
                    "heading": "Signed out", "text": "\(session.displayName) signed out of the cockpit.",
                    "link": ["text": "Sign in again", "href": "/admin/sign-in"],
                ], session: nil)
            response.setCookie(expired(Self.sessionCookie))
            return response
        }
    }
}
