import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Signs the user in with user name and password; on restore, takes their tokens from the secure store (no
/// network). Refuses a second onboarding of a user already on the device (userAlreadyExists) and, when
/// resetting a passcode, another account than the one being reset (userMismatch).
public struct SignInStep: OnboardingStep {
    public var name: String { "sign-in" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        try await signIn(&context, expected: nil)
    }

    public func resetPasscode(_ context: inout OnboardingContext) async throws {
        let expected = await context.users.user(context.onboardingID)?.serverUserID
        try await signIn(&context, expected: expected)
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        let user = try await load(ServerUser.self, SecureStoreKey.serverUser, from: store, step: name)
        let signedOut = (try? await store.value(Bool.self, forKey: SecureStoreKey.signedOut)) ?? false
        if signedOut, await context.client.isReachable() {
            // The user signed out (tokens revoked): with network, they sign in again as themselves first.
            try await signIn(&context, expected: user.name)
            do {
                try await store.set(context.info[.tokens], forKey: SecureStoreKey.tokens)
                try await store.removeValue(forKey: SecureStoreKey.signedOut)
            } catch {
                throw FlowsError(.storage, "Cannot keep the new sign-in in the secure store: \(error.message)")
            }
            // The new sign-in tells the server it is on this device (best effort): the server then counts it as
            // this user's presence here (a departure of theirs waits) and ends it if the device is revoked.
            if let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] {
                _ = try? await context.client.deviceStatus(
                    configuration, deviceID: context.deviceID, as: .token(tokens.accessToken))
            }
            return
        }
        // Offline, a signed-out user still works on the device; the first sync after sign-in needs the network.
        context.info[.tokens] = try await load(OAuthTokens.self, SecureStoreKey.tokens, from: store, step: name)
        context.info[.serverUser] = user
    }

    /// RFC 8628: shows the person the code and the page, and polls until they approved there (or denied, or the
    /// code expired).
    static func signInThroughBrowser(_ oauth: OAuthClient, _ context: OnboardingContext) async throws -> OAuthTokens {
        let started: DeviceAuthorization
        do {
            started = try await oauth.startDeviceAuthorization()
        } catch {
            throw flowsError(error, doing: "start the sign-in through a browser")
        }
        try await context.presenter.showDeviceCode(
            DeviceCodePrompt(
                userCode: started.userCode, verificationURI: started.verificationURI,
                verificationURIComplete: started.verificationURIComplete,
                expiresAt: context.configuration.now().addingTimeInterval(TimeInterval(started.expiresIn))))
        // At least a second between polls whatever the server says, and no polling past the code's life.
        var interval = max(started.interval, 1)
        let deadline = context.configuration.now().addingTimeInterval(TimeInterval(started.expiresIn))
        while true {
            do {
                try await context.configuration.pollDelay(.seconds(interval))
            } catch {
                throw FlowsError(.cancelled, "The sign-in through a browser was cancelled.")
            }
            guard context.configuration.now() < deadline else {
                throw FlowsError(.stepFailed, "The code expired before anyone signed in with it; start again.")
            }
            do {
                if let tokens = try await oauth.pollDeviceToken(started, interval: &interval) { return tokens }
            } catch  where error.serverCode == "access_denied" {
                throw FlowsError(.cancelled, "The sign-in was denied on the page.")
            } catch  where error.serverCode == "expired_token" {
                throw FlowsError(.stepFailed, "The code expired before anyone signed in with it; start again.")
            } catch  where error.serverCode == "invalid_grant" {
                throw FlowsError(.stepFailed, "The server no longer knows this sign-in's code; start again.")
            } catch {
                throw flowsError(error, doing: "sign in through a browser")
            }
        }
    }

    public func reset(_ context: inout OnboardingContext) async {
        // A failed onboarding or a removed user leaves no live session on the server (best effort offline).
        guard context.flowType != .restore, let tokens = context.info[.tokens],
            let metadata = context.info[.authorizationMetadata], let configuration = context.info[.serverConfiguration]
        else { return }
        let oauth = OAuthClient(
            metadata: metadata, clientID: configuration.clientID, transport: context.client.transport)
        try? await oauth.revoke(tokens)
        context.info[.tokens] = nil
    }

    func signIn(_ context: inout OnboardingContext, expected: String?) async throws {
        guard let configuration = context.info[.serverConfiguration],
            let metadata = context.info[.authorizationMetadata]
        else { throw FlowsError(.stepFailed, "Sign-in needs the discovery step before it.") }
        let oauth = OAuthClient(
            metadata: metadata, clientID: configuration.clientID, transport: context.client.transport,
            now: context.configuration.now)
        // What the server allows (an older server says nothing: passwords), and what this client can do.
        let allowed = configuration.signInMethods ?? ["password"]
        var available: [SignInMethod] = []
        if allowed.contains("password") { available.append(.password) }
        if allowed.contains("device"), metadata.deviceAuthorizationEndpoint != nil { available.append(.browser) }
        guard let only = available.first else {
            throw FlowsError(.stepFailed, "The server allows no way of signing in that this app knows.")
        }
        let server = context.client.serverURL.absoluteString
        let method =
            available.count == 1 ? only : try await context.presenter.signInMethod(server: server, available: available)
        var tokens: OAuthTokens
        if method == .browser {
            tokens = try await Self.signInThroughBrowser(oauth, context)
        } else {
            var problem: String?
            while true {
                let credentials = try await context.presenter.credentials(
                    server: server, username: expected, problem: problem)
                do {
                    tokens = try await oauth.signIn(username: credentials.username, password: credentials.password)
                    break
                } catch  where error.code == .invalidCredentials {
                    problem = error.message
                } catch {
                    throw flowsError(error, doing: "sign in")
                }
            }
        }
        let user: ServerUser
        do {
            user = try await context.client.me(configuration, token: tokens.accessToken)
        } catch {
            try? await oauth.revoke(tokens)
            throw flowsError(error, doing: "read the signed-in user")
        }
        if let expected, user.name != expected {
            try? await oauth.revoke(tokens)
            // Name the account that did sign in, and its user here if it has one, so the app can offer to restore
            // that user or onboard that account.
            let signedIn = await context.users.user(serverUserID: user.name)
            throw FlowsError(
                .userMismatch,
                context.flowType == .resetPasscode
                    ? "This passcode reset is for \(expected), but \(user.name) signed in; sign in as \(expected)."
                    : "This is \(expected)'s session, but \(user.name) signed in; sign in as \(expected).",
                onboardingID: signedIn?.status == .success ? signedIn?.onboardingID : nil, serverUserID: user.name)
        }
        if expected == nil, let existing = await context.users.user(serverUserID: user.name),
            existing.onboardingID != context.onboardingID
        {
            try? await oauth.revoke(tokens)
            throw FlowsError(
                .userAlreadyExists,
                "\(existing.displayName) is already a user of this device; choose them in the user list instead.",
                onboardingID: existing.onboardingID)
        }
        context.info[.tokens] = tokens
        context.info[.serverUser] = user
        if var entry = await context.users.user(context.onboardingID) {
            entry.serverUserID = user.name
            entry.displayName = user.displayName
            entry.role = user.role
            try await context.users.upsert(entry)
        }
    }
}
