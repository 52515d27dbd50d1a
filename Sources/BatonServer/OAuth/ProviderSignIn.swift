import BatonOData
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// A sign-in through an identity provider, from the browser's point of view: what the sign-in page started, sealed
/// in a cookie of that browser until the provider sends the person back.
struct PendingProviderSignIn: Codable, Sendable {
    /// The provider it was started with (the callback must be that provider's).
    var provider: String
    var state: String
    var nonce: String
    var verifier: String
    /// Seconds since 1970 after which the answer is refused.
    var expires: Double
    /// The authorization request to finish (the cockpit's or a third-party client's), or …
    var authorize: [String: String]?
    /// … the device code the person is letting in (RFC 8628).
    var userCode: String?
}

/// A person signed in through a provider who may now allow (or deny) a device's code: sealed into the page that
/// asks them, so that only that page's form can decide, once, within five minutes. Nothing decides a code without
/// the person's click: a provider that signs a returning person in silently would otherwise let any web page
/// allow an attacker's tablet code as them.
struct DeviceAllowTicket: Codable, Sendable {
    var provider: String
    /// The provider's issuer when the person signed in: a provider removed or registered again since decides nothing.
    var issuer: String
    var user: String
    var userCode: String
    var expires: Double
}

/// OpenID Connect 1.0 sign-in on Baton's pages (the authorization endpoint's and the device page): the
/// authorization code flow with PKCE (S256), `state` bound to this browser by a sealed `HttpOnly`,
/// `SameSite=Lax` cookie, a `nonce`, RFC 9207's `iss` check, one redirect URI per provider (no mix-up), and each
/// state used once.
extension OAuthRoutes {
    static let providerCookie = "baton_idp"
    /// How long a person has at the provider: 10 minutes.
    static let providerWindow: TimeInterval = 600

    func addProviderSignIn(to router: Router<BatonRequestContext>) {
        router.post("/oauth/idp/:provider/start") { request, context in
            let form = try await FormBody.read(request, context: context)
            return try await startProviderSignIn(
                provider: context.parameters.get("provider") ?? "", form: form, request: request, context: context)
        }
        router.get("/oauth/idp/:provider/callback") { request, context in
            try await finishProviderSignIn(
                provider: context.parameters.get("provider") ?? "", request: request, context: context)
        }
        router.post("/oauth/idp/:provider/allow") { request, context in
            let form = try await FormBody.read(request, context: context)
            return try await decideDevice(
                provider: context.parameters.get("provider") ?? "", form: form, context: context)
        }
    }

