import BatonTestSupport
import Testing

@testable import BatonServer

@Suite(.serverSlot, .timeLimit(.minutes(10))) struct SignInTimingTests {
    /// Unknown user names are checked against a decoy hash of the same bcrypt cost as real passwords, so the
    /// answer takes as long as for a real user with a wrong password.
    @Test(arguments: [UInt8(4), 6, 12])
    func theDecoyHashHasTheConfiguredCost(cost: UInt8) {
        let cost2 = cost < 10 ? "0\(cost)" : "\(cost)"
        #expect(UserDirectory.decoyHash(cost: cost).hasPrefix("$2b$\(cost2)$"))
        #expect(UserDirectory.decoyHash(cost: cost) == UserDirectory.decoyHash(cost: cost))
    }
}
