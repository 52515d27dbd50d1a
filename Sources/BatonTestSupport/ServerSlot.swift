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

/// One test with this trait runs at a time: the tests that drive a real user interface against a clock — the
/// terminal app through pexpect, the cockpit in chromium — each wait tens of seconds at most for a screen, and
/// two of them at once on two cores (a browser rendering beside an app deriving passcode keys) made one miss
/// its screen. List it after ``ServerSlotTrait/serverSlot`` (slots are always taken in that order).
public struct InteractiveSlotTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase == nil ? nil : self
    }

    public func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        await ServerSlots.interactive.acquire()
        do {
            try await function()
        } catch {
            await ServerSlots.interactive.release()
            throw error
        }
        await ServerSlots.interactive.release()
    }
}

extension Trait where Self == InteractiveSlotTrait {
    /// The test (or each test of the suite) runs alone among those that drive a real user interface.
    public static var interactiveSlot: Self { Self() }
}

/// A counting semaphore for tests, first come first served.
public actor ServerSlots {
    /// How many tests may hold a slot at once: enough to keep two cores busy while some wait on sockets.
    public static let capacity = 8
    public static let shared = ServerSlots(capacity: capacity)
    /// The slot of ``InteractiveSlotTrait``.
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
