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
