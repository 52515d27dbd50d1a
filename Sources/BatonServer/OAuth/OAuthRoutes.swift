import BatonOData
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

/// The authorization server's endpoints: RFC 8414 metadata, JWKS, token, authorization (with its sign-in
/// page), revocation.
struct OAuthRoutes {
    let tokens: TokenService
    let configuration: OAuthConfiguration
    let metrics: ServerMetrics
    let settings: SettingsStore
    /// The identity providers people may sign in through, and Baton's side of OpenID Connect with them.
    let providers: IdentityProviders
    let relyingParty: OpenIDRelyingParty
    /// Seals the browser's cookie of a sign-in through a provider (derived from the master key).
    let sealKey: SymmetricKey

    func add(to router: Router<BatonRequestContext>) {
        router.get("/.well-known/oauth-authorization-server") { _, _ in
            json(metadata)
        }
        router.get("/oauth/jwks") { _, _ in
            let data = try JSONEncoder().encode(try await tokens.jwks())
            return Response(
                status: .ok, headers: [.contentType: "application/json", .cacheControl: "public, max-age=300"],
                body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
        router.post("/oauth/token") { request, context in
            let form = try await FormBody.read(request, context: context)
            let grant = form["grant_type"] ?? ""
            let response: TokenService.TokenResponse
            do {
                try await requireSignInMethod(grant: grant, client: form["client_id"])
                response = try await tokens.grant(form.values, caller: .init(address: context.clientAddress))
            } catch let error as OAuthError {
                count(grant: grant, result: error.error)
                throw error
            }
            count(grant: grant, result: "success")
            let data = try JSONEncoder().encode(response)
            return Response(
                status: .ok, headers: [.contentType: "application/json", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(bytes: data)))
        }
        addDeviceAuthorization(to: router)
        router.post("/oauth/revoke") { request, context in
            let form = try await FormBody.read(request, context: context)
            guard let token = form["token"], !token.isEmpty else {
                throw OAuthError.invalidRequest("The token parameter is missing.")
            }
            guard let client = configuration.client(form["client_id"]) else {
                throw OAuthError.invalidClient("Unknown client_id.")
            }
            try await tokens.revoke(token, clientID: client.id, caller: .init(address: context.clientAddress))
            return Response(status: .ok, headers: [.cacheControl: "no-store"])
        }
        router.get("/oauth/authorize") { request, _ in
            let parameters = Dictionary(request.uri.queryParameters.map { (String($0.key), String($0.value)) }) {
                first, _ in first
            }
            _ = try authorizationRequest(parameters)
            let choices = try await signInChoices()
            return html(LoginPage.html(parameters: parameters, choices: choices), formTargets: choices.formTargets)
        }
        router.post("/oauth/authorize") { request, context in
            let form = try await FormBody.read(request, context: context)
            let authorization = try authorizationRequest(form.values)
            let choices = try await signInChoices()
            let user: User
            switch try await signIn(
                form, clientID: authorization.client.id, method: "sign_in_page", context: context,
                formTargets: choices.formTargets,
                page: { LoginPage.html(parameters: form.values, choices: choices, error: $0) })
            {
            case .signedIn(let signedIn): user = signedIn
            case .refused(let page): return page
            }
            return try await redirect(with: user, for: authorization, state: form["state"])
        }
        addProviderSignIn(to: router)
    }

    /// Ends an authorization request: a code for `user`, sent back to the client's redirect URI with its state.
    func redirect(with user: User, for authorization: AuthorizationRequest, state: String?) async throws -> Response {
        let code = try await tokens.createAuthorizationCode(
            user: user.name, client: authorization.client, redirectURI: authorization.redirectURI,
            challenge: authorization.challenge, scope: authorization.scope)
        var location = URLComponents(string: authorization.redirectURI)
        var items = location?.queryItems ?? []
        items.append(URLQueryItem(name: "code", value: code))
        if let state { items.append(URLQueryItem(name: "state", value: state)) }
        location?.queryItems = items
        return Response(
            status: .found,
            headers: [.location: location?.string ?? authorization.redirectURI, .cacheControl: "no-store"])
    }

    /// What the sign-in pages offer: the providers' buttons, and whether Baton's password form is there.
    func signInChoices() async throws -> SignInChoices {
        let list = try await providers.list()
        var origins: [String] = []
        for provider in list {
            // The authorization endpoint's origin as last discovered, else the issuer's: rendering a page never
            // waits on a provider.
            let endpoint = relyingParty.cachedMetadata(for: provider)?.authorizationEndpoint ?? provider.issuer
            // Only a DNS name or an IP literal goes into the policy (a `*` would open form-action to every host).
            if let url = URLComponents(string: endpoint), let scheme = url.scheme, ["http", "https"].contains(scheme),
                let host = url.host, !host.isEmpty,
                host.utf8.allSatisfy({
                    (0x61...0x7A).contains($0) || (0x41...0x5A).contains($0) || (0x30...0x39).contains($0)
                        || [0x2E, 0x2D, 0x3A, 0x5B, 0x5D].contains($0)
                })
            {
                origins.append("\(scheme)://\(host)\(url.port.map { ":\($0)" } ?? "")")
            }
        }
        return SignInChoices(
            providers: list.map { ($0.name, $0.displayName) },
            localPasswords: try await settings.current().signIn.localPasswords, formTargets: origins)
    }

    /// The server's `sign-in.methods` decide how the device app signs people in: a password typed into the app,
    /// or a browser elsewhere (the device authorization grant).
    func requireSignInMethod(grant: String, client: String?) async throws {
        if grant == "password", try await !settings.current().signIn.localPasswords {
            throw OAuthError(
                "unauthorized_client",
                "This server takes no Baton passwords: people sign in through their identity provider (device code).")
        }
        guard client == OAuthClient.device.id else { return }
        let method: String
        switch grant {
        case "password": method = "password"
        case DeviceAuthorizations.grantType: method = "device"
        default: return
        }
        guard try await settings.current().signIn.methods.contains(method) else {
            throw OAuthError(
                "unauthorized_client",
                method == "password"
                    ? "This server does not take passwords typed into devices; sign in through a browser (device code)."
                    : "This server does not allow sign-in through a browser for devices.")
        }
    }

    /// RFC 8628: `POST /oauth/device_authorization` for the device, and the verification page where the person
    /// enters the user code, signs in and approves (or denies).
    func addDeviceAuthorization(to router: Router<BatonRequestContext>) {
        router.post("/oauth/device_authorization") { request, context in
            let form = try await FormBody.read(request, context: context)
            guard let client = configuration.client(form["client_id"]),
                client.grants.contains(DeviceAuthorizations.grantType)
            else { throw OAuthError.invalidClient("Unknown client_id, or the client may not use device codes.") }
            try await requireSignInMethod(grant: DeviceAuthorizations.grantType, client: client.id)
            let scope = try tokens.requestedScope(form["scope"])
            let started = try await tokens.deviceAuthorizations.start(
                client: client.id, scope: scope,
                addressKey: tokens.throttle.addressKey(DeviceAuthorizations.network(of: context.clientAddress)),
                limits: configuration.deviceCodes)
            let page = "\(tokens.issuer.value)/oauth/device"
            var response = json(
                .object([
                    ("device_code", .string(started.deviceCode)), ("user_code", .string(started.userCode)),
                    ("verification_uri", .string(page)),
                    ("verification_uri_complete", .string("\(page)?user_code=\(started.userCode)")),
                    ("expires_in", .number(String(started.expiresIn))), ("interval", .number(String(started.interval))),
                ]))
            response.headers[.cacheControl] = "no-store"
            return response
        }
        router.get("/oauth/device") { request, _ in
            let choices = try await signInChoices()
            return html(
                DevicePage.html(
                    userCode: request.uri.queryParameters["user_code"].map(String.init) ?? "", choices: choices),
                formTargets: choices.formTargets)
        }
        router.post("/oauth/device") { request, context in
            let form = try await FormBody.read(request, context: context)
            let code = form["user_code"] ?? ""
            let address = context.clientAddress
            let denying = form["action"] == "deny"
            let choices = try await signInChoices()
            // Codes are guessed from an address, not an account: an unknown or expired code counts against the
            // network it came from (an IPv6 /64 as one) as a failed sign-in does, so guessing is as slow as
            // guessing passwords (RFC 8628 §5.1), and denials are bounded the same way. Nothing is counted under a
            // name every address shares: others' guesses never keep a person with a good code off the page.
            let counters = tokens.throttle.deviceCodeCounters(network: DeviceAuthorizations.network(of: address))
            let watched = denying ? [counters.wrongCodes, counters.denials] : [counters.wrongCodes]
            if let wait = try await tokens.throttle.retryAfter(watched) {
                var response = html(
                    DevicePage.html(
                        userCode: code, choices: choices,
                        error: denying
                            ? "Too many codes denied or tried from here. Try again in \(wait) seconds."
                            : "Too many codes tried. Try again in \(wait) seconds."), formTargets: choices.formTargets)
                response.status = .tooManyRequests
                response.headers[.retryAfter] = String(wait)
                return response
            }
            func unknownCode() async throws -> Response {
                try await tokens.throttle.recordFailure(keys: [counters.wrongCodes.key])
                var response = html(
                    DevicePage.html(
                        userCode: code, choices: choices,
                        error: "This code is unknown, expired or used; start the sign-in on the device again."),
                    formTargets: choices.formTargets)
                response.status = .badRequest
                return response
            }
            guard let typed = DeviceAuthorizations.normalized(code) else {
                var response = html(
                    DevicePage.html(
                        userCode: code, choices: choices,
                        error: "That is not a code from a device: 8 letters, like BDFH-KLMN."))
                response.status = .badRequest
                return response
            }
            if denying {
                try await tokens.throttle.recordFailure(keys: [counters.denials.key])
                guard try await tokens.deviceAuthorizations.decide(userCode: code, approvedBy: nil) else {
                    return try await unknownCode()
                }
                try await tokens.audit.record(
                    AuditEntry(
                        at: tokens.clock.now(), actor: nil, action: "device-sign-in-denied", subject: nil,
                        address: address, detail: "code \(DeviceAuthorizations.display(typed))"))
                return html(DevicePage.done("The sign-in was denied. The device shows that it was refused."))
            }
            let user: User
            switch try await signIn(
                form, clientID: OAuthClient.device.id, method: "device_page", context: context,
                formTargets: choices.formTargets,
                page: { DevicePage.html(userCode: code, choices: choices, error: $0) })
            {
            case .signedIn(let signedIn): user = signedIn
            case .refused(let page): return page
            }
            guard try await tokens.deviceAuthorizations.decide(userCode: code, approvedBy: user.name) else {
                return try await unknownCode()
            }
            try await tokens.audit.record(
                AuditEntry(
                    at: tokens.clock.now(), actor: user.name, action: "device-sign-in-allowed", subject: user.name,
                    address: address, detail: "code \(DeviceAuthorizations.display(typed))"))
            return html(
                DevicePage.done("Signed in as \(user.displayName). Go back to the device: it continues by itself."))
        }
    }

    enum PageSignIn {
        case signedIn(User)
        /// The page again, with the reason (a wrong password, or too many attempts).
        case refused(Response)
    }

    /// Signs the person in from a page's form, under the sign-in throttle, and counts the outcome.
    func signIn(
        _ form: FormBody, clientID: String, method: String, context: BatonRequestContext, formTargets: [String],
        page: (String) -> String
    ) async throws -> PageSignIn {
        guard try await settings.current().signIn.localPasswords else {
            metrics.signIn(method: method, result: "unauthorized_client")
            var response = html(
                page("This server takes no Baton passwords: sign in with your identity provider's button."),
                formTargets: formTargets)
            response.status = .forbidden
            return .refused(response)
        }
        do {
            let user = try await tokens.signIn(
                name: form["username"] ?? "", password: form["password"] ?? "", clientID: clientID,
                caller: .init(address: context.clientAddress))
            metrics.signIn(method: method, result: "success")
            return .signedIn(user)
        } catch let error as OAuthError where error.error == "invalid_grant" || error.error == "too_many_attempts" {
            metrics.signIn(method: method, result: error.error)
            var response = html(page(error.description), formTargets: formTargets)
            response.status = error.status == .tooManyRequests ? .tooManyRequests : .unauthorized
            return .refused(response)
        }
    }

    struct AuthorizationRequest {
        var client: OAuthClient
        var redirectURI: String
        var challenge: String
        var scope: String
    }

    /// Validates an authorization request. Problems with the client or redirect URI are shown to the user,
    /// never redirected (RFC 6749 §4.1.2.1).
    /// Counts one token-endpoint request: a sign-in when it checked a password, a token grant otherwise.
    func count(grant: String, result: String) {
        if grant == "password" {
            metrics.signIn(method: "password_grant", result: result)
        } else {
            metrics.tokenGrant(grant, result: result)
        }
    }

    func authorizationRequest(_ parameters: [String: String]) throws -> AuthorizationRequest {
        guard let client = configuration.client(parameters["client_id"]), client.grants.contains("authorization_code")
        else {
            throw ServerError.badRequest(
                "Unknown client_id, or the client may not use the authorization code flow.", target: "client_id")
        }
        guard let redirectURI = parameters["redirect_uri"],
            client.accepts(redirectURI: redirectURI, issuer: tokens.issuer.value)
        else {
            throw ServerError.badRequest(
                "redirect_uri is missing or not registered for this client.", target: "redirect_uri")
        }
        // RFC 6749 §4.1.1: `state` is the client's opaque value, sent back unchanged. The page reflects it, so it
        // is refused outside printable ASCII or past 512 bytes rather than carried (RFC 6749 §4.1.2.1 allows 400).
        if let state = parameters["state"], !Self.isAcceptable(state: state) {
            throw ServerError.badRequest(
                "state must be at most 512 printable ASCII characters (U+0020 to U+007E).", target: "state")
        }
        guard parameters["response_type"] == "code" else {
            throw ServerError.badRequest("response_type must be 'code'.", target: "response_type")
        }
        guard parameters["code_challenge_method"] == "S256", let challenge = parameters["code_challenge"],
            PKCE.isWellFormed(challenge)
        else {
            throw ServerError.badRequest(
                "PKCE is required: send code_challenge with code_challenge_method=S256.", target: "code_challenge")
        }
        let scope: String
        do { scope = try tokens.requestedScope(parameters["scope"]) } catch {
            throw ServerError.badRequest(error.description, target: "scope")
        }
        return AuthorizationRequest(client: client, redirectURI: redirectURI, challenge: challenge, scope: scope)
    }

    /// Whether `state` is at most 512 bytes of printable ASCII, checked byte by byte.
    static func isAcceptable(state: String) -> Bool {
        state.utf8.count <= 512 && state.utf8.allSatisfy { (0x20...0x7E).contains($0) }
    }

    var metadata: JSONValue {
        let issuer = tokens.issuer.value
        return .object([
            ("issuer", .string(issuer)),
            ("authorization_endpoint", .string("\(issuer)/oauth/authorize")),
            ("device_authorization_endpoint", .string("\(issuer)/oauth/device_authorization")),
            ("token_endpoint", .string("\(issuer)/oauth/token")),
            ("revocation_endpoint", .string("\(issuer)/oauth/revoke")),
            ("jwks_uri", .string("\(issuer)/oauth/jwks")),
            ("scopes_supported", .array(configuration.scopes.map(JSONValue.string))),
            ("response_types_supported", .array([.string("code")])),
            (
                "grant_types_supported",
                .array(
                    ["password", "refresh_token", "authorization_code", DeviceAuthorizations.grantType].map(
                        JSONValue.string))
            ),
            ("token_endpoint_auth_methods_supported", .array([.string("none")])),
            ("revocation_endpoint_auth_methods_supported", .array([.string("none")])),
            ("code_challenge_methods_supported", .array([.string("S256")])),
        ])
    }
}

/// A JSON response.
func json(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
    Response(
        status: status, headers: [.contentType: "application/json"],
        body: .init(byteBuffer: ByteBuffer(bytes: value.serializedBytes)))
}

/// An HTML response. `formTargets` are the origins a form may lead to besides Baton itself: a sign-in page's
/// provider buttons post to Baton, which redirects to the provider, and browsers hold that redirect to the
/// page's `form-action` too.
func html(_ text: String, formTargets: [String] = []) -> Response {
    let targets = (["'self'"] + formTargets).joined(separator: " ")
    return Response(
        status: .ok,
        headers: [
            .contentType: "text/html; charset=utf-8", .cacheControl: "no-store",
            .contentSecurityPolicy:
                "default-src 'none'; style-src 'self'; form-action \(targets); frame-ancestors 'none'; base-uri 'none'",
        ], body: .init(byteBuffer: ByteBuffer(string: text)))
}
