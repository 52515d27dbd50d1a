import BatonOData

/// The minimal HTML sign-in page of the authorization endpoint, for browser clients.
enum LoginPage {
    static func html(parameters: [String: String], error: String? = nil) -> String {
        let hidden = [
            "response_type", "client_id", "redirect_uri", "state", "scope", "code_challenge", "code_challenge_method",
        ]
        .compactMap { name in
            parameters[name].map { "<input type=\"hidden\" name=\"\(name)\" value=\"\(escapeXML($0))\">" }
        }.joined(separator: "\n    ")
        let message = error.map { "<p role=\"alert\">\(escapeXML($0))</p>" } ?? ""
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>Sign in to Baton</title>
            <meta name="viewport" content="width=device-width, initial-scale=1"></head>
            <body><main><h1>Sign in to Baton</h1>
            \(message)
            <form method="post" action="/oauth/authorize">
                \(hidden)
                <label>User name <input name="username" autocomplete="username" required></label>
                <label>Password <input name="password" type="password" autocomplete="current-password" required></label>
                <button type="submit">Sign in</button>
            </form></main></body></html>
            """
    }

}