    /// From a sign-in page's provider button to the provider: the page's request is checked first (a bad
    /// authorization request or device code never leaves Baton), then the browser gets its sealed cookie and
    /// goes to the provider's authorization endpoint.
    func startProviderSignIn(
        provider name: String, form: FormBody, request: Request, context: BatonRequestContext
    ) async throws -> Response {
        // Only Baton's own pages start a sign-in: a form another site posts (to lead a person with a provider
        // session to an "Allow the tablet?" page for an attacker's code, or through a client's authorization
        // without a page of Baton's) is refused. Browsers say where a form came from (Fetch Metadata, Origin).
        if let site = request.headers[CockpitPages.field("Sec-Fetch-Site")], !["same-origin", "none"].contains(site) {
            return page(
                .forbidden, "Start from Baton's page", "Open the sign-in page of Baton and press the button there.")
        }
        if let origin = request.headers[CockpitPages.field("Origin")], origin != Self.origin(of: tokens.issuer.value) {
            return page(
                .forbidden, "Start from Baton's page", "Open the sign-in page of Baton and press the button there.")
        }
        guard let provider = try await providers.provider(named: name) else {
            return page(.notFound, "Unknown identity provider", "There is no identity provider by that name here.")
        }
        var pending = PendingProviderSignIn(
            provider: provider.name, state: randomSecret(), nonce: randomSecret(),
            verifier: randomSecret() + randomSecret(),
            expires: tokens.clock.now().timeIntervalSince1970 + Self.providerWindow)
        if let code = form["user_code"] {
            let counters = tokens.throttle.deviceCodeCounters(
                network: DeviceAuthorizations.network(of: context.clientAddress))
            if let wait = try await tokens.throttle.retryAfter([counters.wrongCodes]) {
                var response = page(
                    .tooManyRequests, "Too many codes", "Too many codes tried. Try again in \(wait) seconds.",
                    back: "/oauth/device")
                response.headers[.retryAfter] = String(wait)
                return response
            }
            guard let typed = DeviceAuthorizations.normalized(code),
                try await tokens.deviceAuthorizations.isPending(userCode: typed)
            else {
                try await tokens.throttle.recordFailure(keys: [counters.wrongCodes.key])
                return page(
                    .badRequest, "Unknown code",
                    "This code is unknown, expired or used; start the sign-in on the device again.",
                    back: "/oauth/device")
            }
            pending.userCode = typed
        } else {
            _ = try authorizationRequest(form.values)
            pending.authorize = form.values.filter { LoginPage.carried.contains($0.key) }
        }
        let metadata: ProviderMetadata
        do { metadata = try await relyingParty.metadata(for: provider) } catch {
            return page(.badGateway, "Sign-in with \(provider.displayName) failed", error.description, back: nil)
        }
        var query = URLComponents(string: metadata.authorizationEndpoint)
        var items = query?.queryItems ?? []
        items += [
            URLQueryItem(name: "response_type", value: "code"),
            URLQueryItem(name: "client_id", value: provider.clientID),
            URLQueryItem(name: "redirect_uri", value: provider.callbackURL(issuer: tokens.issuer.value)),
            URLQueryItem(name: "scope", value: "openid profile email"),
            URLQueryItem(name: "state", value: pending.state),
            URLQueryItem(name: "nonce", value: pending.nonce),
            URLQueryItem(name: "code_challenge", value: PKCE.challenge(for: pending.verifier)),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ]
        query?.queryItems = items
        guard let location = query?.string else {
            return page(.badGateway, "Sign-in failed", "The provider's authorization endpoint is not a URL.")
        }
        var response = Response(status: .seeOther, headers: [.location: location, .cacheControl: "no-store"])
        response.setCookie(
            Cookie(
                name: Self.providerCookie, value: try seal(pending), maxAge: Int(Self.providerWindow),
                path: "/oauth/idp/", secure: !tokens.issuer.isLoopbackHTTP, httpOnly: true, sameSite: .lax))
        return response
    }

