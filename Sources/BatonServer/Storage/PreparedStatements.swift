import BatonSQL
import Crypto
import Foundation
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// Prepared statements for the single-statement reads every request makes (the token check, an entity by key) and
/// for the data service's inserts, updates and deletes of entities (`SQLConnection.perform`, inside writes):
/// PostgreSQL parses and plans each once per connection instead of every time. A key
/// read's two statements took 0.24 ms of PostgreSQL's time unprepared and 0.10 ms prepared (`pgbench -M extended` /
/// `-M prepared` on this project's VM), time that PostgreSQL takes from the server's cores when both share a
/// machine; a 100-change batch's statements, unprepared, cost PostgreSQL about 650 µs of CPU a change, of which
/// `pg_stat_statements` counted under 100 µs executing them.
///
/// postgres-nio prepares a statement on each connection at its first use, under the static name and SQL of a
/// `PostgresPreparedStatement` type; Baton's statements are built from the model at run time. So each distinct
/// statement (its SQL and the types of its arguments, which PostgreSQL is told, as it is for an unprepared statement)
/// takes one of ``slots`` ``PreparedSlot`` types the first time it runs, for the life of the process. Once every
/// slot is taken, further statements run unprepared, as before. So only the server's own shapes are prepared: the
/// reads ``ServerStorage/readStatement(prepared:_:)`` is told are, and a write's entity changes (by the set and the
/// columns a change names). A write's reads are not: a mixed `$batch` reads inside its write, and a client's
/// `$filter`, `$search`, `$orderby` or `$select` shape reads without number — any account's few hundred of them took
/// every slot;
/// changes naming ever other sets of columns take new slots only while half are free (``writesLimit``), so they
/// cannot take the other half from the reads.
enum PreparedStatements {
    /// How many distinct statements are prepared at most.
    static let slots = 256

    /// How many slots there may be taken when a write's statement takes a new one.
    static let writesLimit = slots / 2

    /// The slot of each statement (by SQL and argument types), `nil` for one that is no longer prepared; the SQL
    /// of each slot.
    private static let taken = Mutex<
        (byKey: [String: Int?], slots: [(sql: String, name: String, types: [PostgresDataType])])
    >(
        ([:], []))

    /// The slot of `sql` run with arguments of these types, taking a free one; `nil` when none is left or the
    /// statement is no longer prepared (``refuse(slot:)``).
    ///
    /// A new shape takes a slot only while fewer than `limit` are taken: writes pass ``writesLimit``, so the shapes
    /// of changes — an account can name ever other sets of columns — leave the other half to reads.
    static func slot(of sql: String, _ arguments: [SQLValue], limit: Int = slots) -> Int? {
        var key = sql
        key.append("\u{0}")
        // The types PostgreSQL is told the arguments have, as an unprepared statement tells it (a null: none).
        var types: [PostgresDataType] = []
        types.reserveCapacity(arguments.count)
        for argument in arguments {
            switch argument {
            case .null: key.append("n"); types.append(.null)
            case .integer: key.append("i"); types.append(.int8)
            case .real: key.append("r"); types.append(.float8)
            case .text: key.append("t"); types.append(.text)
            case .blob: key.append("b"); types.append(.bytea)
            }
        }
        return taken.withLock { taken in
            if let slot = taken.byKey[key] { return slot }
            guard taken.slots.count < min(limit, slots) else { return nil }
            // Named by what it runs, not by its slot: the same statement has the same name in every process,
            // and a name never stands for two statements (a pooler between Baton and PostgreSQL that hands a
            // connection prepared by one instance to another still gets the right statement).
            let name =
                "baton_" + SHA256.hash(data: Data(key.utf8)).prefix(12).map { String(format: "%02x", $0) }.joined()
            taken.slots.append((PostgresSQLConnection.numberedPlaceholders(sql), name, types))
            taken.byKey[key] = taken.slots.count - 1
            return taken.slots.count - 1
        }
    }

    /// Runs the statement of `slot` unprepared from now on, on every connection. postgres-nio keeps a failed
    /// preparation's error for its connection and answers every later execution with it; so a statement whose
    /// error may have come from its preparation is not prepared again.
    static func refuse(slot: Int) {
        taken.withLock { taken in
            for (key, value) in taken.byKey where value == slot { taken.byKey[key] = .some(nil) }
        }
    }

    /// Whether an error of this SQLSTATE may have come from preparing a statement (rather than from running
    /// it): a syntax or access error or an undefined object (42), a feature not supported (0A), a transaction in
    /// a bad state (25), an invalid statement name, catalog or schema (26, 3D, 3F), an internal error (XX).
    /// Errors of running it (a refused value, a constraint, a cancelled or timed-out statement, a server
    /// going away) leave the statement prepared.
    static func mayComeFromPreparing(_ state: String) -> Bool {
        // 25P02 (the transaction failed at an earlier statement) counts too: a statement first prepared in such a
        // transaction failed its preparation, and postgres-nio would answer every later use on that connection with
        // that error.
        ["42", "0A", "25", "26", "3D", "3F", "XX"].contains(String(state.prefix(2)))
    }

    /// The SQL of a slot that ``slot(of:_:)`` gave out.
    static func sql(ofSlot slot: Int) -> String { taken.withLock { $0.slots[slot].sql } }

    /// The argument types of a slot that ``slot(of:_:)`` gave out.
    static func types(ofSlot slot: Int) -> [PostgresDataType] { taken.withLock { $0.slots[slot].types } }

    /// The statement name of a slot that ``slot(of:_:)`` gave out.
    static func name(ofSlot slot: Int) -> String { taken.withLock { $0.slots[slot].name } }

