import BatonSQLGRDB
import Foundation
import GRDB
import GRDBSQLite
import Hummingbird
import PostgresNIO
import Synchronization

/// Routes on the bare Hummingbird application that read what the data service's key read, filtered page and delta
/// page read, plainly, and answer the bytes the data service answers to that request, captured before they run: on
/// SQLite by GRDB from the server's data file (read-only connections used in place, on the request's thread, as the
/// server reads), on PostgreSQL by a plain postgres-nio client with prepared statements. No token, no OData, no JSON
/// written: a floor under each read — its rows read and its answer sent — measured beside it, so a target above its
/// share cannot be met on this machine, and the distance from a row to its floor is the server's own cost.
struct FloorRoutes: Sendable {
    enum Source: Sendable {
        case sqlite(SQLiteReaders)
        case postgres(PostgresClient)
    }

    let source: Source
    let answers: FloorAnswers

    static let columns =
        #""ID", "TailNumber", "FlightNumber", "FuelKg", "TyrePressureMainPsi", "TyrePressureNosePsi", "OilQuarts", "Remarks", "Status", "CheckedBy", "UploadedBy", "ChangedAt""#

    func add(to router: Router<BasicRequestContext>) {
        router.get("/floor/key/:id") { _, context in
            let id = try context.parameters.require("id")
            return try answer(try await keyRead(id), .key)
        }
        router.get("/floor/page") { _, _ in try answer(try await page(), .page) }
        router.get("/floor/delta") { _, _ in try answer(try await delta(), .delta) }
        // The same rows written as JSON, the least a writer can do (SQLite only).
        guard case .sqlite(let readers) = source else { return }
        router.get("/floor/page-json") { _, _ in
            json(try readers.json(Self.pageSQL, [50_000, "final", 50], numbers: Self.decimals))
        }
        router.get("/floor/delta-json") { _, _ in
            json(try readers.json(Self.deltaSQL, [100], numbers: Self.decimals))
        }
    }

    /// The filtered page's statement, as the server's translator writes it (for SQLite).
    static let pageSQL =
        #"SELECT \#(columns) FROM "PreflightChecks" WHERE CAST("FuelKg" AS REAL) > ? AND "Status" = ? ORDER BY "ID" LIMIT ?"#
    /// The delta page's rows: the 100 checks the benchmark's first batch changed, the last changes there are, found
    /// as any delta page must find changes, through the index of the change sequence (here from its end), with the
    /// two columns the page's delta link selects (`$select=ID,FuelKg`). Until the JSON floors came, this floor read
    /// all twelve columns of the first 100 checks in key order: more columns than the page reads, and rows in an
    /// order no delta page can read them in.
    static let deltaColumns = #""ID", "FuelKg""#
    static let deltaSQL = #"SELECT \#(deltaColumns) FROM "PreflightChecks" ORDER BY "$seq" DESC LIMIT ?"#
    /// The checks' decimals, which SQLite keeps as text and JSON writes as numbers.
    static let decimals: Set<String> = ["FuelKg", "TyrePressureMainPsi", "TyrePressureNosePsi", "OilQuarts"]

    func json(_ body: ByteBuffer) -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json; odata.metadata=minimal"],
            body: .init(byteBuffer: body))
    }

    /// The data service's answer to the same request, with its media type, for N rows read; 404 for none.
    func answer(_ count: Int, _ read: FloorAnswers.Read) throws -> Response {
        guard count > 0 else { throw HTTPError(.notFound) }
        return Response(
            status: .ok, headers: [.contentType: "application/json; odata.metadata=minimal"],
            body: .init(byteBuffer: answers.body(read)))
    }

    func keyRead(_ id: String) async throws -> Int {
        switch source {
        case .sqlite(let readers):
            return try readers.count(#"SELECT \#(Self.columns) FROM "PreflightChecks" WHERE "ID" = ?"#, [id])
        case .postgres(let client):
            guard let uuid = UUID(uuidString: id) else { return 0 }
            return try await count(try await client.execute(FloorKeyRead(id: uuid)))
        }
    }

    func page() async throws -> Int {
        switch source {
        case .sqlite(let readers):
            return try readers.count(Self.pageSQL, [50_000, "final", 50])
        case .postgres(let client):
            return try await count(try await client.execute(FloorPage()))
        }
    }

    /// The delta page's rows (``deltaSQL``).
    func delta() async throws -> Int {
        switch source {
        case .sqlite(let readers):
            return try readers.count(Self.deltaSQL, [100])
        case .postgres(let client):
            return try await count(try await client.execute(FloorRows()))
        }
    }

    func count(_ rows: some AsyncSequence) async throws -> Int {
        var count = 0
        for try await _ in rows { count += 1 }
        return count
    }
}

/// The data service's answers to the key read, the filtered page and the delta page, captured once the data is in
/// place, for the floors to send: sending an answer of that size is part of what any server does for the read.
final class FloorAnswers: Sendable {
    enum Read: Sendable { case key, page, delta }

