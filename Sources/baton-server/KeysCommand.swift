import ArgumentParser
import BatonServer
import Foundation

/// `baton-server keys rotate`: a new token-signing key for every instance.
struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys", abstract: "The keys that sign access tokens.", subcommands: [Rotate.self])

    struct Rotate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make a new token-signing key.",
            discussion: """
                New tokens are signed with the new key as soon as each running instance looks again (within a \
                minute); tokens signed with the previous key stay valid until they expire, and /oauth/jwks lists \
                both. Rotating again deletes the key before the previous one.
                """)
        @OptionGroup var data: DataOptions

        func run() async throws {
            let server = try await data.open()
            let id = try await server.rotateSigningKey(actor: "admin (command line)")
            print("New token-signing key \(id); the previous key verifies its tokens until they expire.")
        }
    }
}
