import Foundation
import Testing

@testable import baton

/// The validation rules of a pre-flight check, shared by the interactive prompts and `baton checks add`.
@Suite struct CheckFormTests {
    @Test(arguments: [
        ("5200", "5200"), ("0", "0"), ("400000", "400000"), ("200.5", "200.5"), (" 60 ", "60"),
    ])
    func acceptsPlainNumbersInRange(text: String, expected: String) throws {
        let value = try Measurement.fuel.parse(text).get()
        #expect("\(value)" == expected)
    }

    @Test(arguments: [
        ("", "is not a number"), ("abc", "is not a number"), ("-5", "is not a number"), ("1e3", "is not a number"),
        ("5.", "is not a number"), (".5", "is not a number"), ("5,200", "is not a number"), ("٥٢", "is not a number"),
        ("400000.1", "is outside 0–400000 kg"), ("5200.55", "more than 1 decimal place"),
    ])
    func refusesEverythingElseWithTheReason(text: String, reason: String) {
        guard case .failure(let problem) = Measurement.fuel.parse(text) else {
            Issue.record("'\(text)' was accepted")
            return
        }
        #expect(problem.message.contains(reason), "\(problem.message)")
        #expect(problem.message.hasPrefix("Fuel:"))
    }

    @Test func oilTakesTwoDecimalsAndTyresHaveAFloor() throws {
        #expect(try Measurement.oil.parse("15.25").get() == Decimal(string: "15.25"))
        #expect((try? Measurement.oil.parse("15.255").get()) == nil)
        #expect((try? Measurement.mainTyre.parse("12").get()) == nil)
    }

    @Test func remarksAndStatus() {
        #expect((try? CheckForm.parseRemarks(String(repeating: "x", count: 500)).get()) != nil)
        #expect((try? CheckForm.parseRemarks(String(repeating: "x", count: 501)).get()) == nil)
        #expect((try? CheckForm.parseRemarks("bell\u{7}").get()) == nil)
        #expect((try? CheckForm.parseStatus("FINAL").get()) == "final")
        #expect((try? CheckForm.parseStatus("done").get()) == nil)
    }
}
