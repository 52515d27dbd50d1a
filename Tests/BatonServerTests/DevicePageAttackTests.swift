import BatonServer
import BatonTestSupport
import BatonTesting
import Foundation
import HTTPTypes
import HummingbirdTesting
import Testing

/// The device page (RFC 8628) under attack from people without an account: guessing codes and denying them
/// from many addresses must slow only those addresses, never lock a person with a good code out, and never make
/// room for more codes than the caps allow. Also the sign-in page's `state`, which the page reflects.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct DevicePageAttackTests {
    /// Posts the device page's form from `address` (through the trusted proxy's `X-Forwarded-For`).
    static func post(
        _ client: any TestClientProtocol, from address: String, code: String, action: String,
        password: String = "correct-horse-battery"
    ) async throws -> HTTPResponse.Status {
        var headers = formHeaders
        headers[try #require(HTTPField.Name("X-Forwarded-For"))] = address
        return try await client.execute(
            uri: "/oauth/device", method: .post, headers: headers,
            body: formBody([("user_code", code), ("username", "alice"), ("password", password), ("action", action)])
        ) { $0.status }
    }

    @Test func wrongCodesFromOtherAddressesNeverKeepAPersonWithAGoodCodeOut() async throws {
        try await SecurityTests.liveWithDeviceCodes(perAddress: 50, maximum: 1_000) { _, client, start in
            // Ten addresses each guess far past their limit, approving and denying.
            for network in 1...10 {
                var statuses: [HTTPResponse.Status] = []
                for guess in 0..<14 {
                    let code = "BBBB-" + String(repeating: "CDFGH".map(String.init)[guess % 5], count: 4)
                    statuses.append(
                        try await Self.post(
                            client, from: "198.51.100.\(network)", code: code,
                            action: guess.isMultiple(of: 2) ? "approve" : "deny"))
                }
                #expect(statuses.first == .badRequest)
                #expect(statuses.last == .tooManyRequests, "\(statuses)")
            }
            // A person at another address, with a real code and the right password, is let in.
            let tablet = try await start("192.0.2.20")
            let code = try #require(tablet.body["user_code"] as? String)
            #expect(try await Self.post(client, from: "192.0.2.21", code: code, action: "approve") == .ok)
            // And another person may deny a real code on their own device.
            let other = try await start("192.0.2.30")
            let otherCode = try #require(other.body["user_code"] as? String)
            #expect(try await Self.post(client, from: "192.0.2.31", code: otherCode, action: "deny") == .ok)
            // An IPv6 /64 counts as one address: guesses from its other hosts wait too.
            for host in 1...12 {
                _ = try await Self.post(client, from: "2001:db8:1:2::\(host)", code: "BBBB-CCCC", action: "approve")
            }
            #expect(
                try await Self.post(client, from: "2001:db8:1:2::99", code: "BBBB-DDDD", action: "approve")
                    == .tooManyRequests)
            #expect(
                try await Self.post(client, from: "2001:db8:1:3::1", code: "BBBB-DDDD", action: "approve")
                    == .badRequest)
        }
    }

    @Test func denyingIsBoundedPerAddress() async throws {
        try await SecurityTests.liveWithDeviceCodes(perAddress: 500, maximum: 1_000) { _, client, start in
            var statuses: [HTTPResponse.Status] = []
            for _ in 0..<30 {
                let code = try #require(try await start("198.51.100.7").body["user_code"] as? String)
                statuses.append(try await Self.post(client, from: "198.51.100.7", code: code, action: "deny"))
            }
            #expect(statuses.first == .ok)
            #expect(statuses.last == .tooManyRequests, "\(statuses)")
        }
    }

    @Test func deniedCodesHoldTheirPlaceUntilTheyExpire() async throws {
        try await SecurityTests.liveWithDeviceCodes(perAddress: 3, maximum: 1_000) { server, client, start in
            for _ in 0..<3 {
                let code = try #require(try await start("198.51.100.1").body["user_code"] as? String)
                #expect(try await Self.post(client, from: "198.51.100.1", code: code, action: "deny") == .ok)
            }
            #expect(try await start("198.51.100.1").status == .tooManyRequests)
            server.clock.advance(by: 601)
            #expect(try await start("198.51.100.1").status == .ok)
        }
    }

    /// RFC 6749 §4.1.2.1: the page refuses a `state` it would have to reflect outside printable ASCII or past 512
    /// bytes, with a 400 shown to the person (never a redirect).
    @Test(arguments: [
        String(repeating: "a", count: 513), "\u{600}\"><form action=/oauth/device method=post>", "a\u{301}", "x\ny",
    ])
    func theSignInPageRefusesAStateItCouldNotReflectSafely(state: String) async throws {
        try await SecurityTests.live { _, client in
            func page(state: String) async throws -> (status: HTTPResponse.Status, text: String) {
                let query = AuthorizationCodeTests.authorization.map { name, value in
                    let value = name == "state" ? state : value
                    return "\(name)=\(value.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")"
                }
                return try await client.page("/oauth/authorize?" + query.joined(separator: "&"))
            }
            let (status, text) = try await page(state: state)
            #expect(status == .badRequest, "\(text)")
            #expect(text.contains("state must be at most 512 printable ASCII"))
            #expect(!text.contains("<form action=/oauth/device"))
            // 512 printable characters are fine.
            #expect(try await page(state: String(repeating: "~", count: 512)).status == .ok)
        }
    }
}
