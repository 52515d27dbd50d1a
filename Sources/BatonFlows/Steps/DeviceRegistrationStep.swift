import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Creates the user's P-256 signing key in their secure store and registers its public half for this device,
/// so the server can verify changes they made here even when another user uploads them.
///
/// The server registers a user on a device only with the device's approval: a signature by the device key,
/// which lives in the secure stores of the device's users. The first user of a device creates the device key;
/// a user added from an open session gets it from that session; otherwise a user already on the device
/// approves with their passcode (``OnboardingPresenter/approver(for:among:problem:)``). A user registered on
/// the device before (a passcode reset) needs no approval. So a tablet's files and someone's password are not
/// enough to join it and receive its store key.
public struct DeviceRegistrationStep: OnboardingStep {
    public var name: String { "device registration" }
    public init() {}

    public func onboard(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        guard let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens] else {
            throw FlowsError(.stepFailed, "Device registration needs discovery and sign-in before it.")
        }
        let key = P256.Signing.PrivateKey()
        try await save(key.rawRepresentation, SecureStoreKey.signingKey, in: store)
        var deviceKey = context.info[.deviceKey].flatMap { try? P256.Signing.PrivateKey(rawRepresentation: $0) }
        let others = await context.users.activeUsers.filter { $0.onboardingID != context.onboardingID }
        if deviceKey == nil && others.isEmpty { deviceKey = P256.Signing.PrivateKey() }
        let user = context.info[.serverUser]?.name ?? ""
        // The first user of an emptied tablet sends the slips of users who left it offline (a store wiped by the
        // retry limit): the server ends their registrations, and this user re-keys the tablet.
        let slips = DepartureSlips(storage: context.storage)
        let departures = others.isEmpty ? (try? slips.departed()) ?? [] : []
        func register(_ deviceKey: P256.Signing.PrivateKey?) async throws(BatonClientError) {
            var proof: Data?
            if let deviceKey {
                let message = Self.joinMessage(device: context.deviceID, user: user, key: key.publicKey)
                proof = try? deviceKey.signature(for: message).rawRepresentation
            }
            try await context.client.registerDevice(
                configuration, deviceID: context.deviceID, publicKey: key.publicKey.x963Representation,
                deviceKey: deviceKey?.publicKey.x963Representation, deviceProof: proof, departures: departures,
                token: tokens.accessToken)
        }
        do {
            try await register(deviceKey)
        } catch  where error.serverCode == "DeviceProofRequired" && deviceKey == nil && !others.isEmpty {
            // The display name alone could be anyone's (an identity provider's `name` claim is not unique): the
            // person approving sees the account too.
            let newcomer =
                context.info[.serverUser].map { $0.displayName == $0.name ? $0.name : "\($0.displayName) (\($0.name))" }
                ?? user
            let approved = try await Self.approvedDeviceKey(&context, others: others, newUser: newcomer)
            do { try await register(approved) } catch { throw flowsError(error, doing: "register this device") }
            deviceKey = approved
        } catch {
            throw flowsError(error, doing: "register this device")
        }
        try? slips.forget(departures)
        if let deviceKey {
            try await save(deviceKey.rawRepresentation, SecureStoreKey.deviceKey, in: store)
            context.info[.deviceKey] = deviceKey.rawRepresentation
            // This user's own slip, signed now while the device key is at hand.
            if let slip = try? SignedDeparture(
                deviceID: context.deviceID, user: user, keyID: Self.keyID(of: key.publicKey), deviceKey: deviceKey)
            {
                try slips.keep(slip, for: context.onboardingID)
            }
        }
        context.info[.signingKey] = key.rawRepresentation
        context.info[.registeredDevice] = true
    }

    /// The bytes the device key signs to let `user` register `key` here (as the server checks them).
    static func joinMessage(device: String, user: String, key: P256.Signing.PublicKey) -> Data {
        Data(DeviceJoin.message(device: device, user: user, keyID: keyID(of: key)))
    }

    /// A signing key's id as the server names it: base64url of the SHA-256 of its X9.63 form.
    static func keyID(of key: P256.Signing.PublicKey) -> String {
        Data(SHA256.hash(data: key.x963Representation)).base64URLEncoded
    }

    /// The device key from the secure store of a user of this device who approves, asked until the passcode is
    /// right (wrong passcodes count against that user's retry limit, as at unlock).
    static func approvedDeviceKey(_ context: inout OnboardingContext, others: [UserManager.User], newUser: String)
        async throws -> P256.Signing.PrivateKey
    {
        var problem: String?
        while true {
            let (id, passcode) = try await context.presenter.approver(for: newUser, among: others, problem: problem)
            let approver = others.first { $0.onboardingID == id }?.displayName ?? "that user"
            let store: SecureStore
            do {
                store = try SecureStore.open(at: context.storage.secureStoreURL(for: id), passcode: passcode)
            } catch  where error.code == .wrongPasscode {
                problem = error.message
                continue
            } catch {
                throw FlowsError(.stepFailed, "\(approver) cannot approve: \(error.message)")
            }
            guard let raw = try? await store.value(Data.self, forKey: SecureStoreKey.deviceKey),
                let key = try? P256.Signing.PrivateKey(rawRepresentation: raw)
            else {
                problem =
                    "\(approver)'s secure store holds no device key (onboarded before device keys); another user approves."
                continue
            }
            return key
        }
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        let store = try context.requireSecureStore(for: name)
        context.info[.signingKey] = try await load(Data.self, SecureStoreKey.signingKey, from: store, step: name)
        context.info[.deviceKey] = try? await store.value(Data.self, forKey: SecureStoreKey.deviceKey)
    }

    public func reset(_ context: inout OnboardingContext) async {
        guard context.flowType == .reset || context.info[.registeredDevice] == true,
            let configuration = context.info[.serverConfiguration], let tokens = context.info[.tokens]
        else { return }
        try? await context.client.unregisterDevice(
            configuration, deviceID: context.deviceID, token: tokens.accessToken)
        context.info[.registeredDevice] = nil
    }
}
