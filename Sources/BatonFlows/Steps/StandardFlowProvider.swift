import BatonClient
import BatonOData
import BatonSecureStore
import Crypto
import Foundation

/// Baton's standard flows, with the app's own steps after the standard ones, and the consent step when the app
/// has consent forms.
public struct StandardFlowProvider: OnboardingFlowProvider {
    /// The app's steps, run after Baton's in every flow.
    public var appSteps: [any OnboardingStep]
    /// The consent the app asks for (``ConsentStep``); none: no consent step.
    public var consentForms: [ConsentForm]

    public init(appSteps: [any OnboardingStep] = [], consentForms: [ConsentForm] = []) {
        self.appSteps = appSteps
        self.consentForms = consentForms
    }

    public func flow(for type: OnboardingFlowType) -> OnboardingFlow {
        let consent: [any OnboardingStep] = consentForms.isEmpty ? [] : [ConsentStep(forms: consentForms)]
        let onboarding: [any OnboardingStep] =
            [DiscoveryStep(), SignInStep()] + consent + [
                SettingsExchangeStep(), PasscodeStep(), DeviceRegistrationStep(), StoreKeyStep(),
            ]
        switch type {
        case .onboard, .resetPasscode, .reset:
            return OnboardingFlow(type: type, steps: onboarding + appSteps)
        case .restore:
            let steps: [any OnboardingStep] = [
                PasscodeStep(), DiscoveryStep(), SignInStep(), SettingsExchangeStep(), DeviceRegistrationStep(),
                StoreKeyStep(),
            ]
            return OnboardingFlow(type: type, steps: steps + consent + appSteps)
        case .background:
            return OnboardingFlow(type: type, steps: appSteps)
        }
    }
}
