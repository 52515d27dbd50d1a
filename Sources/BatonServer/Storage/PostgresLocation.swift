import BatonOData
import Foundation

/// Where a PostgreSQL database is, as `baton-server --database` or `BATON_DATABASE_URL` names it:
/// `postgres://USER@HOST:PORT/DATABASE?sslmode=MODE`; the port defaults to 5432, `sslmode` to `disable` on
/// loopback and `verify-full` anywhere else.
///
/// A password is accepted only from the environment (`BATON_DATABASE_URL`), never on the command line, where
/// every user of the machine can read it (`ps`); on the command line, name a user PostgreSQL lets in without one
/// (`trust` or `peer` for a local, private cluster).
public struct PostgresLocation: Sendable, Equatable, CustomStringConvertible {
    /// How the connection is protected.
    public enum TLSMode: String, Sendable, CaseIterable {
        /// No TLS: only for loopback or a private network.
        case disable
        /// TLS, with the server's certificate checked against the system's trust roots and the host name.
        case verifyFull = "verify-full"
    }

    public var user: String
    public var password: String?
    public var host: String
    public var port: Int
    public var database: String
    public var tls: TLSMode

    /// The URL with the password replaced by `***`, for messages and logs.
    public var description: String {
        "postgres://\(user)\(password == nil ? "" : ":***")@\(host):\(port)/\(database)?sslmode=\(tls.rawValue)"
    }

    /// Parses a database URL.
    ///
    /// - Parameters:
    ///   - text: the URL.
    ///   - fromCommandLine: whether `text` came from an argument (a password is then refused).
    /// - Throws: ``PostgresLocationError`` saying what is wrong and how to write it.
    public init(parsing text: String, fromCommandLine: Bool) throws(PostgresLocationError) {
        let example = "postgres://USER@HOST:PORT/DATABASE (for example postgres://baton@127.0.0.1:5432/baton)"
        guard let components = URLComponents(string: text) else {
            throw PostgresLocationError("'\(Self.redacted(text))' is not a URL; write \(example).")
        }
        guard let scheme = components.scheme?.lowercased(), ["postgres", "postgresql"].contains(scheme) else {
            throw PostgresLocationError(
                "The database URL must start with postgres:// (SQLite needs no URL: leave --database out); write \(example)."
            )
        }
        guard let user = components.user, !user.isEmpty else {
            throw PostgresLocationError("The database URL names no user; write \(example).")
        }
        if components.password != nil, fromCommandLine {
            throw PostgresLocationError(
                "A password in --database would be visible to every user of this machine; put the URL in BATON_DATABASE_URL instead (readable only by the service account)."
            )
        }
        guard let host = components.host, !host.isEmpty else {
            throw PostgresLocationError("The database URL names no host; write \(example).")
        }
        let port = components.port ?? 5432
        guard (1...65_535).contains(port) else {
            throw PostgresLocationError("The database port must be between 1 and 65535, not \(port).")
        }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            throw PostgresLocationError("The database URL names no database after the port; write \(example).")
        }
        // TLS unless the database is on this machine, where it protects nothing.
        var tls =
            ["127.0.0.1", "::1", "[::1]", "localhost"].contains(host.lowercased()) ? TLSMode.disable : .verifyFull
        for item in components.queryItems ?? [] {
            guard item.name == "sslmode" else {
                throw PostgresLocationError(
                    "Unknown database URL option '\(item.name.printableASCII)'; the only one is sslmode (disable or verify-full)."
                )
            }
            guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                throw PostgresLocationError(
                    "sslmode must be disable or verify-full, not '\((item.value ?? "").printableASCII)'.")
            }
            tls = mode
        }
        self.user = user
        self.password = components.password
        self.host = host
        self.port = port
        self.database = database
        self.tls = tls
    }

    /// `text` with anything between `://user:` and `@` replaced, so a password never reaches a message.
    ///
    /// Read by Unicode scalar: a combining mark after the `:`, the `@` or a `/` makes one `Character` of it, which a
    /// search by `Character` did not find, and the whole URL, password and all, went into the error.
    static func redacted(_ text: String) -> String {
        let scalars = text.unicodeScalars
        // Without `://` (a mark between its slashes), the user information is looked for after the scheme's `:`.
        let start =
            scalars.firstRange(of: "://".unicodeScalars)?.upperBound
            ?? scalars.firstIndex(of: ":").map(scalars.index(after:)) ?? scalars.startIndex
        let rest = scalars[start...]
        // The user information ends at the last `@` before the path: a password may itself hold a raw `@`. A raw
        // `/`, `?` or `#` in the password ends the authority early: then the last `@` anywhere (hiding too much is
        // harmless).
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        guard let at = authority.lastIndex(of: "@") ?? rest.lastIndex(of: "@"),
            let colon = scalars[start..<at].firstIndex(of: ":")
        else { return text.prefix(scalars: 200) }
        return
            (String(String.UnicodeScalarView(scalars[..<colon])) + ":***"
            + String(String.UnicodeScalarView(scalars[at...]))).prefix(scalars: 200)
    }
}

/// A database URL that cannot be used, and how to write it.
public struct PostgresLocationError: Error, CustomStringConvertible, Equatable {
    public let description: String
    init(_ description: String) { self.description = description }
}
