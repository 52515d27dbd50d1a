import BatonOData
import Foundation
import HTTPTypes
import Hummingbird
import Mustache

/// The cockpit's pages: Mustache templates rendered on the server, one small stylesheet, no script. `{{…}}`
/// escapes a value with ``Markup/html(_:)`` (by Unicode scalar; the library's own HTML escaping compares
/// `Character`s, which a combining mark beside a `<` gets past): every template starts with the pragma that
/// selects it, ``contentTypePragma``. Every page carries the security headers of ``headers``.
enum CockpitPages {
    /// Every cockpit response's headers: a strict Content-Security-Policy (the stylesheet from this server,
    /// nothing else: no script, no frames, forms only to this origin), no framing, no referrer, no caching.
    static let headers: HTTPFields = [
        .contentSecurityPolicy:
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        field("X-Frame-Options"): "DENY",
        field("Referrer-Policy"): "no-referrer",
        field("X-Content-Type-Options"): "nosniff",
        .cacheControl: "no-store",
    ]

    static func field(_ name: String) -> HTTPField.Name { .named(name) }

    /// The content type of ``Markup/html(_:)`` among Mustache's content types.
    struct ScalarHTML: MustacheContentType {
        func escapeText(_ text: String) -> String { Markup.html(text) }
    }

    /// Selects ``ScalarHTML`` for the template it starts. A partial does not inherit it, so every registered
    /// template, partials included, starts with it (``library``).
    static let contentTypePragma = "{{% CONTENT_TYPE: BATON_HTML}}"

    static let library: MustacheLibrary = {
        MustacheContentTypes.register(ScalarHTML(), named: "BATON_HTML")
        var library = MustacheLibrary()
        do {
            for (name, text) in templates { try library.register(contentTypePragma + text, named: name) }
        } catch {
            preconditionFailure("A cockpit template does not parse: \(error)")
        }
        return library
    }()

