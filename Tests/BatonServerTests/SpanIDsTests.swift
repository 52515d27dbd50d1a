import Testing

@testable import BatonServer

@Suite struct SpanIDsTests {
    /// The server's span ids are distinct and never all zeros within a process, and two generators (two processes)
    /// start at different places.
    @Test func spanIDsAreDistinctNonZeroAndSeededApart() {
        let ids = SpanIDs()
        var seen = Set<String>()
        for _ in 0..<100_000 {
            let id = ids.next().description
            #expect(id.count == 16 && id != String(repeating: "0", count: 16))
            #expect(seen.insert(id).inserted, "\(id) twice")
        }
        #expect(seen.count == 100_000)
        let other = SpanIDs()
        #expect(!seen.contains(other.next().description))
    }
}