    /// The provider's answer: it must belong to this browser's sign-in (sealed cookie, same provider, same state,
    /// not expired, not used before), come from the provider's issuer (RFC 9207), and its code must redeem for an
    /// ID token that validates. Then the page's request is finished as the person it names.
    func finishProviderSignIn(provider name: String, request: Request, context: BatonRequestContext) async throws
        -> Response
    {
        let parameters = request.uri.queryParameters
        let now = tokens.clock.now()
        var refused: Response {
            var response = page(
                .badRequest, "Sign-in not recognised",
                "This answer does not belong to a sign-in this browser started here, or it took too long. Start again from the sign-in page.",
                back: nil)
            response.setCookie(expiredProviderCookie)
            return response
        }
        guard let sealed = request.cookies[Self.providerCookie]?.value,
            let pending = open(sealed, as: PendingProviderSignIn.self),
            pending.provider == name, pending.expires > now.timeIntervalSince1970,
            let state = parameters["state"].map(String.init),
            sameSecret(state, pending.state)
        else {
            metrics.signIn(method: "provider", result: "invalid_state")
            return refused
        }
        guard let provider = try await providers.provider(named: name) else { return refused }
        let back = pending.userCode == nil ? nil : "/oauth/device"
        /// `countedAs`: what the audit log counts the failure under, per network and minute (the reason, unless
        /// it carries text the caller chose): answers anyone can send never grow the log faster than that.
        func failed(_ reason: String, status: HTTPResponse.Status = .badRequest, countedAs: String? = nil)
            async throws -> Response
        {
            metrics.signIn(method: "provider", result: "refused")
            let entry = AuditEntry(
                at: now, actor: nil, action: "sign-in-failed", subject: nil, address: context.clientAddress,
                detail: "through \(provider.name): \(reason)")
            let key = AuditLog.countingKey(
                [
                    entry.action, provider.name, DeviceAuthorizations.network(of: context.clientAddress),
                    countedAs ?? reason,
                ],
                at: now)
            try await tokens.audit.recordAggregated([(entry, key)])
            var response = page(status, "Sign-in with \(provider.displayName) failed", reason, back: back)
            response.setCookie(expiredProviderCookie)
            return response
        }
        // Each state once: a replayed answer (with its cookie) is refused even within the window.
        guard try await useOnce(state: state, expires: pending.expires) else { return refused }
        if let error = parameters["error"].map(String.init) {
            return try await failed(
                "\(provider.displayName) did not sign you in (\(error.printableASCII)).",
                status: .forbidden, countedAs: "the provider answered an error")
        }
        let metadata: ProviderMetadata
        do { metadata = try await relyingParty.metadata(for: provider) } catch {
            return try await failed(error.description, status: .badGateway)
        }
        // RFC 9207 §2.4: an `iss` that is not this provider's is a mix-up; a provider that promises `iss` must
        // send it.
        if let iss = parameters["iss"].map(String.init) {
            guard iss == provider.issuer else {
                return try await failed("The answer names another issuer than \(provider.displayName).")
            }
        } else if metadata.sendsIssuer == true {
            return try await failed("\(provider.displayName) promises to name itself in its answer and did not.")
        }
        guard let code = parameters["code"].map(String.init), (1...2_048).contains(code.utf8.count) else {
            return try await failed("The answer carries no sign-in code.")
        }
        let claims: IDTokenClaims
        do {
            let secret = try await providers.clientSecret(of: provider.name)
            let idToken = try await relyingParty.redeem(
                code: code, verifier: pending.verifier, redirectURI: provider.callbackURL(issuer: tokens.issuer.value),
                provider: provider, secret: secret)
            claims = try await relyingParty.validate(idToken, provider: provider, nonce: pending.nonce)
        } catch let error as OpenIDError {
            return try await failed(error.description)
        }
        let user: User
        switch try await tokens.users.signIn(through: provider, claims: claims) {
        case .refused(let reason):
            return try await failed(reason, status: .forbidden)
        case .signedIn(let signedIn, let created, let roleChanged):
            user = signedIn
            var entries: [AuditEntry] = []
            let actor = "\(provider.name) (identity provider)"
            if created {
                entries.append(
                    AuditEntry(
                        at: now, actor: actor, action: "user-added", subject: user.name, address: context.clientAddress,
                        detail: "first sign-in, role \(user.role.rawValue)"))
            }
            if let roleChanged {
                entries.append(
                    AuditEntry(
                        at: now, actor: actor, action: "user-role-changed", subject: user.name,
                        address: context.clientAddress,
                        detail: "role \(roleChanged.rawValue), from the provider's groups"))
            }
            let client = pending.authorize?["client_id"] ?? OAuthClient.device.id
            entries.append(
                AuditEntry(
                    at: now, actor: user.name, action: "sign-in", subject: user.name, address: context.clientAddress,
                    detail: "client \(client), through \(provider.name)"))
            try await tokens.audit.record(contentsOf: entries)
            metrics.signIn(method: "provider", result: "success")
        }
        var response: Response
        if let userCode = pending.userCode {
            let ticket = DeviceAllowTicket(
                provider: provider.name, issuer: provider.issuer, user: user.name, userCode: userCode,
                expires: now.timeIntervalSince1970 + Self.allowWindow)
            response = html(
                DevicePage.confirm(
                    user: user, code: DeviceAuthorizations.display(userCode), provider: provider,
                    ticket: try seal(ticket, purpose: Self.allowPurpose)))
        } else {
            // The request was checked at the start; it is checked again (a client's registration may have changed).
            let parameters = pending.authorize ?? [:]
            response = try await redirect(
                with: user, for: try authorizationRequest(parameters), state: parameters["state"])
        }
        response.setCookie(expiredProviderCookie)
        return response
    }