    /// A page: `template` rendered with `values`, inside the layout (navigation, who is signed in, sign-out).
    static func page(
        _ template: String, title: String, values: [String: Any], session: CockpitSessions.Session?,
        status: HTTPResponse.Status = .ok
    ) -> Response {
        let content = library.render(values, withTemplate: template) ?? ""
        // The navigation marks the current section (`{{#overview}}`, `{{#users}}`).
        var layout: [String: Any] = ["title": title, "content": content, template: true]
        if let session {
            layout["session"] = ["user": session.user, "displayName": session.displayName, "csrf": session.csrf]
        }
        let html = library.render(layout, withTemplate: "layout") ?? ""
        var fields = headers
        fields[.contentType] = "text/html; charset=utf-8"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    /// A page that says what went wrong and links back.
    static func message(
        _ title: String, _ text: String, status: HTTPResponse.Status, session: CockpitSessions.Session? = nil,
        link: (text: String, href: String)? = nil
    ) -> Response {
        var values: [String: Any] = ["heading": title, "text": text]
        if let link { values["link"] = ["text": link.text, "href": link.href] }
        return page("message", title: title, values: values, session: session, status: status)
    }

    /// A link to `path` with the query `items` that have a non-empty value (a search, a page position), each
    /// percent-encoded, `+` too (a query reads it as a space).
    static func link(_ path: String, _ items: [(name: String, value: String?)]) -> String {
        var components = URLComponents()
        components.queryItems = items.compactMap { name, value in
            value.flatMap { $0.isEmpty ? nil : URLQueryItem(name: name, value: $0) }
        }
        let query = (components.percentEncodedQuery ?? "").replacingOccurrences(of: "+", with: "%2B")
        return query.isEmpty ? path : path + "?" + query
    }

    /// A redirect after a form (303, so the browser asks with GET), with the cockpit's headers.
    static func redirect(to location: String) -> Response {
        var fields = headers
        fields[.location] = location
        return Response(status: .seeOther, headers: fields)
    }

    static let stylesheet = """
        :root { --ink: #1b2430; --muted: #5b6675; --line: #d5dbe3; --accent: #0b5cad; --bad: #a4161a; --bg: #f6f8fa; }
        * { box-sizing: border-box; }
        body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
          background: var(--bg); }
        header { background: var(--ink); color: #fff; padding: .6rem 1rem; display: flex; flex-wrap: wrap; gap: .5rem 1.2rem;
          align-items: center; }
        header strong { font-size: 1.1rem; margin-right: .5rem; }
        header a { color: #fff; text-decoration: none; padding: .2rem 0; border-bottom: 2px solid transparent; }
        header a[aria-current] { border-bottom-color: #fff; }
        header form { margin-left: auto; display: flex; gap: .6rem; align-items: center; }
        main { padding: 1rem; max-width: 1200px; margin: 0 auto; }
        h1 { font-size: 1.4rem; margin: .4rem 0 1rem; }
        .cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: .8rem; margin-bottom: 1.2rem; }
        .card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .8rem; }
        .card b { display: block; font-size: 1.6rem; }
        .card span { color: var(--muted); }
        .scroll { overflow-x: auto; max-width: 100%; background: #fff; border: 1px solid var(--line); border-radius: 6px; }
        form, fieldset, label, input, select { max-width: 100%; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: .45rem .6rem; border-bottom: 1px solid var(--line); vertical-align: top; }
        th { background: #eef1f5; font-weight: 600; white-space: nowrap; }
        td form { display: inline-flex; gap: .3rem; margin: 0 .3rem .3rem 0; flex-wrap: wrap; }
        input, select, button { font: inherit; padding: .3rem .5rem; border: 1px solid var(--line); border-radius: 4px; }
        button { background: var(--accent); color: #fff; border-color: var(--accent); cursor: pointer; }
        button.danger { background: var(--bad); border-color: var(--bad); }
        header button { background: transparent; border-color: #fff; }
        fieldset { background: #fff; border: 1px solid var(--line); border-radius: 6px; margin: 0 0 1rem; padding: .8rem; }
        fieldset label { display: inline-flex; flex-direction: column; margin: 0 .8rem .6rem 0; }
        .alert { border-left: 4px solid var(--bad); background: #fff; padding: .6rem .8rem; margin-bottom: 1rem; }
        .notice { border-left: 4px solid var(--accent); background: #fff; padding: .6rem .8rem; margin-bottom: 1rem; }
        .muted { color: var(--muted); }
        tr.behalf td { background: #fff6dd; }
        pre { padding: .8rem; white-space: pre-wrap; overflow-wrap: anywhere; }
        nav.pages { margin: .8rem 0; display: flex; gap: 1rem; }
        img.thumb { width: 96px; height: 72px; object-fit: cover; border: 1px solid var(--line); border-radius: 4px; }
        main.sign-in { max-width: 26rem; }
        main.sign-in form { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 1rem; }
        main.sign-in label { display: flex; flex-direction: column; gap: .2rem; margin-bottom: .8rem; }
        main.sign-in button { width: 100%; margin-top: .4rem; padding: .55rem; }
        main.sign-in p[role=alert] { border-left: 4px solid var(--bad); background: #fff; padding: .6rem .8rem; }
        main.sign-in .providers { display: flex; flex-direction: column; gap: .4rem; margin: .6rem 0; }
        main.sign-in button.provider { background: #fff; color: var(--ink, #1b2430); border: 1px solid var(--line); }
        main.sign-in .code { font-family: ui-monospace, monospace; letter-spacing: .08em; }
        @media (max-width: 600px) { main { padding: .6rem; } header form { margin-left: 0; } .card b { font-size: 1.3rem; } }
        """

    static let templates: [(String, String)] = [
        (
            "photos",
            """
            <h1>Photos</h1>
            <p class="muted">Photos taken with pre-flight checks{{#check}} — check {{check}} (<a href="/admin/photos">all</a>){{/check}}, newest
            first: who took each and who uploaded it (someone else when the next shift synced the tablet).</p>
            {{#noPhotos}}<p class="muted">This server's model has no photos.</p>{{/noPhotos}}
            <div class="scroll"><table id="photos"><thead><tr><th></th><th>Taken (UTC)</th><th>Taken by</th>
            <th>Uploaded by</th><th>Caption</th><th>Check</th><th>Bytes</th><th>SHA-256</th></tr></thead><tbody>
            {{#rows}}<tr data-photo="{{id}}"><td>{{#shown}}<a href="{{image}}"><img class="thumb" src="{{image}}" alt="{{caption}}"></a>{{/shown}}{{^shown}}<a href="{{image}}">HEIC</a>{{/shown}}</td>
            <td>{{takenAt}}</td><td>{{takenBy}}</td><td>{{uploadedBy}}</td><td>{{caption}}</td>
            <td><a href="/admin/photos?check={{check}}">{{check}}</a></td><td>{{size}}</td><td><code>{{sha}}…</code></td></tr>{{/rows}}
            {{^rows}}<tr><td colspan="8" class="muted">No photos yet.</td></tr>{{/rows}}
            </tbody></table></div>
            """
        ),
        (
            "backups",
            """
            <h1>Discarded changes</h1>
            <p class="muted">When a user is removed from a tablet with changes the server never received, the tablet
            sends them here, encrypted with its store key, before it deletes them. Reading one is audited.</p>
            <form method="get" action="/admin/backups"><label>Device, author or sender contains <input name="q" value="{{query}}" maxlength="128"></label>
            <button type="submit">Search</button></form>
            <div class="scroll"><table id="backups"><thead><tr><th>Backup</th><th>Received (UTC)</th><th>Device</th>
            <th>Author</th><th>Sent by</th><th>Changes</th><th></th></tr></thead><tbody>
            {{#rows}}<tr data-backup="{{id}}"><td>{{id}}</td><td>{{received}}</td><td>{{device}}</td><td>{{author}}</td>
            <td>{{uploader}}</td><td>{{count}}</td><td><a href="/admin/backups/{{id}}">Read</a></td></tr>{{/rows}}
            {{^rows}}<tr><td colspan="7" class="muted">No tablet has sent discarded changes.</td></tr>{{/rows}}
            </tbody></table></div>
            <nav class="pages">{{#newest}}<a href="{{newest}}">Newest</a>{{/newest}}{{#older}}<a href="{{older}}" id="older">Older backups</a>{{/older}}</nav>
            """
        ),
        (
            "backup",
            """
            <h1>Backup {{id}}</h1>
            <p><a href="/admin/backups/{{id}}/download" id="download">Download (JSON)</a> ·
            <a href="/admin/backups">All discarded changes</a></p>
            <pre id="backup-text" class="scroll">{{text}}</pre>
            """
        ),
        (
            "devices",
            """
            <h1>Devices</h1>
            {{#error}}<p class="alert" role="alert" id="form-error">{{error}}</p>{{/error}}
            {{#notice}}<p class="notice" role="status" id="form-notice">{{notice}}</p>{{/notice}}
            <form method="get" action="/admin/devices"><label>Device id contains <input name="q" value="{{query}}" maxlength="128"></label>
            <button type="submit">Search</button> <span class="muted" id="range">{{range}}</span></form>
            <div class="scroll"><table id="devices"><thead><tr><th>Device</th><th>Users</th><th>Last contact (UTC)</th>
            <th>App version</th><th>Signing keys</th><th>Status</th><th>Actions</th></tr></thead><tbody>
            {{#rows}}<tr data-device="{{id}}"><td>{{id}}<br><span class="muted">since {{created}}</span></td>
            <td>{{#users}}{{name}}{{^active}} <span class="muted">(left)</span>{{/active}}<br>{{/users}}</td>
            <td>{{seen}}</td><td>{{version}}</td>
            <td>{{#keys}}<span title="registered {{registered}}">{{id}}… {{user}}{{#retired}} <span class="muted">retired {{retiredAt}}</span>{{/retired}}</span><br>{{/keys}}</td>
            <td>{{#revoked}}<strong>revoked</strong> {{revokedAt}}<br>{{/revoked}}{{#wipe}}<strong>wipe ordered</strong> {{wipeAt}}<br>{{/wipe}}{{#wiped}}<strong>wiped</strong> {{wipedAt}}{{/wiped}}{{^revoked}}{{^wipe}}{{^wiped}}in service{{/wiped}}{{/wipe}}{{/revoked}}</td>
            <td>{{^revoked}}<form method="post" action="/admin/devices/{{id}}/revoke"><input type="hidden" name="csrf" value="{{csrf}}">
            <button type="submit" class="danger">Revoke</button></form>{{/revoked}}
            {{^wipe}}<form method="post" action="/admin/devices/{{id}}/wipe"><input type="hidden" name="csrf" value="{{csrf}}">
            <button type="submit" class="danger">Order wipe</button></form>{{/wipe}}
            <form method="post" action="/admin/devices/{{id}}/request-logs"><input type="hidden" name="csrf" value="{{csrf}}">
            <button type="submit">Ask for its log</button></form>
            <a href="/admin/devices/{{id}}/logs">Logs and usage</a></td></tr>{{/rows}}
            {{^rows}}<tr><td colspan="7" class="muted">No device has registered yet.</td></tr>{{/rows}}
            </tbody></table></div>
            <nav class="pages">{{#previous}}<a href="{{previous}}" id="previous">Previous</a>{{/previous}}{{#next}}<a href="{{next}}" id="next">Next</a>{{/next}}</nav>
            """
        ),
        (
            "device-logs",
            """
            <h1>Logs of {{device}}</h1>
            <p><a href="/admin/devices">All devices</a>{{#requested}} · <strong id="log-requested">log requested</strong>: it comes with the device's next sync{{/requested}}</p>
            <h2>Log uploads</h2>
            {{#uploads}}<section class="log" data-upload="{{id}}"><h3>{{received}} · {{lines}} line(s) · {{reason}} · sent by {{uploader}}</h3>
            <pre class="scroll">{{text}}</pre></section>{{/uploads}}
            {{^uploads}}<p class="muted" id="no-logs">This device has sent no log.</p>{{/uploads}}
            <h2>Usage events</h2>
            <div class="scroll"><table id="usage"><thead><tr><th>When (UTC)</th><th>Event</th><th>Count</th><th>Duration (ms)</th><th>Code</th></tr></thead><tbody>
            {{#events}}<tr><td>{{at}}</td><td>{{name}}</td><td>{{count}}</td><td>{{duration}}</td><td>{{code}}</td></tr>{{/events}}
            {{^events}}<tr><td colspan="5" class="muted">No usage events (only users who agreed to usage data are counted).</td></tr>{{/events}}
            </tbody></table></div>
            """
        ),
        (
            "settings",
            """
            <h1>Settings</h1>
            {{#error}}<p class="alert" role="alert" id="form-error">{{error}}</p>{{/error}}
            {{#notice}}<p class="notice" role="status" id="form-notice">{{notice}}</p>{{/notice}}
            <p class="muted">Devices receive these at onboarding and when they refresh their settings. Each change is
            recorded in the audit log.</p>
            <div class="scroll"><table id="settings"><thead><tr><th>Setting</th><th>Takes</th><th>Value</th></tr></thead><tbody>
            {{#rows}}<tr data-key="{{key}}"><td>{{key}}</td><td class="muted">{{takes}}</td><td>
            <form method="post" action="/admin/settings"><input type="hidden" name="csrf" value="{{csrf}}">
            <input type="hidden" name="key" value="{{key}}">
            <input name="value" value="{{value}}" aria-label="Value of {{key}}" maxlength="256">
            <button type="submit">Save</button></form></td></tr>{{/rows}}
            </tbody></table></div>
            """
        ),
        (
            "providers",
            """
            <h1>Identity providers</h1>
            {{#error}}<p class="alert" role="alert" id="form-error">{{error}}</p>{{/error}}
            {{#notice}}<p class="notice" role="status" id="form-notice">{{notice}}</p>{{/notice}}
            <p class="muted">People sign in through these OpenID Providers; register each one's callback as its redirect
            URI. A provider's SCIM token is made on the command line (baton-server idp scim-token NAME), shown once.</p>
            <div class="scroll"><table id="providers"><thead><tr><th>Name</th><th>Button</th><th>Issuer</th><th>Client id</th>
            <th>Role map</th><th>People</th><th>Callback</th><th></th></tr></thead><tbody>
            {{#rows}}<tr data-name="{{name}}"><td>{{name}}</td><td>{{displayName}}</td><td>{{issuer}}</td><td>{{clientID}}</td>
            <td>{{roleMap}} ({{roleClaim}}; name from {{nameClaim}})</td><td>{{people}}</td><td>{{callback}}</td><td>
            <form method="post" action="/admin/identity-providers/{{name}}/remove"><input type="hidden" name="csrf" value="{{csrf}}">
            <button type="submit" class="danger">Remove</button></form></td></tr>{{/rows}}
            {{^rows}}<tr><td colspan="8" class="muted">No identity provider: people sign in with Baton passwords.</td></tr>{{/rows}}
            </tbody></table></div>
            <h2>Add a provider</h2>
            <form method="post" action="/admin/identity-providers" id="add-provider"><input type="hidden" name="csrf" value="{{csrf}}">
            <label>Name <input name="name" required maxlength="32" pattern="[a-z0-9-]+"></label>
            <label>Button says "Sign in with" <input name="displayName" maxlength="64"></label>
            <label>Issuer <input name="issuer" required maxlength="512" placeholder="https://login.example.com"></label>
            <label>Client id <input name="clientID" required maxlength="256"></label>
            <label>Client secret <input name="clientSecret" type="password" required maxlength="1024" autocomplete="off"></label>
            <label>Name claim <select name="nameClaim"><option>preferred_username</option><option>email</option><option>sub</option></select></label>
            <label>Role claim <input name="roleClaim" value="groups" maxlength="64"></label>
            <label>Role map <input name="roleMap" required maxlength="1024" placeholder="gs-staff=ground-staff,gs-admins=admin"></label>
            <button type="submit">Add</button></form>
            """
        ),
        (
            "audit",
            """
            <h1>Audit</h1>
            {{#error}}<p class="alert" role="alert" id="form-error">{{error}}</p>{{/error}}
            <form method="get" action="/admin/audit" id="audit-filter"><fieldset><legend>Filter</legend>
            <label>User <input name="user" value="{{user}}" maxlength="128"></label>
            <label>Device <input name="device" value="{{device}}" maxlength="128"></label>
            <label>Action <input name="action" value="{{action}}" maxlength="128"></label>
            <label>From <input name="from" type="date" value="{{from}}"></label>
            <label>To <input name="to" type="date" value="{{to}}"></label>
            <button type="submit">Filter</button></fieldset></form>
            {{#csv}}<p><a href="{{csv}}" id="csv">Download as CSV</a></p>{{/csv}}
            <div class="scroll"><table id="audit"><thead><tr><th>When (UTC)</th><th>Who</th><th>Action</th><th>Subject</th>
            <th>CheckedBy</th><th>UploadedBy</th><th>Detail</th><th>From</th></tr></thead><tbody>
            {{#rows}}<tr data-id="{{id}}"{{#onBehalf}} class="behalf"{{/onBehalf}}><td>{{at}}</td><td>{{actor}}</td>
            <td>{{action}}{{#repeats}} <strong class="repeats">{{repeats}}</strong>{{/repeats}}</td><td>{{subject}}</td><td>{{checkedBy}}</td>
            <td>{{uploadedBy}}{{#onBehalf}} <strong>(on behalf)</strong>{{/onBehalf}}</td><td>{{detail}}</td>
            <td>{{address}}</td></tr>{{/rows}}
            {{^rows}}<tr><td colspan="8" class="muted">No entry matches.</td></tr>{{/rows}}
            </tbody></table></div>
            <nav class="pages">{{#newest}}<a href="{{newest}}">Newest</a>{{/newest}}{{#older}}<a href="{{older}}" id="older">Older entries</a>{{/older}}</nav>
            """
        ),
        (
            "layout",
            """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>{{title}} · Baton cockpit</title>
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <link rel="stylesheet" href="/admin/style.css"></head>
            <body><header><strong>Baton cockpit</strong>
            {{#session}}
            <a href="/admin/"{{#overview}} aria-current="page"{{/overview}}>Overview</a>
            <a href="/admin/users"{{#users}} aria-current="page"{{/users}}>Users</a>
            <a href="/admin/devices"{{#devices}} aria-current="page"{{/devices}}>Devices</a>
            <a href="/admin/settings"{{#settings}} aria-current="page"{{/settings}}>Settings</a>
            <a href="/admin/identity-providers"{{#providers}} aria-current="page"{{/providers}}>Identity providers</a>
            <a href="/admin/backups"{{#backups}} aria-current="page"{{/backups}}>Discarded changes</a>
            <a href="/admin/photos"{{#photos}} aria-current="page"{{/photos}}>Photos</a>
            <a href="/admin/audit"{{#audit}} aria-current="page"{{/audit}}>Audit</a>
            <form method="post" action="/admin/sign-out"><span>{{displayName}} ({{user}})</span>
            <input type="hidden" name="csrf" value="{{csrf}}"><button type="submit">Sign out</button></form>
            {{/session}}
            </header>
            <main>{{{content}}}</main></body></html>
            """
        ),
        (
            "message",
            """
            <h1>{{heading}}</h1>
            <p class="alert" role="alert">{{text}}</p>
            {{#link}}<p><a href="{{href}}">{{text}}</a></p>{{/link}}
            """
        ),
        (
            "overview",
            """
            <h1>Overview</h1>
            <div class="cards">
            <div class="card"><b id="users-count">{{users}}</b><span>users ({{disabled}} disabled)</span></div>
            <div class="card"><b id="devices-count">{{devices}}</b><span>registered devices</span></div>
            <div class="card"><b id="devices-seen">{{seen}}</b><span>devices seen in 24 h</span></div>
            <div class="card"><b id="changes-today">{{changes}}</b><span>changes uploaded today</span></div>
            <div class="card"><b id="on-behalf-today">{{onBehalf}}</b><span>of them on someone else's behalf</span></div>
            <div class="card"><b id="refusals-today">{{refusals}}</b><span>changes refused today (to error archives)</span></div>
            <div class="card"><b id="discarded-today">{{discarded}}</b><span>discarded-change backups today</span></div>
            </div>
            <h2>Settings at a glance</h2>
            <div class="scroll"><table><thead><tr><th>Setting</th><th>Value</th></tr></thead><tbody>
            {{#settings}}<tr><td>{{key}}</td><td>{{value}}</td></tr>{{/settings}}
            </tbody></table></div>
            """
        ),
        (
            "users",
            """
            <h1>Users</h1>
            {{#error}}<p class="alert" role="alert" id="form-error">{{error}}</p>{{/error}}
            {{#notice}}<p class="notice" role="status" id="form-notice">{{notice}}</p>{{/notice}}
            <form method="get" action="/admin/users"><label>Search <input name="q" value="{{query}}" maxlength="64"></label>
            <button type="submit">Search</button></form>
            <div class="scroll"><table id="users"><thead><tr><th>Name</th><th>Display name</th><th>Role</th><th>Status</th>
            <th>Actions</th></tr></thead><tbody>
            {{#rows}}<tr data-user="{{name}}"><td>{{name}}</td><td>{{displayName}}</td><td>{{role}}</td>
            <td>{{#disabled}}disabled{{/disabled}}{{^disabled}}active{{/disabled}}</td><td>
            <form method="post" action="/admin/users/{{name}}/{{#disabled}}enable{{/disabled}}{{^disabled}}disable{{/disabled}}">
            <input type="hidden" name="csrf" value="{{csrf}}"><button type="submit">{{#disabled}}Enable{{/disabled}}{{^disabled}}Disable{{/disabled}}</button></form>
            <form method="post" action="/admin/users/{{name}}/role"><input type="hidden" name="csrf" value="{{csrf}}">
            <select name="role" aria-label="Role of {{name}}">{{#roles}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{value}}</option>{{/roles}}</select>
            <button type="submit">Set role</button></form>
            <form method="post" action="/admin/users/{{name}}/password"><input type="hidden" name="csrf" value="{{csrf}}">
            <input type="password" name="password" aria-label="New password for {{name}}" autocomplete="new-password" maxlength="128" required>
            <button type="submit">Reset password</button></form>
            <form method="post" action="/admin/users/{{name}}/delete"><input type="hidden" name="csrf" value="{{csrf}}">
            <button type="submit" class="danger">Delete</button></form>
            </td></tr>{{/rows}}
            {{^rows}}<tr><td colspan="5" class="muted">No user matches.</td></tr>{{/rows}}
            </tbody></table></div>
            <nav class="pages">{{#previous}}<a href="{{previous}}">Previous page</a>{{/previous}}
            <span class="muted">{{range}}</span>{{#next}}<a href="{{next}}">Next page</a>{{/next}}</nav>
            <form method="post" action="/admin/users" id="add-user"><fieldset><legend>Add a user</legend>
            <input type="hidden" name="csrf" value="{{csrf}}">
            <label>User name <input name="name" maxlength="64" required autocomplete="off"></label>
            <label>Display name <input name="displayName" maxlength="128"></label>
            <label>Role <select name="role">{{#newRoles}}<option value="{{.}}">{{.}}</option>{{/newRoles}}</select></label>
            <label>Password (given once) <input type="password" name="password" maxlength="128" required autocomplete="new-password"></label>
            <button type="submit">Add user</button></fieldset></form>
            """
        ),
    ]
}
