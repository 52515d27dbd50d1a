import GRDB

extension DatabasePool {
    /// Runs a short read on the calling thread instead of hopping to one of GRDB's dispatch queues and back.
    ///
    /// For reads that take microseconds (a row by primary key, a page through an index): the two thread hops
    /// of the async `read` cost more than the read itself. Long reads keep using the async `read`.
    func readInline<T>(_ body: (Database) throws -> T) throws -> T {
        try read(body)
    }

    /// Runs a read of exactly one SQL statement on the calling thread, outside a transaction: one statement is
    /// atomic on its own, and a key read was paying a BEGIN and a COMMIT for nothing. Reads of several
    /// statements that must see one snapshot use ``readInline(_:)``.
    func readStatement<T>(_ body: (Database) throws -> T) throws -> T {
        try unsafeRead(body)
    }
}

extension Statement {
    /// Runs the statement and calls `body` with the SQLite statement on each row, until `body` returns
    /// `false` or the rows end. `body` reads the columns with the `sqlite3_column_*` functions.
    ///
    /// For the hot read paths: GRDB's `Row` cursor indexes the column names of every statement it runs (a
    /// dictionary of lower-cased names), a sixth of a key read; this steps with GRDB's plainest cursor instead,
    /// which decodes only the first column (a copy, so the column keeps its type for `body`).
    func forEachRow(arguments: StatementArguments, _ body: (SQLiteStatement) throws -> Bool) throws {
        let cursor = try DatabaseValue.fetchCursor(self, arguments: arguments)
        while try cursor.next() != nil {
            guard try body(sqliteStatement) else { return }
        }
    }
}
