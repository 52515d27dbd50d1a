import ArgumentParser
import BatonServer
import Foundation

/// `baton-server idp …`: the identity providers people sign in through (OpenID Connect) and that provision them
/// (SCIM 2.0).
struct IdentityProviderCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "idp",
        abstract: "Add, list, show and remove identity providers; make and revoke their SCIM tokens.",
        subcommands: [Add.self, List.self, Show.self, Remove.self, SCIMToken.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Register an OpenID Provider. The client secret comes from a file or BATON_IDP_CLIENT_SECRET, never from the command line."
        )
        @OptionGroup var data: DataOptions
        @Argument(help: "Baton's name for it (a-z, 0-9, '-'); part of its callback URL.") var name: String
        @Option(
            help:
                "The provider's issuer identifier (https://…, or http:// on loopback), as its discovery document names it."
        )
        var issuer: String
        @Option(help: "Baton's client id at the provider.") var clientId: String
        @Option(help: "A file holding the client secret (one line).") var clientSecretFile: String?
        @Option(help: "What the sign-in button says after 'Sign in with'.") var displayName: String?
        @Option(help: "The claim the Baton user name comes from: preferred_username, email or sub.")
        var nameClaim: String = "preferred_username"
        @Option(help: "The claim that lists the person's groups.") var roleClaim: String = "groups"
        @Option(help: "GROUP=ROLE pairs, comma-separated (roles: ground-staff, supervisor, admin).") var roleMap: String
        @Flag(help: "Do not fetch the provider's discovery document and keys now.") var noCheck = false

        func run() async throws {
            guard let claim = IdentityProvider.NameClaim(rawValue: nameClaim) else {
                throw ValidationError("--name-claim must be preferred_username, email or sub.")
            }
            let secret: String
            if let clientSecretFile {
                guard let data = FileManager.default.contents(atPath: clientSecretFile) else {
                    throw CommandFailure("Cannot read the client secret file '\(clientSecretFile)'.")
                }
                secret = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            } else if let value = ProcessInfo.processInfo.environment["BATON_IDP_CLIENT_SECRET"], !value.isEmpty {
                secret = value
            } else {
                throw ValidationError(
                    "Give the client secret with --client-secret-file FILE or BATON_IDP_CLIENT_SECRET; it is never an argument."
                )
            }
            var provider = IdentityProvider(name: name, displayName: displayName, issuer: issuer, clientID: clientId)
            provider.nameClaim = claim
            provider.roleClaim = roleClaim
            provider.roleMap = try await adminAction { try IdentityProvider.roleMap(parsing: roleMap) }
            try await adminAction { try IdentityProviders.validate(provider, clientSecret: secret) }
            let server = try await data.open()
            if !noCheck {
                do { print(try await server.checkIdentityProvider(provider)) } catch {
                    throw CommandFailure("\(error) Fix the issuer, or add it anyway with --no-check.")
                }
            }
            try await adminAction { try await server.identityProviders.add(provider, clientSecret: secret) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "idp-added", subject: name, address: nil,
                    detail: "issuer \(issuer), client \(clientId)"))
            print("Added \(name). Register this redirect URI at the provider: BATON_URL/oauth/idp/\(name)/callback")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List identity providers.")
        @OptionGroup var data: DataOptions

        func run() async throws {
            let providers = try await data.open().identityProviders.list()
            guard !providers.isEmpty else {
                print("No identity providers. Add one with: baton-server idp add NAME --issuer URL --client-id ID …")
                return
            }
            for provider in providers {
                print("\(provider.name)  \(provider.issuer)  client \(provider.clientID)  \"\(provider.displayName)\"")
            }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show one identity provider (never its secret).")
        @OptionGroup var data: DataOptions
        @Argument var name: String

        func run() async throws {
            guard let provider = try await data.open().identityProviders.provider(named: name) else {
                throw CommandFailure("There is no identity provider named '\(name)'.")
            }
            print(
                """
                name          \(provider.name)
                display name  \(provider.displayName)
                issuer        \(provider.issuer)
                client id     \(provider.clientID)
                name claim    \(provider.nameClaim.rawValue)
                role claim    \(provider.roleClaim)
                role map      \(provider.roleMapText)
                callback      BATON_URL/oauth/idp/\(provider.name)/callback
                """)
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Remove an identity provider and revoke its SCIM tokens: its people cannot sign in again (their tokens and sessions run out) until it is added again with the same issuer."
        )
        @OptionGroup var data: DataOptions
        @Argument var name: String

        func run() async throws {
            let server = try await data.open()
            let bound = try await adminAction { try await server.identityProviders.remove(name) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "idp-removed", subject: name, address: nil,
                    detail: "\(bound) users bound to it"))
            print(
                "Removed \(name); \(bound) users were bound to it and cannot sign in until it is added again with the same issuer."
            )
        }
    }

    struct SCIMToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "scim-token",
            abstract: "Make a SCIM bearer token for a provider (shown once), or revoke all of its tokens.")
        @OptionGroup var data: DataOptions
        @Argument var name: String
        @Flag(help: "Revoke every SCIM token of the provider instead.") var revoke = false

        func run() async throws {
            let server = try await data.open()
            if revoke {
                let count = try await server.identityProviders.revokeSCIMTokens(of: name)
                try await server.audit.record(
                    AuditEntry(
                        at: Date(), actor: "admin (command line)", action: "scim-tokens-revoked", subject: name,
                        address: nil, detail: "\(count) tokens"))
                print("Revoked \(count) SCIM tokens of \(name).")
                return
            }
            let token = try await adminAction { try await server.identityProviders.createSCIMToken(for: name) }
            try await server.audit.record(
                AuditEntry(
                    at: Date(), actor: "admin (command line)", action: "scim-token-created", subject: name,
                    address: nil, detail: nil))
            // The token goes to standard output only, once; it is stored as its SHA-256.
            print(token)
        }
    }
}
