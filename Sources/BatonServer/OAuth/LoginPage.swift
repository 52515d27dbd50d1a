import BatonOData

/// What the sign-in pages offer: a button per identity provider, and Baton's password form unless the
/// admin turned local passwords off (`sign-in.local-passwords false`).
struct SignInChoices: Sendable {
    var providers: [(name: String, displayName: String)] = []
    var localPasswords = true
    /// The origins of the providers' authorization endpoints, for the page's `form-action`.
    var formTargets: [String] = []

    /// The providers' buttons: each submits the page's form to that provider's start; Baton keeps only the
    /// form's hidden fields (the authorization request) or the device's code, never a typed password.
    func buttons(label: String) -> String {
        guard !providers.isEmpty else { return "" }
        let buttons = providers.map { provider in
            """
            <button type="submit" class="provider" formaction="/oauth/idp/\(Markup.html(provider.name))/start" formnovalidate>\(Markup.html(label)) \(Markup.html(provider.displayName))</button>
            """
        }.joined(separator: "\n")
        return "<div class=\"providers\">\n\(buttons)\n</div>"
    }
}

/// The HTML sign-in page of the authorization endpoint, for browser clients (the cockpit among them).
enum LoginPage {
    /// The authorization request's parameters the page carries (hidden) to its password form or a provider.
    static let carried = [
        "response_type", "client_id", "redirect_uri", "state", "scope", "code_challenge", "code_challenge_method",
    ]

    static func html(parameters: [String: String], choices: SignInChoices = .init(), error: String? = nil) -> String {
        let hidden =
            carried
            .compactMap { name in
                parameters[name].map { "<input type=\"hidden\" name=\"\(name)\" value=\"\(Markup.html($0))\">" }
            }.joined(separator: "\n    ")
        let message = error.map { "<p role=\"alert\">\(Markup.html($0))</p>" } ?? ""
        let passwords =
            choices.localPasswords
            ? """
            <label>User name <input name="username" autocomplete="username" required></label>
                <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
                <button type="submit">Sign in</button>
            """ : ""
        // Without local passwords the providers come first (and alone); with them, the password form first.
        let providers = choices.buttons(label: "Sign in with")
        return PageFrame.html(
            title: "Sign in to Baton",
            body: """
                <h1>Sign in to Baton</h1>
                \(message)
                <form method="post" action="/oauth/authorize">
                    \(hidden)
                    \(choices.localPasswords ? passwords + providers : providers)
                </form>
                """)
    }

}

/// The verification page of the device authorization grant (RFC 8628 §3.3): the user code (filled in from
/// `verification_uri_complete`), the person's user name and password or a provider, approve or deny.
enum DevicePage {
    static func html(userCode: String, choices: SignInChoices = .init(), error: String? = nil) -> String {
        let message = error.map { "<p role=\"alert\">\(Markup.html($0))</p>" } ?? ""
        let shown = userCode.prefix(scalars: 16)
        let code = DeviceAuthorizations.normalized(userCode).map(DeviceAuthorizations.display)
        let passwords =
            choices.localPasswords
            ? """
            <label>User name <input name="username" autocomplete="username"></label>
                <label>Password <input name="password" type="password" autocomplete="current-password"></label>
                <button type="submit" name="action" value="approve">Sign in and allow</button>
            """ : ""
        let providers = choices.buttons(label: "Allow: sign in with")
        return PageFrame.html(
            title: "Sign in a device to Baton",
            body: """
                <h1>Sign in a device to Baton</h1>
                <p>\(code.map { "You are letting in the tablet that shows <strong class=\"code\">\(Markup.html($0))</strong>. Check that it is the code on the tablet, then sign in to allow it." } ?? "Check that the code below is the one your device shows, then sign in to let it in.")</p>
                \(message)
                <form method="post" action="/oauth/device">
                    <label>Code on the device <input name="user_code" value="\(Markup.html(shown))" required maxlength="16" autocomplete="off"></label>
                    \(choices.localPasswords ? passwords + providers : providers)
                    <button type="submit" name="action" value="deny" class="danger">This was not me: deny</button>
                </form>
                """)
    }

    /// After the provider signed the person in: the tablet's code and who they are, and their choice. Nothing is
    /// decided until they press a button here.
    static func confirm(user: User, code: String, provider: IdentityProvider, ticket: String) -> String {
        PageFrame.html(
            title: "Allow the tablet?",
            body: """
                <h1>Allow the tablet?</h1>
                <p>\(Markup.html(provider.displayName)) signed you in as <strong>\(Markup.html(user.displayName)) (\(Markup.html(user.name)))</strong>.
                Let in the tablet that shows <strong class="code">\(Markup.html(code))</strong>?</p>
                <form method="post" action="/oauth/idp/\(Markup.html(provider.name))/allow">
                    <input type="hidden" name="ticket" value="\(Markup.html(ticket))">
                    <button type="submit" name="action" value="allow">Allow</button>
                    <button type="submit" name="action" value="deny" class="danger">This was not me: deny</button>
                </form>
                """)
    }

    static func done(_ text: String) -> String {
        PageFrame.html(title: "Baton", body: "<h1>Baton</h1><p role=\"status\">\(Markup.html(text))</p>")
    }
}

/// A page of the sign-in through a provider that ends with a message (refused, failed), and a way back.
enum ProviderPage {
    static func html(title: String, text: String, back: String?) -> String {
        PageFrame.html(
            title: title,
            body: """
                <h1>\(Markup.html(title))</h1>
                <p role="alert">\(Markup.html(text))</p>
                \(back.map { "<p><a href=\"\(Markup.html($0))\">Back to the sign-in page</a></p>" } ?? "")
                """)
    }
}

/// The frame of the pages a person signs in on (often a phone at the stand): the cockpit's stylesheet, a
/// heading bar, and the content in a narrow column.
enum PageFrame {
    static func html(title: String, body: String) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><title>\(Markup.html(title))</title>
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <link rel="stylesheet" href="/admin/style.css"></head>
        <body><header><strong>Baton</strong></header>
        <main class="sign-in">
        \(body)
        </main></body></html>
        """
    }
}
