import Testing

@testable import baton

struct ConsoleUITests {
    @Test func longLinesWrapAtSpacesToEightyColumnsAndShortOnesStay() {
        let message =
            "✗ The passcode was wrong 5 times; this user's secure store was wiped. Onboard again, then sign in as usual."
        let lines = ConsoleUI.wrapped(message + "\n   1  Aircraft").split(separator: "\n")
        #expect(lines.allSatisfy { $0.count <= 80 })
        #expect(lines.count == 3)
        #expect(lines[1].hasPrefix("  "))
        #expect(lines.last == "   1  Aircraft")
        #expect(lines.joined(separator: " ").replacingOccurrences(of: "   ", with: " ").contains("Onboard again, then"))
        // A word longer than the line is left whole rather than cut.
        let long = String(repeating: "x", count: 90)
        #expect(ConsoleUI.wrapped(long) == long)
    }
}
