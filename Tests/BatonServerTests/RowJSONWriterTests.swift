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
                var joined: [UInt8] = []
                RowJSONWriter.string(chosen.joined(), to: &joined)
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
}
