import GRDB

extension DatabasePool {
    /// Runs a short read on the calling thread instead of hopping to one of GRDB's dispatch queues and back.
    ///
    /// For reads that take microseconds (a row by primary key, a page through an index): the two thread hops
    /// of the async `read` cost more than the read itself. Long reads keep using the async `read`.
    func readInline<T>(_ body: (Database) throws -> T) throws -> T {
        try read(body)
    }
}
