import BatonOData
import Testing

@testable import BatonServer

@Suite struct RowJSONWriterTests {
    /// A key read's `@odata.context` is written from its pieces (the service root, the set, a `$select`) without
    /// joining them first: the bytes are those of the joined text's JSON string, whatever the pieces hold — quotes,
    /// backslashes, control characters, a combining mark next to a quote, text beyond ASCII.
    @Test func aStringWrittenInPiecesIsTheJoinedTextsString() throws {
        let pieces = [
            "http://127.0.0.1:8080/odata/", "$metadata#", "Pre\"flight", "Checks\\", "(a,\u{0001}b)", "\u{301}\"x",
            "Prüfungen", "\u{1F6EB}", "", "/$entity", "\r\n\t",
        ]
        for start in pieces.indices {
            for count in 1...min(4, pieces.count - start) {
                let chosen = Array(pieces[start..<start + count])
                let joined = JSONValue.string(chosen.joined()).serializedBytes
                var inPieces: [UInt8] = []
                switch chosen.count {
                case 1: RowJSONWriter.string(joining: chosen[0], to: &inPieces)
                case 2: RowJSONWriter.string(joining: chosen[0], chosen[1], to: &inPieces)
                case 3: RowJSONWriter.string(joining: chosen[0], chosen[1], chosen[2], to: &inPieces)
                default: RowJSONWriter.string(joining: chosen[0], chosen[1], chosen[2], chosen[3], to: &inPieces)
                }
                #expect(inPieces == joined, "\(chosen)")
                #expect(try JSONValue(parsing: inPieces) == .string(chosen.joined()))
            }
        }
    }

    /// The byte classes a column's text is judged by, for every byte value, and the plain-number check against the
    /// grammar it names, `-?(0|[1-9][0-9]*)(\.[0-9]+)?`, on edge texts and 20,000 random ones.
    @Test func columnTextIsJudgedByTheClassesItsTypeAllows() throws {
        for value in 0...255 {
            let byte = UInt8(value)
            let digit = (48...57).contains(byte)
            #expect(RowJSONWriter.isDigit(byte) == digit, "\(value)")
            #expect(
                RowJSONWriter.isLowerHexOrDash(byte) == (digit || (97...102).contains(byte) || byte == 45), "\(value)")
            #expect(RowJSONWriter.isDateTimeByte(byte) == (digit || [45, 58, 84].contains(byte)), "\(value)")
        }
        let number = try Regex(#"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$"#)
        func judged(_ text: String) -> Bool {
            Array(text.utf8).withUnsafeBufferPointer { RowJSONWriter.isPlainJSONNumber($0) }
        }
        var texts = [
            "", "-", "0", "-0", "00", "01", "-01", "1.", ".5", "1.5", "-1.50", "1..5", "1.5.", "1e5", "+1", "10", "0.0",
            "12345678901234567890.000001", "٣", "1 ", " 1", "-.5", "0x1",
        ]
        var generator = SystemRandomNumberGenerator()
        let pieces = ["0", "1", "9", "-", ".", "e", "+", " ", "a", "٣"]
        for _ in 0..<20_000 {
            texts.append(
                (0..<Int.random(in: 1...6, using: &generator)).map { _ in pieces.randomElement(using: &generator)! }
                    .joined())
        }
        for text in texts {
            #expect(judged(text) == (text.wholeMatch(of: number) != nil), "\(text)")
        }
    }

    /// The eight-at-a-time check of string bytes agrees with the byte-by-byte one: every byte value at every place
    /// of buffers of 0 to 20 bytes (so in a word and in the tail), and random buffers of plain bytes with one
    /// other byte dropped in.
    @Test func stringBytesReadEightAtATimeAreJudgedAsOneByOne() {
        for count in 0...20 {
            for place in 0..<max(count, 1) {
                for value in UInt8.min...UInt8.max {
                    var bytes = [UInt8](repeating: UInt8(ascii: "a"), count: count)
                    if count > 0 { bytes[place] = value }
                    let expected = bytes.allSatisfy(RowJSONWriter.isPlainStringByte)
                    let judged = bytes.withUnsafeBufferPointer { RowJSONWriter.allPlainStringBytes($0) }
                    #expect(judged == expected, "\(bytes)")
                    if judged != expected { return }
                }
            }
        }
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2_000 {
            var bytes = (0..<Int.random(in: 1...64, using: &generator)).map { _ in
                UInt8.random(in: 0x20...0x7E, using: &generator)
            }
            bytes[Int.random(in: bytes.indices, using: &generator)] = UInt8.random(in: .min ... .max, using: &generator)
            let expected = bytes.allSatisfy(RowJSONWriter.isPlainStringByte)
            #expect(bytes.withUnsafeBufferPointer { RowJSONWriter.allPlainStringBytes($0) } == expected, "\(bytes)")
        }
    }
}
