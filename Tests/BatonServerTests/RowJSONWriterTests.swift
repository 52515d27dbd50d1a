import BatonOData
import BatonSQL
import GRDB
import GRDBSQLite
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
            #expect(RowJSONWriter.isLowerHex(byte) == (digit || (97...102).contains(byte)), "\(value)")
        }
        // A shape holds its classes at their places only.
        func shaped(_ text: String, _ shape: [UInt8]) -> Bool {
            Array(text.utf8).withUnsafeBufferPointer { RowJSONWriter.has($0, shape: shape) }
        }
        #expect(shaped("0f8fad5b-d9cb-469f-a165-70867728950e", RowJSONWriter.guidShape))
        #expect(!shaped("0f8fad5bd-9cb-469f-a165-70867728950e", RowJSONWriter.guidShape))
        #expect(!shaped("0f8fad5b-d9cb-469f-a165-70867728950E", RowJSONWriter.guidShape))
        #expect(!shaped("0f8fad5b-d9cb-469f-a165-70867728950", RowJSONWriter.guidShape))
        #expect(shaped("2026-11-28", RowJSONWriter.dateShape))
        #expect(!shaped("----------", RowJSONWriter.dateShape))
        #expect(!shaped("2026-11:28", RowJSONWriter.dateShape))
        #expect(shaped("2026-11-28T12:00:59", RowJSONWriter.dateTimeShape))
        #expect(!shaped("TTTTTTTTTTTTTTTTTTT", RowJSONWriter.dateTimeShape))
        #expect(!shaped("2026-11-28T12-00:59", RowJSONWriter.dateTimeShape))
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

    /// A value copied as it is is the general path's bytes (decoded, then formatted), for every type the copy takes
    /// and on each edge of its shapes (a fraction of all zeros, of some, of one digit, PostgreSQL's six digits;
    /// decimals as the server stores them, canonical); a value of another shape — the right classes of bytes in the
    /// wrong places among them — leaves the page as it was, for the general path to write or refuse.
    @Test func aValueCopiedAsItIsIsWhatTheGeneralPathWrites() throws {
        let prefix = Array("[earlier".utf8)
        let copied: [(EdmPrimitiveType, SQLValue)] = [
            (.string, .text("Ready for departure")), (.string, .text("")), (.decimal, .text("-12.5")),
            (.decimal, .text("0")), (.guid, .text("0f8fad5b-d9cb-469f-a165-70867728950e")),
            (.dateTimeOffset, .text("2026-11-28T12:00:00.000000000000Z")),
            (.dateTimeOffset, .text("2026-11-28T12:00:00.120000000000Z")),
            (.dateTimeOffset, .text("2026-11-28T12:00:00.123456Z")),
            (.dateTimeOffset, .text("2026-11-28T12:00:00.000000000001Z")),
            (.dateTimeOffset, .text("2026-11-28T12:00:00.5Z")), (.dateTimeOffset, .text("2026-11-28T12:00:00.0Z")),
            (.date, .text("2026-11-28")), (.boolean, .integer(1)), (.boolean, .integer(0)), (.int32, .integer(-42)),
            (.int64, .integer(.max)), (.int64, .integer(.min)), (.string, .null),
        ]
        for (type, value) in copied {
            var out = prefix
            let column = RowJSONWriter.Column(index: 0, type: type, key: 0..<0)
            let wrote = RowJSONWriter.copyValue(value, column: column, to: &out)
            let general = try SQLDialect.sqlite.decode(value, as: type, column: "Name").json(as: type).serializedBytes
            #expect(wrote, "\(type) \(value)")
            #expect(out == prefix + general, "\(type) \(value)")
        }
        let refused: [(EdmPrimitiveType, SQLValue)] = [
            (.string, .text("say \"hi\"")), (.string, .text("Prüfung")), (.decimal, .text("1e5")),
            (.decimal, .text("01")), (.guid, .text("0F8FAD5B-D9CB-469F-A165-70867728950E")),
            (.dateTimeOffset, .text("2026-11-28T12:00:00Z")), (.dateTimeOffset, .text("2026-11-28T12:00:00.Z")),
            (.dateTimeOffset, .text("2026-11-28T12:00:00.0000000000000Z")),
            (.dateTimeOffset, .text("TTTTTTTTTTTTTTTTTTT.1Z")), (.date, .text("2026-11-2x")),
            (.date, .text("----------")), (.date, .text("2026111128")),
            (.dateTimeOffset, .text("2026-11-28112:00:00.1Z")), (.guid, .text("0f8fad5b0d9cb0469f0a165070867728950e")),
            (.guid, .text("0f8fad5bd-9cb-469f-a165-70867728950e")),
            (.double, .text("1.5")),
            (.double, .real(1.5)), (.string, .integer(3)),
        ]
        for (type, value) in refused {
            var out = prefix
            let column = RowJSONWriter.Column(index: 0, type: type, key: 0..<0)
            let wrote = RowJSONWriter.copyValue(value, column: column, to: &out)
            #expect(!wrote, "\(type) \(value)")
            #expect(out == prefix, "\(type) \(value)")
        }
    }

    /// A whole row whose copied and converted columns alternate names each property once, in order, with the
    /// general path's bytes: through SQLite's statement, and through the values of another engine's cursor.
    @Test func aRowMixingCopiedAndConvertedColumnsNamesEachPropertyOnce() throws {
        let type = EntityType(
            name: "Check", key: ["ID"],
            properties: [
                Property(name: "ID", type: .guid), Property(name: "Note", type: .string),
                Property(name: "Fuel", type: .decimal), Property(name: "Done", type: .boolean),
                Property(name: "At", type: .dateTimeOffset), Property(name: "Ratio", type: .double),
                Property(name: "Crew", type: .string),
            ])
        let names = ["ID", "Note", "Fuel", "Done", "At", "Ratio", "Crew", "$seq"]
        let values: [SQLValue] = [
            .text("0f8fad5b-d9cb-469f-a165-70867728950e"), .text("say \"hi\" to Prüfung"), .text("12.5"),
            .integer(1), .text("2026-11-28T12:00:00.120000000000Z"), .real(0.5), .null, .integer(7),
        ]
        var expected = Array(#"{"@odata.etag":"W/\"7\"""#.utf8)
        for (name, value) in zip(names.dropLast(), values) {
            let property = try #require(type.property(named: name))
            expected += Array(",\(JSONValue.string(name).serialized):".utf8)
            expected += try SQLDialect.sqlite.decode(value, as: property.type, column: name).json(as: property.type)
                .serializedBytes
        }
        expected.append(UInt8(ascii: "}"))
        let writer = RowJSONWriter(names: names, type: type)

        struct Row: SQLCursor {
            let columnNames: [String]
            let values: [SQLValue]
            func value(at index: Int) -> SQLValue { values[index] }
        }
        var fromValues: [UInt8] = []
        #expect(try writer.write(Row(columnNames: names, values: values), dialect: .sqlite, to: &fromValues) == 7)
        #expect(fromValues == expected, "\(String(decoding: fromValues, as: UTF8.self))")

        let database = try DatabaseQueue()
        let fromSQLite = try database.read { db in
            let statement = try db.makeStatement(
                sql: "SELECT " + names.indices.map { "? AS \"\(names[$0])\"" }.joined(separator: ", "))
            try statement.bind(values)
            #expect(sqlite3_step(statement.sqliteStatement) == SQLITE_ROW)
            var out: [UInt8] = []
            #expect(try writer.write(statement.sqliteStatement, to: &out) == 7)
            sqlite3_reset(statement.sqliteStatement)
            return out
        }
        #expect(fromSQLite == expected, "\(String(decoding: fromSQLite, as: UTF8.self))")
        let parsed = try JSONValue(parsing: fromSQLite)
        guard case .object(let members) = parsed else {
            Issue.record("Not an object: \(parsed)")
            return
        }
        #expect(members.map(\.0) == ["@odata.etag"] + names.dropLast())
    }
}
