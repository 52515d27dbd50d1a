import BatonOData

/// The minimal HTML sign-in page of the authorization endpoint, for browser clients.
enum LoginPage {
    static func html(parameters: [String: String], error: String? = nil) -> String {
        let hidden = [
            "response_type", "client_id", "redirect_uri", "state", "scope", "code_challenge", "code_challenge_method",
        ]
        .compactMap { name in
            parameters[name].map { "<input type=\"hidden\" name=\"\(name)\" value=\"\(Markup.html($0))\">" }
        }.joined(separator: "\n    ")
        let message = error.map { "<p role=\"alert\">\(Markup.html($0))</p>" } ?? ""
        return PageFrame.html(
            title: "Sign in to Baton",
            body: """
                <h1>Sign in to Baton</h1>
                \(message)
                <form method="post" action="/oauth/authorize">
                    \(hidden)
                    <label>User name <input name="username" autocomplete="username" required></label>
                    <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
                    <button type="submit">Sign in</button>
                </form>
                """)
    }

}

/// The verification page of the device authorization grant (RFC 8628 §3.3): the user code (filled in from
/// `verification_uri_complete`), the person's user name and password, approve or deny.
enum DevicePage {
    static func html(userCode: String, error: String? = nil) -> String {
        let message = error.map { "<p role=\"alert\">\(Markup.html($0))</p>" } ?? ""
        return PageFrame.html(
            title: "Sign in a device to Baton",
            body: """
                <h1>Sign in a device to Baton</h1>
                <p>Check that the code below is the one your device shows, then sign in to let it in.</p>
                \(message)
                <form method="post" action="/oauth/device">
                    <label>Code on the device <input name="user_code" value="\(Markup.html(String(String.UnicodeScalarView(userCode.unicodeScalars.prefix(16)))))" required maxlength="16" autocomplete="off"></label>
                    <label>User name <input name="username" autocomplete="username"></label>
                    <label>Password <input name="password" type="password" autocomplete="current-password"></label>
                    <button type="submit" name="action" value="approve">Sign in and allow</button>
                    <button type="submit" name="action" value="deny" class="danger">This was not me: deny</button>
                </form>
                """)
    }

    static func done(_ text: String) -> String {
        PageFrame.html(title: "Baton", body: "<h1>Baton</h1><p role=\"status\">\(Markup.html(text))</p>")
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
