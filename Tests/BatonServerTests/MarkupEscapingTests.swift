import BatonOData
import BatonTesting
import Foundation
import PropertyBased
import Testing

@testable import BatonServer

/// Every escaper Baton writes user text with — HTML (``Markup/html(_:)``, and the cockpit's Mustache templates
/// through it), XML (``Markup/xml(_:)``) and CSV (``Markup/csvCell(_:)``) — fed strings made of the characters
/// that matter to markup glued to code points that join them into one grapheme cluster (Prepend, Extend, ZWJ,
/// regional indicators, CR LF). A real HTML5 tokenizer (html5lib), XML parser (expat) and CSV reader (Python's
/// `csv`) then read what was written (`Interop/markup_check.py`): no element or attribute the template did not
/// write, and the text reads back as typed.
@Suite struct MarkupEscapingTests {
    /// The pieces strings are built from: markup's special characters, and code points that glue onto them.
    static let pieces: [String] = [
        "<", ">", "&", "\"", "'", "=", "+", "-", "@", "\t", "\r", "\n", "\r\n", ",", "/", " ", "a", "meta",
        "script", "x=1", "&lt;", "\u{0}",
        // Prepend: joins the *next* character into its cluster.
        "\u{600}", "\u{601}", "\u{6DD}", "\u{110BD}", "\u{D4E}",
        // Extend and spacing marks: join the *previous* character.
        "\u{300}", "\u{338}", "\u{20D2}", "\u{FE0F}", "\u{200C}", "\u{903}",
        // Zero-width joiner, regional indicators, a Hangul syllable's parts, a non-character.
        "\u{200D}", "\u{1F1E6}", "\u{1F1EA}", "\u{1100}", "\u{1161}", "\u{FFFE}", "é", "\u{1}",
    ]

    static let count = 10_000

    static func text(_ choices: [Int]) -> String {
        choices.map { pieces[$0 % pieces.count] }.joined()
    }

    /// The HTML template `html` is checked with: a double- and a single-quoted attribute, and text.
    static func htmlDocument(_ escaped: String) -> String {
        "<!doctype html><html><head><title>t</title></head><body>"
            + "<p title=\"\(escaped)\">\(escaped)</p><p title='\(escaped)'>x</p></body></html>"
    }

    /// The cockpit's message page rendered with `value` in every slot.
    static func cockpitDocument(_ value: String) -> String {
        let content =
            CockpitPages.library.render(
                ["heading": value, "text": value, "link": ["text": value, "href": "/admin"]], withTemplate: "message")
            ?? ""
        return "<!doctype html><html><head><title>t</title></head><body>\(content)</body></html>"
    }

    @Test func everyEscaperKeepsTheTemplatesStructureForGraphemeTricks() async throws {
        let missing = try await offThePool { TestPython.missing(["html5lib"]) }
        try #require(missing == nil, "\(missing ?? "")")
        var lines: [String] = []
        func add(_ kind: String, _ input: String, _ document: String, _ reference: String) {
            let entry: [String: String] = ["kind": kind, "input": input, "doc": document, "reference": reference]
            if let data = try? JSONSerialization.data(withJSONObject: entry) {
                lines.append(String(decoding: data, as: UTF8.self))
            }
        }
        await propertyCheck(count: Self.count, input: Gen.int(in: 0...999).array(of: 1...24)) { choices in
            let text = Self.text(choices)
            add("html", text, Self.htmlDocument(Markup.html(text)), Self.htmlDocument("x"))
            add("mustache", text, Self.cockpitDocument(text), Self.cockpitDocument("x"))
            add("xml", text, "<r a=\"\(Markup.xml(text))\">\(Markup.xml(text))</r>", "")
            add(
                "csv", text, "a,b,c\r\n" + [text, "x", text].map(Markup.csvCell).joined(separator: ",") + "\r\n", "")
        }
        #expect(lines.count == 4 * Self.count)
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("baton-markup-\(UUID()).jsonl")
        defer { try? FileManager.default.removeItem(at: file) }
        try Data(lines.joined(separator: "\n").utf8).write(to: file)
        let script = try #require(
            Bundle.module.url(forResource: "markup_check", withExtension: "py", subdirectory: "Interop"))
        let result = try await ServerExecutableTests.run(TestPython.executable, [script.path, file.path])
        #expect(result.status == 0, "\(result.output)\(result.error)")
        #expect(result.output.contains("\(4 * Self.count) passed, 0 failed"), "\(result.output)\(result.error)")
    }

    /// The attacks of the review, by hand: a `Character` hides the `<`, the `>`, the quote, or a CR LF.
    @Test(arguments: [
        "\u{600}<meta http-equiv=refresh content=0;url=https://evil.example>",
        "\"\u{338}><form action=/oauth/device>", "'\u{301}><b>", "a&\u{300}amp;",
    ])
    func aJoiningCodePointDoesNotHideAMarkupCharacter(attack: String) {
        for escaped in [Markup.html(attack), Markup.xml(attack)] {
            #expect(!escaped.unicodeScalars.contains { "<>\"'".unicodeScalars.contains($0) }, "\(escaped)")
        }
        // By bytes: a `Character` search would not find `<meta` behind the U+0600 it is glued to.
        #expect(Self.cockpitDocument(attack).utf8.firstRange(of: "<meta".utf8) == nil)
        #expect(Self.cockpitDocument(attack).utf8.firstRange(of: "<form".utf8) == nil)
    }

    @Test func aCRLFGraphemeCannotStartAFormulaRow() {
        let csv = AuditRow.csv([
            AuditRow(
                row: .init(
                    columns: ["id", "at", "actor", "action", "subject", "address", "detail"],
                    values: [
                        .integer(1), .real(1_795_000_000), .text("bob"), .text("sign-in"), .null, .null,
                        .text("x\r\n=cmd|' /C calc'!A0"),
                    ]))
        ])
        // One header and one row: the CR LF stays inside a quoted cell.
        #expect(csv.components(separatedBy: "\r\n").filter { !$0.isEmpty }.count == 3)
        #expect(csv.contains("\"x\r\n=cmd|' /C calc'!A0\""))
        #expect(Markup.csvCell("\r\n=1+1") == "\"'\r\n=1+1\"")
    }
}
