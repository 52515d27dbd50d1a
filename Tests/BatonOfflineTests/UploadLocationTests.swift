import Foundation
import Testing

@testable import BatonOffline

/// Where a resumable photo upload sends its chunks (and the session's token with them): only the service's own
/// scheme, host and port, whatever `Location` the answer names.
@Suite struct UploadLocationTests {
    let service = URL(string: "https://baton.example.com:8443/odata/CheckPhotos") ?? URL(fileURLWithPath: "/")

    @Test func theServicesOwnPlacesAreTaken() {
        let absolute = OfflineStore.uploadLocation("https://baton.example.com:8443/odata/$uploads/1", service: service)
        #expect(absolute?.absoluteString == "https://baton.example.com:8443/odata/$uploads/1")
        let relative = OfflineStore.uploadLocation("/odata/$uploads/2", service: service)
        #expect(relative?.absoluteString == "https://baton.example.com:8443/odata/$uploads/2")
        #expect(OfflineStore.uploadLocation("HTTPS://BATON.example.com:8443/x", service: service) != nil)
    }

    @Test(arguments: [
        "https://attacker.example/odata/$uploads/1", "http://baton.example.com:8443/odata/$uploads/1",
        "https://baton.example.com/odata/$uploads/1", "https://baton.example.com:8444/odata/$uploads/1",
        "//attacker.example/odata/$uploads/1", "https://baton.example.com:8443@attacker.example/x",
        "https://baton.example.com.attacker.example:8443/x",
        // Hosts and schemes compare by byte with ASCII case folded: a combining mark makes another host.
        "https://baton.example.com\u{301}:8443/x",
    ])
    func anotherPlaceIsRefused(location: String) {
        #expect(OfflineStore.uploadLocation(location, service: service) == nil)
    }

    @Test func noLocationIsNoPlace() {
        #expect(OfflineStore.uploadLocation(nil, service: service) == nil)
    }
}
