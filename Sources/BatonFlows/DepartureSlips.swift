import BatonClient
import Crypto
import Foundation

/// The device's departure slips: for each user registered here, the statement "this user left the device"
/// (`SignedDeparture`), signed with the device key when the user joined, while the key was at hand.
///
/// A user can leave a tablet without the server hearing of it: their secure store wiped by the passcode retry
/// limit, or removed while offline. Their secure store (and with it their copy of the device key) is gone, so the
/// device can no longer sign anything for them; the slip, kept outside any secure store, still speaks for it.
/// A slip is marked *departed* when its user leaves, and sent with the next first user's registration (so that
/// user can re-key an emptied tablet) or at the next contact; the server ends only a registration whose current
/// key the slip names. Kept sealed (AES-GCM) under a key derived from the device's registry key.
public struct DepartureSlips: Sendable {
    static let purpose = "baton-departure-slips-v1"

    struct Slip: Codable {
        var slip: SignedDeparture
        var departed: Bool
    }

    let storage: DeviceStorage
    var url: URL { storage.directory.appendingPathComponent("departures.sealed") }

    /// The slips of the device whose files are in `storage`.
    public init(storage: DeviceStorage) { self.storage = storage }

    /// Keeps `slip` for the user who onboarded as `onboardingID` (replacing an older one).
    ///
    /// - Throws: ``FlowsError`` `storage` when the file cannot be written.
    public func keep(_ slip: SignedDeparture, for onboardingID: UUID) throws(FlowsError) {
        var slips = try load()
        slips[onboardingID.uuidString.lowercased()] = Slip(slip: slip, departed: false)
        try save(slips)
    }

    /// Marks the slip of `onboardingID` departed: its user left the device, whatever the server heard.
    ///
    /// - Throws: ``FlowsError`` `storage` when the file cannot be written.
    public func depart(_ onboardingID: UUID) throws(FlowsError) {
        var slips = try load()
        guard slips[onboardingID.uuidString.lowercased()] != nil else { return }
        slips[onboardingID.uuidString.lowercased()]?.departed = true
        try save(slips)
    }

    /// The slips of users who left, for the server.
    ///
    /// - Throws: ``FlowsError`` `storage` when the file is damaged.
    public func departed() throws(FlowsError) -> [SignedDeparture] {
        try load().values.filter(\.departed).map(\.slip).sorted { $0.user < $1.user }
    }

    /// Forgets the departed slips the server has taken (or refused as stale: a slip never becomes good again).
    ///
    /// - Throws: ``FlowsError`` `storage` when the file cannot be written.
    public func forget(_ sent: [SignedDeparture]) throws(FlowsError) {
        let sent = Set(sent)
        try save(try load().filter { !($0.value.departed && sent.contains($0.value.slip)) })
    }

    func load() throws(FlowsError) -> [String: Slip] {
        guard let data = try? Data(contentsOf: url) else { return [:] }
        do {
            let box = try AES.GCM.SealedBox(combined: data)
            let plain = try AES.GCM.open(
                box, using: try storage.sealingKey(for: Self.purpose), authenticating: Data(Self.purpose.utf8))
            return try JSONDecoder().decode([String: Slip].self, from: plain)
        } catch let error as FlowsError {
            throw error
        } catch {
            throw FlowsError(.storage, "The device's departure slips (\(url.lastPathComponent)) are damaged.")
        }
    }

    func save(_ slips: [String: Slip]) throws(FlowsError) {
        let plain: Data
        let sealed: Data?
        do {
            plain = try JSONEncoder().encode(slips)
            sealed = try AES.GCM.seal(
                plain, using: try storage.sealingKey(for: Self.purpose), authenticating: Data(Self.purpose.utf8)
            ).combined
        } catch let error as FlowsError {
            throw error
        } catch {
            throw FlowsError(.storage, "Cannot seal the device's departure slips.")
        }
        guard let sealed else { throw FlowsError(.storage, "Cannot seal the device's departure slips.") }
        try storage.write(sealed, to: url)
    }
}
