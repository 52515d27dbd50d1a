import Foundation

/// The kinds of flow (SAP: OnboardingFlow.FlowType).
public enum OnboardingFlowType: String, Sendable, Hashable, CaseIterable {
    /// A new user on this device: sign in, create a passcode, register the device.
    case onboard
    /// A known user comes back: passcode, then everything from their secure store (works offline).
    case restore
    /// The user forgot their passcode: sign in again as the same account, new passcode, new store.
    case resetPasscode
    /// Undo everything for a user (removal): every step's reset.
    case reset
    /// The app goes to the background.
    case background
}

/// One step of a flow (SAP: OnboardingStep). Each kind of flow calls the matching method; the defaults do
/// nothing, so a step implements only what it takes part in. `reset` undoes what the step did and runs for
/// every step when a flow fails or a user is removed; it must not throw.
public protocol OnboardingStep: Sendable {
    /// A short name for messages ("sign-in", "passcode").
    var name: String { get }
    func onboard(_ context: inout OnboardingContext) async throws
    func restore(_ context: inout OnboardingContext) async throws
    func resetPasscode(_ context: inout OnboardingContext) async throws
    func background(_ context: inout OnboardingContext) async throws
    func reset(_ context: inout OnboardingContext) async
}

extension OnboardingStep {
    public func onboard(_ context: inout OnboardingContext) async throws {}
    public func restore(_ context: inout OnboardingContext) async throws {}
    public func resetPasscode(_ context: inout OnboardingContext) async throws { try await onboard(&context) }
    public func background(_ context: inout OnboardingContext) async throws {}
    public func reset(_ context: inout OnboardingContext) async {}
}

/// What to do after a step failed (SAP: OnboardingErrorDisposition).
public enum OnboardingErrorDisposition: Sendable, Hashable {
    /// Run the failed step again.
    case retry
    /// Stop the flow: every step's reset runs and the error is reported.
    case stop
}

/// Decides what happens when a step fails. Without one, a failed step stops the flow.
public protocol OnboardingErrorHandling: Sendable {
    func disposition(for error: any Error, in step: any OnboardingStep, flow: OnboardingFlowType, attempt: Int) async
        -> OnboardingErrorDisposition
}

/// A list of steps run in order for one kind of flow (SAP: OnboardingFlow).
public struct OnboardingFlow: Sendable {
    public var type: OnboardingFlowType
    public var steps: [any OnboardingStep]

    public init(type: OnboardingFlowType, steps: [any OnboardingStep]) {
        self.type = type
        self.steps = steps
    }

    /// Runs the steps. When one fails and the error handler does not ask for a retry, every step's `reset`
    /// runs (last step first) and the error is thrown — wrapped in a ``FlowsError`` naming the step unless
    /// it already is one.
    public func run(_ context: inout OnboardingContext, errorHandler: (any OnboardingErrorHandling)? = nil)
        async throws(FlowsError)
    {
        context.flowType = type
        if type == .reset {
            for step in steps.reversed() { await step.reset(&context) }
            return
        }
        for (index, step) in steps.enumerated() {
            await context.presenter.progress(step.name, fraction: Double(index) / Double(steps.count))
            var attempt = 1
            while true {
                do {
                    try Task.checkCancellation()
                    switch type {
                    case .onboard: try await step.onboard(&context)
                    case .restore: try await step.restore(&context)
                    case .resetPasscode: try await step.resetPasscode(&context)
                    case .background: try await step.background(&context)
                    case .reset: break
                    }
                    break
                } catch {
                    let disposition =
                        await errorHandler?.disposition(for: error, in: step, flow: type, attempt: attempt) ?? .stop
                    if disposition == .retry {
                        attempt += 1
                        continue
                    }
                    for undo in steps.reversed() { await undo.reset(&context) }
                    throw Self.flowsError(error, step: step)
                }
            }
        }
        await context.presenter.progress("done", fraction: 1)
    }

    static func flowsError(_ error: any Error, step: any OnboardingStep) -> FlowsError {
        if let error = error as? FlowsError { return error }
        if error is CancellationError { return FlowsError(.cancelled, "The flow was cancelled.") }
        return FlowsError(.stepFailed, "Step '\(step.name)' failed: \(error)")
    }
}

/// Supplies the flow for each kind (SAP: the app's flow provider). ``StandardFlowProvider`` gives Baton's
/// standard steps plus the app's own.
public protocol OnboardingFlowProvider: Sendable {
    func flow(for type: OnboardingFlowType) -> OnboardingFlow
}