    /// Runs the statement of `slot` on `connection` (preparing it there first if this connection has not yet).
    static func rows(
        ofSlot slot: Int, _ bindings: PostgresBindings, on connection: PostgresConnection, logger: Logger
    ) async throws -> [PostgresRow] {
        try await visit(slot: slot, RowsVisitor(bindings: bindings, connection: connection, logger: logger))
    }

    /// Calls `visitor` with the type of `slot`, spelt by the binary digits of slot + 1, the leading 1 first.
    private static func visit<Visitor: SlotVisitor>(slot: Int, _ visitor: Visitor) async throws -> Visitor.Result {
        let number = slot + 1
        let digits = Int.bitWidth - number.leadingZeroBitCount
        return try await visit(number, digitsLeft: digits - 1, as: SlotOne.self, visitor)
    }

    private static func visit<Number: SlotNumber, Visitor: SlotVisitor>(
        _ number: Int, digitsLeft: Int, as _: Number.Type, _ visitor: Visitor
    ) async throws -> Visitor.Result {
        guard digitsLeft > 0 else { return try await visitor.visit(Number.self) }
        return number >> (digitsLeft - 1) & 1 == 0
            ? try await visit(number, digitsLeft: digitsLeft - 1, as: SlotTwice<Number>.self, visitor)
            : try await visit(number, digitsLeft: digitsLeft - 1, as: SlotTwicePlusOne<Number>.self, visitor)
    }
}

/// What to do with the type of a slot once it is spelt.
protocol SlotVisitor {
    associatedtype Result
    func visit<Number: SlotNumber>(_ number: Number.Type) async throws -> Result
}

/// Runs a slot's statement and reads its rows.
private struct RowsVisitor: SlotVisitor {
    let bindings: PostgresBindings
    let connection: PostgresConnection
    let logger: Logger

    func visit<Number: SlotNumber>(_ number: Number.Type) async throws -> [PostgresRow] {
        var rows: [PostgresRow] = []
        for try await row in try await connection.execute(PreparedSlot<Number>(bindings: bindings), logger: logger) {
            rows.append(row)
        }
        return rows
    }
}

/// A number as a type, built from its binary digits: ``SlotOne`` is 1, `SlotTwice<SlotOne>` 2,
/// `SlotTwicePlusOne<SlotOne>` 3, … — so that slot `n` has a type of its own (number `n + 1`), reached in
/// log₂(n) steps, and its name and SQL are static as postgres-nio asks, yet chosen at run time.
protocol SlotNumber { static var value: Int { get } }

enum SlotOne: SlotNumber { static var value: Int { 1 } }

enum SlotTwice<Half: SlotNumber>: SlotNumber { static var value: Int { Half.value * 2 } }

enum SlotTwicePlusOne<Half: SlotNumber>: SlotNumber { static var value: Int { Half.value * 2 + 1 } }

/// The statement of a slot of `PreparedStatements` (slot `Number.value - 1`), with its arguments: its SQL
/// is the one the slot was given, for the life of the process.
struct PreparedSlot<Number: SlotNumber>: PostgresPreparedStatement {
    typealias Row = PostgresRow
    static var name: String { PreparedStatements.name(ofSlot: Number.value - 1) }
    static var sql: String { PreparedStatements.sql(ofSlot: Number.value - 1) }
    static var bindingDataTypes: [PostgresDataType] { PreparedStatements.types(ofSlot: Number.value - 1) }

    let bindings: PostgresBindings

    func makeBindings() throws -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) throws -> PostgresRow { row }
}

extension PostgresSQLConnection {
    /// The rows of a read of one statement, prepared on this connection (`PreparedStatements`) when `prepared`
    /// and a slot is free, within the connection's statement deadline (after which the connection is closed, as
    /// ``answer(_:_:)`` does).
    func rows(_ sql: String, _ arguments: [SQLValue], prepared: Bool) async throws -> [SQLRow] {
        guard prepared,
            let slot = PreparedStatements.slot(
                of: sql, arguments, limit: inWrite ? PreparedStatements.writesLimit : PreparedStatements.slots)
        else {
            return try Self.rows(of: try await answer(sql, arguments).get())
        }
        return try Self.rows(
            of: try await racingDeadline(slot: slot, arguments, PreparedStatements.rows(ofSlot:_:on:logger:)))
    }

    /// Runs the prepared statement of `slot` with `run`, within the connection's statement deadline.
    private func racingDeadline<Answer: Sendable>(
        slot: Int, _ arguments: [SQLValue],
        _ run: @escaping @Sendable (Int, PostgresBindings, PostgresConnection, Logger) async throws -> Answer
    ) async throws -> Answer {
        guard !connection.isClosed else {
            throw StorageError(.unavailable, "The connection to PostgreSQL has closed.")
        }
        // The statement races its deadline as in ``answer(_:_:)``: a statement written to a connection that has
        // just closed is never answered by postgres-nio, so the deadline fails this request's wait itself.
        let settled = Claim()
        let connection = self.connection
        let answered = connection.eventLoop.makePromise(of: Answer.self)
        let timer = failing(answered, settled)
        let bindings = Self.bindings(arguments)
        let logger = self.logger
        Task {
            let result: Result<Answer, any Error>
            do {
                result = .success(try await run(slot, bindings, connection, logger))
            } catch {
                result = .failure(error)
            }
            timer?.cancel()
            guard settled.claim() else { return }
            if case .failure(let error) = result, let state = (error as? PSQLError)?.serverInfo?[.sqlState],
                PreparedStatements.mayComeFromPreparing(state)
            {
                PreparedStatements.refuse(slot: slot)
            }
            answered.completeWith(result)
        }
        return try await answered.futureResult.get()
    }
}
