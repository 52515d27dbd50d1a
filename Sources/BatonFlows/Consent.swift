import Foundation

/// What a person agrees to (SAP: the user consent step's forms).
public enum ConsentKind: String, Sendable, Hashable, Codable, CaseIterable {
    /// The app stores and sends the person's work data (their checks, their name on them). Required: without
    /// it the person cannot use the app.
    case data
    /// The app records how it is used (app start, sign-in, switch, sync counts and durations, error codes —
    /// no personal data, no values) and sends it with the next sync. Optional.
    case usage
}

/// One consent question as the app words it.
public struct ConsentForm: Sendable, Hashable {
    public var kind: ConsentKind
    public var title: String
    /// What the person agrees to, in full.
    public var text: String

    public init(kind: ConsentKind, title: String, text: String) {
        self.kind = kind
        self.title = title
        self.text = text
    }

    /// Whether declining stops the onboarding (data consent).
    public var isRequired: Bool { kind == .data }
}

/// A user's answers, kept per user on the device and changeable later.
public struct Consent: Sendable, Hashable, Codable {
    /// The answer per kind asked; a kind never asked is absent.
    public var answers: [ConsentKind: Bool]
    /// When the person last answered or changed an answer.
    public var decidedAt: Date

    public init(answers: [ConsentKind: Bool], decidedAt: Date) {
        self.answers = answers
        self.decidedAt = decidedAt
    }

    /// Whether the person agreed to `kind` (never asked is no).
    public func agreed(to kind: ConsentKind) -> Bool { answers[kind] == true }
}

extension FlowsError.Code {
    /// The person declined a required consent (data): they cannot onboard. Nothing of theirs stays on the device.
    public static let consentDeclined = FlowsError.Code("ConsentDeclined")
}

/// The optional consent step (SAP: UserConsentStep): asks each form of the app once per user and keeps the
/// answers in the user registry. Onboarding asks after sign-in and before a passcode is set, so a person who
/// declines data consent leaves nothing behind; a restore asks only what this user was never asked (forms an
/// app update added). A passcode reset keeps the answers. ``OnboardingSessionManager/changeConsent(_:to:)``
/// changes them later.
public struct ConsentStep: OnboardingStep {
    public var name: String { "consent" }
    public var forms: [ConsentForm]

    public init(forms: [ConsentForm]) { self.forms = forms }

    public func onboard(_ context: inout OnboardingContext) async throws {
        try await ask(&context)
    }

    public func restore(_ context: inout OnboardingContext) async throws {
        try await ask(&context)
    }

    func ask(_ context: inout OnboardingContext) async throws {
        guard var user = await context.users.user(context.onboardingID) else { return }
        var consent = user.consent ?? Consent(answers: [:], decidedAt: context.configuration.now())
        let unanswered = forms.filter { consent.answers[$0.kind] == nil }
        guard !unanswered.isEmpty else { return }
        for form in unanswered {
            let agreed = try await context.presenter.consent(form, user: user.displayName)
            if form.isRequired, !agreed {
                let outcome =
                    context.flowType == .restore
                    ? "they cannot use it until they agree" : "nothing of theirs was kept"
                throw FlowsError(
                    .consentDeclined,
                    "\(user.displayName) did not agree to \(form.title.lowercased()): without it Baton cannot be used on this device, so \(outcome).",
                    onboardingID: context.onboardingID)
            }
            consent.answers[form.kind] = agreed
        }
        consent.decidedAt = context.configuration.now()
        user.consent = consent
        try await context.users.upsert(user)
    }
}
