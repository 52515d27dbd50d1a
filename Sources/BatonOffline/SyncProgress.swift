import Foundation

/// Progress of a sync, as ``OfflineStore/progress()`` reports it.
public enum SyncProgress: Sendable, Hashable {
    /// `done` of `total` queued changes have an answer from the server (applied or archived).
    case upload(done: Int, total: Int)
    /// `entities` entities written or removed for defining query `query`, in `pages` pages so far.
    case download(query: String, entities: Int, pages: Int)
}

extension OfflineStore {
    /// Progress events of every upload and download from now on, until the stream's consumer stops.
    public func progress() -> AsyncStream<SyncProgress> {
        let (stream, continuation) = AsyncStream<SyncProgress>.makeStream(bufferingPolicy: .bufferingNewest(256))
        let id = UUID()
        progressObservers[id] = continuation
        continuation.onTermination = { _ in Task { await self.removeProgressObserver(id) } }
        return stream
    }

    func removeProgressObserver(_ id: UUID) { progressObservers[id] = nil }

    func report(_ progress: SyncProgress) {
        for continuation in progressObservers.values { continuation.yield(progress) }
    }
}
