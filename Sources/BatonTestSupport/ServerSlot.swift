import Testing

/// At most ``ServerSlots/capacity`` tests with this trait run at once.
///
/// Swift Testing starts every test of the package at once, and each test that serves Baton holds a server's
/// databases and sockets (about ten descriptors): a hundred at once pushed the test process past 1,360 open
/// descriptors, where Foundation's `Process.run()` on Linux reads past its `/proc/self/fd` listing and crashes
/// the whole run (SIGSEGV). Suites that start servers take a slot per test case; the rest run freely.
public struct ServerSlotTrait: SuiteTrait, TestTrait, TestScoping {
    /// The semaphore this trait's tests take a slot of.
    let slots: ServerSlots

    public var isRecursive: Bool { true }

    /// Each test case, not the suite, takes a slot.
    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase == nil ? nil : self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        await slots.acquire()
        do {
            try await function()
        } catch {
            await slots.release()
            throw error
        }
        await slots.release()
    }
}

extension Trait where Self == ServerSlotTrait {
    /// The test (or each test of the suite) holds one of the few server slots while it runs.
    public static var serverSlot: Self { Self(slots: .shared) }

    /// The test (or each test of the suite) runs alone among those that drive a real user interface against a
    /// clock — the terminal app through pexpect, the cockpit in chromium: each waits tens of seconds at most for
    /// a screen, and two of them at once on two cores (a browser rendering beside an app deriving passcode keys)
    /// made one miss its screen. List it after ``serverSlot`` (slots are always taken in that order).
    public static var interactiveSlot: Self { Self(slots: .interactive) }
}

/// A counting semaphore for tests, first come first served.
public actor ServerSlots {
    /// How many tests may hold a slot at once: enough to keep two cores busy while some wait on sockets.
    public static let capacity = 8
    public static let shared = ServerSlots(capacity: capacity)
    /// The slot of ``Testing/Trait/interactiveSlot``.
    public static let interactive = ServerSlots(capacity: 1)

    private var free: Int

    init(capacity: Int) { free = capacity }
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