    private let bodies = Mutex<[Read: ByteBuffer]>([:])

    func set(_ read: Read, _ bytes: Data) {
        bodies.withLock { $0[read] = ByteBuffer(bytes: bytes) }
    }

    /// The captured answer; `{}` before one is.
    func body(_ read: Read) -> ByteBuffer {
        bodies.withLock { $0[read] } ?? ByteBuffer(string: "{}")
    }

    /// The captured answers' sizes, in bytes.
    var sizes: [Read: Int] { bodies.withLock { $0.mapValues(\.readableBytes) } }
}

/// Read-only GRDB connections to one file, taken in turn and used in place on the caller's thread (a connection
/// in use by another request serialises the two): GRDB's fastest read, with no queue hop and no schema check.
final class SQLiteReaders: Sendable {
    let connections: [DatabaseQueue]
    let next = Atomic<UInt>(0)

    init(path: String, count: Int) throws {
        var configuration = Configuration()
        configuration.readonly = true
        connections = try (0..<count).map { _ in try DatabaseQueue(path: path, configuration: configuration) }
    }

    /// The rows `sql` reads, written as a page of OData JSON the least way a writer can: each column's bytes copied
    /// as SQLite holds them after its name, quoted unless it is a number (an integer, or a decimal: a column named in
    /// `numbers`), `null` for none — nothing checked, escaped or formatted, no ETag. Any server answering the read
    /// with these rows as JSON does at least this.
    func json(_ sql: String, _ arguments: StatementArguments, numbers: Set<String>) throws -> ByteBuffer {
        let index = next.wrappingAdd(1, ordering: .relaxed).newValue
        return try connections[Int(index % UInt(connections.count))].unsafeRead { db in
            let statement = try db.cachedStatement(sql: sql)
            let names = statement.columnNames.map { Array("\"\($0)\":".utf8) }
            let quoted = statement.columnNames.map { !numbers.contains($0) }
            var out: [UInt8] = []
            out.reserveCapacity(16_384)
            out.append(contentsOf: #"{"@odata.context":"$metadata#PreflightChecks","value":["#.utf8)
            let rows = try Row.fetchCursor(statement, arguments: arguments)
            var first = true
            while try rows.next() != nil {
                let row = statement.sqliteStatement
                out.append(contentsOf: first ? "{".utf8 : ",{".utf8)
                first = false
                for (column, name) in names.enumerated() {
                    let position = Int32(column)
                    if column > 0 { out.append(UInt8(ascii: ",")) }
                    out.append(contentsOf: name)
                    switch sqlite3_column_type(row, position) {
                    case SQLITE_NULL:
                        out.append(contentsOf: "null".utf8)
                    case SQLITE_INTEGER:
                        out.append(contentsOf: String(sqlite3_column_int64(row, position)).utf8)
                    default:
                        let text = sqlite3_column_text(row, position)
                        let bytes = UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(row, position)))
                        if quoted[column] { out.append(UInt8(ascii: "\"")) }
                        out.append(contentsOf: bytes)
                        if quoted[column] { out.append(UInt8(ascii: "\"")) }
                    }
                }
                out.append(UInt8(ascii: "}"))
            }
            out.append(contentsOf: "]}".utf8)
            return ByteBuffer(bytes: out)
        }
    }

    /// How many rows `sql` reads, each fetched with its columns (as GRDB hands rows to an app).
    func count(_ sql: String, _ arguments: StatementArguments) throws -> Int {
        let index = next.wrappingAdd(1, ordering: .relaxed).newValue
        return try connections[Int(index % UInt(connections.count))].unsafeRead { db in
            try Row.fetchAll(db.cachedStatement(sql: sql), arguments: arguments).count
        }
    }
}

/// The key read's statement, as the server's translator writes it (columns named, bound by `uuid`).
struct FloorKeyRead: PostgresPreparedStatement {
    static let sql = #"SELECT \#(FloorRoutes.columns) FROM "PreflightChecks" WHERE "ID" = $1"#
    typealias Row = PostgresRow
    let id: UUID

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(id)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

/// The filtered page of 50, as the server's translator writes it.
struct FloorPage: PostgresPreparedStatement {
    static let sql =
        #"SELECT \#(FloorRoutes.columns) FROM "PreflightChecks" WHERE "FuelKg" > $1::integer AND "Status" = $2::text ORDER BY "ID" LIMIT $3::bigint"#
    typealias Row = PostgresRow

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(50_000)
        bindings.append("final")
        bindings.append(50)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

/// The delta page's 100 changed checks, as ``FloorRoutes/deltaSQL`` reads them.
struct FloorRows: PostgresPreparedStatement {
    static let sql =
        #"SELECT \#(FloorRoutes.deltaColumns) FROM "PreflightChecks" ORDER BY "$seq" DESC LIMIT $1::bigint"#
    typealias Row = PostgresRow

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(100)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}
