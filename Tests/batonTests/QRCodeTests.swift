import BatonTestSupport
import BatonTesting
import Foundation
import Testing

@testable import baton

/// The terminal's QR code of the sign-in page: module for module what the Python `qrcode` library draws for the
/// same text, version, level and mask, across versions 1–10, both levels and all eight masks.
@Suite struct QRCodeTests {
    static let texts: [String] = [
        "http://x.io", "http://127.0.0.1:8080/oauth/device?user_code=BDFH-KLMN",
        "https://baton.airline.example/oauth/device?user_code=WXYZ-BCDF",
        String(repeating: "https://baton.example/oauth/device?user_code=", count: 4),
        String(repeating: "ab", count: 100), String(repeating: "é", count: 60),
    ]

    @Test func everyModuleMatchesAnIndependentEncoder() async throws {
        let missing = try await offThePool { TestPython.missing(["qrcode"]) }
        try #require(missing == nil, "\(missing ?? "")")
        var cases: [[String: Any]] = []
        var codes: [QRCode] = []
        for text in Self.texts {
            for (level, name) in [(QRCode.Level.low, "L"), (.medium, "M")] {
                for mask in 0..<8 {
                    let code = try #require(QRCode(text, level: level, mask: mask), "\(text.prefix(20)) fits")
                    codes.append(code)
                    cases.append(["text": text, "level": name, "version": code.version, "mask": mask])
                }
            }
        }
        #expect(Set(codes.map(\.version)).count >= 5, "\(Set(codes.map(\.version)).sorted())")
        #expect(codes.contains { $0.version >= 7 }, "version information is exercised")
        let script = try #require(
            Bundle.module.url(forResource: "qr_oracle", withExtension: "py", subdirectory: "Terminal"))
        let input = String(decoding: try JSONSerialization.data(withJSONObject: cases), as: UTF8.self)
        let result = try await BatonExecutableTests.run(
            [script.path], executable: TestPython.executable, input: input)
        #expect(result.status == 0, "\(result.error)")
        let expected = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [[String]])
        #expect(expected.count == codes.count)
        for (index, (code, rows)) in zip(codes, expected).enumerated() {
            let drawn = code.modules.map { String($0.map { $0 ? "1" : "0" }) }
            #expect(drawn == rows, "case \(index): \(cases[index]["text"] ?? "") v\(code.version) mask \(code.mask)")
        }
    }

    @Test func theSmallestVersionAndALowPenaltyMaskAreChosen() throws {
        let url = "http://127.0.0.1:8080/oauth/device?user_code=BDFH-KLMN"
        let code = try #require(QRCode(url))
        #expect(code.version == 4 && code.size == 33)
        // The chosen mask has the lowest penalty of the eight.
        let penalties = (0..<8).map { mask in
            QRCode(url, mask: mask).map { code in
                var grid = Grid(version: code.version)
                grid.modules = code.modules
                return grid.penalty
            } ?? .max
        }
        #expect(penalties[code.mask] == penalties.min())
        // Two module rows per line, a quiet zone of two: 37 columns, 19 lines — it fits an 80x24 screen.
        let lines = code.lines()
        #expect(lines.count == 19 && lines.allSatisfy { $0.count == 37 })
        #expect(lines.first == String(repeating: "█", count: 37))
        // Longer than version 10 holds at level L: no code, the address alone is shown.
        #expect(QRCode(String(repeating: "x", count: 272)) == nil)
        #expect(QRCode(String(repeating: "x", count: 271)) != nil)
    }
}
