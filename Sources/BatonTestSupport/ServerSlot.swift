import Testing

/// At most ``ServerSlots/capacity`` tests with this trait run at once.
///
/// Swift Testing starts every test of the package at once, and each test that serves Baton holds a server's
/// databases and sockets (about ten descriptors): a hundred at once pushed the test process past 1,360 open
/// descriptors, where Foundation's `Process.run()` on Linux reads past its `/proc/self/fd` listing and crashes
/// the whole run (SIGSEGV). Suites that start servers take a slot per test case; the rest run freely.
public struct ServerSlotTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    /// Each test case, not the suite, takes a slot.
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase == nil ? nil : self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        await ServerSlots.shared.acquire()
        do {
            try await function()
        } catch {
            await ServerSlots.shared.release()
            throw error
        }
        await ServerSlots.shared.release()
    }
}

extension Trait where Self == ServerSlotTrait {
    /// The test (or each test of the suite) holds one of the few server slots while it runs.
    public static var serverSlot: Self { Self() }
}

/// A counting semaphore for tests, first come first served.
public actor ServerSlots {
    /// How many tests may hold a slot at once: enough to keep two cores busy while some wait on sockets.
    public static let capacity = 8
    public static let shared = ServerSlots()

    private var free = ServerSlots.capacity
    private var waiting: [CheckedContinuation<Void, Never>] = []

    func acquire() async {
        if free > 0 {
            free -= 1
            return
        }
        await withCheckedContinuation { waiting.append($0) }
    }

    func release() {
        if waiting.isEmpty {
            free += 1
        } else {
            waiting.removeFirst().resume()
        }
    }
}