    /// Records a state as used; `false` when it was used already.
    func useOnce(state: String, expires: Double) async throws -> Bool {
        let now = tokens.clock.now().timeIntervalSince1970
        do {
            try await tokens.database.storage.write { db in
                try await db.execute("DELETE FROM openIDStates WHERE expiresAt < ?", now)
                try await db.execute(
                    "INSERT INTO openIDStates (hash, expiresAt) VALUES (?, ?)", secretHash(state), expires)
            }
            return true
        } catch let error as StorageError where error.kind == .uniqueViolation {
            return false
        }
    }

    /// `scheme://host[:port]` of a URL, as browsers send it in `Origin`.
    static func origin(of url: String) -> String? {
        guard let components = URLComponents(string: url), let scheme = components.scheme, let host = components.host
        else { return nil }
        return "\(scheme)://\(host)\(components.port.map { ":\($0)" } ?? "")"
    }

    /// How long the page that asks "allow this tablet?" stays good: 5 minutes.
    static let allowWindow: TimeInterval = 300
    static let allowPurpose = "baton_idp_allow"

    /// The person's click on the page that asks whether to let the tablet in: the sealed ticket names who signed
    /// in and which code; the code is decided once (a second click finds it decided).
    func decideDevice(provider name: String, form: FormBody, context: BatonRequestContext) async throws -> Response {
        let now = tokens.clock.now()
        guard let sealed = form["ticket"],
            let ticket = open(sealed, as: DeviceAllowTicket.self, purpose: Self.allowPurpose),
            ticket.provider == name, ticket.expires > now.timeIntervalSince1970,
            try await providers.provider(named: name)?.issuer == ticket.issuer,
            let user = try await tokens.users.user(named: ticket.user), !user.disabled,
            user.identityProvider == name
        else {
            return page(
                .badRequest, "Not allowed",
                "This page is too old or was not made for you. Start the sign-in on the device again.",
                back: "/oauth/device")
        }
        let allowing = form["action"] == "allow"
        guard
            try await tokens.deviceAuthorizations.decide(
                userCode: ticket.userCode, approvedBy: allowing ? user.name : nil)
        else {
            return page(
                .badRequest, "Unknown code",
                "This code is unknown, expired or used; start the sign-in on the device again.", back: "/oauth/device")
        }
        try await tokens.audit.record(
            AuditEntry(
                at: now, actor: user.name, action: allowing ? "device-sign-in-allowed" : "device-sign-in-denied",
                subject: user.name, address: context.clientAddress,
                detail: "code \(DeviceAuthorizations.display(ticket.userCode)), through \(name)"))
        return html(
            DevicePage.done(
                allowing
                    ? "Signed in as \(user.displayName). Go back to the device: it continues by itself."
                    : "The sign-in was denied. The device shows that it was refused."))
    }

    /// `value` sealed (AES-GCM under the sign-in key) for one `purpose`, base64url: a cookie or a form field
    /// nobody can read or forge.
    func seal<Value: Encodable>(_ value: Value, purpose: String = providerCookie) throws -> String {
        guard
            let combined = try AES.GCM.seal(
                try JSONEncoder().encode(value), using: sealKey, authenticating: Data(purpose.utf8)
            ).combined
        else { throw ServerError(.internalServerError, "InternalError", "Cannot seal the sign-in state.") }
        return base64URL(combined)
    }

    /// What ``seal(_:purpose:)`` sealed for `purpose`, or `nil` for anything else.
    func open<Value: Decodable>(_ sealed: String, as type: Value.Type, purpose: String = providerCookie) -> Value? {
        guard sealed.utf8.count <= 8_192, let bytes = Data(base64URLEncoded: sealed),
            let box = try? AES.GCM.SealedBox(combined: bytes),
            let opened = try? AES.GCM.open(box, using: sealKey, authenticating: Data(purpose.utf8))
        else { return nil }
        return try? JSONDecoder().decode(type, from: opened)
    }

    var expiredProviderCookie: Cookie {
        Cookie(
            name: Self.providerCookie, value: "", maxAge: 0, path: "/oauth/idp/", secure: !tokens.issuer.isLoopbackHTTP,
            httpOnly: true, sameSite: .lax)
    }

    func page(_ status: HTTPResponse.Status, _ title: String, _ text: String, back: String? = nil) -> Response {
        var response = html(ProviderPage.html(title: title, text: text, back: back))
        response.status = status
        return response
    }

}
