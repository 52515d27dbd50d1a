import Testing

@testable import BatonServer

/// `--database` and `BATON_DATABASE_URL`: what is accepted, and what each mistake says.
@Suite struct PostgresLocationTests {
    @Test func aURLNamesUserHostPortDatabaseAndTLS() throws {
        let local = try PostgresLocation(parsing: "postgres://baton@127.0.0.1:5433/baton", fromCommandLine: true)
        #expect(local.user == "baton" && local.host == "127.0.0.1" && local.port == 5433 && local.database == "baton")
        #expect(local.password == nil)
        #expect(local.tls == .disable)
        let remote = try PostgresLocation(parsing: "postgresql://app@db.example.com/baton", fromCommandLine: true)
        #expect(remote.port == 5432)
        #expect(remote.tls == .verifyFull)
        let forced = try PostgresLocation(
            parsing: "postgres://app@db.internal:6432/baton?sslmode=disable", fromCommandLine: true)
        #expect(forced.tls == .disable)
    }

    @Test func aPasswordComesFromTheEnvironmentOnlyAndIsNeverPrinted() throws {
        let text = "postgres://baton:s3cret-pass@127.0.0.1:5432/baton"
        #expect(throws: PostgresLocationError.self) { try PostgresLocation(parsing: text, fromCommandLine: true) }
        do {
            _ = try PostgresLocation(parsing: text, fromCommandLine: true)
        } catch {
            #expect(error.description.contains("BATON_DATABASE_URL"))
            #expect(!error.description.contains("s3cret"))
        }
        let fromEnvironment = try PostgresLocation(parsing: text, fromCommandLine: false)
        #expect(fromEnvironment.password == "s3cret-pass")
        #expect(!fromEnvironment.description.contains("s3cret"))
        #expect(fromEnvironment.description == "postgres://baton:***@127.0.0.1:5432/baton?sslmode=disable")
        // A URL that does not parse is quoted redacted, even with a raw `@` inside the password.
        let raw = "postgres://baton:p@ss@word@127.0.0.1:5432/baton/extra"
        #expect(PostgresLocation.redacted(raw) == "postgres://baton:***@127.0.0.1:5432/baton/extra")
        // A raw `/`, `?` or `#` in the password, which ends the authority early, hides nothing less.
        for secret in ["pa/ss", "pa?ss", "pa#ss"] {
            let redacted = PostgresLocation.redacted("postgres://baton:\(secret)@127.0.0.1:5432/baton")
            #expect(!redacted.contains(secret) && !redacted.contains("ss@"), "\(redacted)")
        }
        // A combining mark after the `:`, the `@` or a `/` makes one `Character` of it, which a search by `Character`
        // does not find: the delimiters are found by scalar, and without `://` the user information still goes.
        for text in [
            "postgres://baton:\u{301}s3cret@127.0.0.1:5432/baton", "postgres://baton:s3cret@\u{301}127.0.0.1/baton",
            "postgres://baton:s3cret\u{301}@127.0.0.1/baton", "postgres:/\u{301}/baton:s3cret@127.0.0.1/baton",
        ] {
            let redacted = PostgresLocation.redacted(text)
            #expect(!redacted.contains("s3cret"), "\(redacted)")
            do {
                _ = try PostgresLocation(parsing: text, fromCommandLine: false)
            } catch {
                #expect(!error.description.contains("s3cret"), "\(error.description)")
            }
        }
    }

    @Test(arguments: [
        ("sqlite:///var/baton", "must start with postgres://"),
        ("postgres://127.0.0.1:5432/baton", "names no user"),
        ("postgres://baton@:5432/baton", "names no host"),
        ("postgres://baton@127.0.0.1:5432", "names no database"),
        ("postgres://baton@127.0.0.1:5432/a/b", "names no database"),
        ("postgres://baton@127.0.0.1:70000/baton", "must be between 1 and 65535, not 70000"),
        ("postgres://baton@127.0.0.1/baton?sslmode=maybe", "sslmode must be disable or verify-full, not 'maybe'"),
        ("postgres://baton@127.0.0.1/baton?timeout=5", "Unknown database URL option 'timeout'"),
        ("postgres://baton:pw@host with space/baton", "is not a URL"),
        // An option arrives percent-decoded: it is named by its printable ASCII bytes, so an escaped line end or
        // escape sequence never reaches the terminal of whoever typed the URL (nor a log that keeps the error).
        ("postgres://baton@127.0.0.1/baton?time%0Aout=5", "Unknown database URL option 'timeout'"),
        ("postgres://baton@127.0.0.1/baton?%1B%5B2Jx=1", "Unknown database URL option '[2Jx'"),
        ("postgres://baton@127.0.0.1/baton?sslmode=may%0D%0Abe", "sslmode must be disable or verify-full, not 'maybe'"),
        ("postgres://baton@127.0.0.1/baton?sslmode=d%C3%A9j%C3%A0", "sslmode must be disable or verify-full, not 'dj'"),
    ])
    func eachMistakeIsNamed(_ text: String, _ message: String) {
        do {
            _ = try PostgresLocation(parsing: text, fromCommandLine: false)
            Issue.record("'\(text)' was accepted")
        } catch {
            #expect(error.description.contains(message), "\(error.description)")
            #expect(!error.description.contains(":pw@"))
            #expect(!error.description.utf8.contains { $0 < 0x20 || $0 == 0x7F }, "\(error.description)")
        }
    }
}
