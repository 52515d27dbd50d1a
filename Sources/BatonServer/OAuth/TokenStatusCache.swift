import BatonSQLGRDB
import Foundation
import GRDB
import Logging
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What an access token's request needs to know beyond its signature — its user disabled or demoted, the token
/// or its sign-in revoked, its device taken out of service — kept in memory per token, so that a busy device's
/// requests do not ask the database each time.
///
/// An entry holds while nothing that could change it has changed. Every change to those facts (in `users`,
/// `refreshTokens.revokedAt`, `revokedAccessTokens`, `devices.revokedAt`, `deviceTokenFamilies`) moves the cache to
/// a new generation, which drops every entry:
/// - in this process, at once, after the change commits (SQLite: a GRDB transaction observer; PostgreSQL: the
///   same instance hears its own `NOTIFY`, and its revocation paths also invalidate directly);
/// - from another process on the same SQLite file (an admin command): it rewrites the word in the data directory's
///   `status.epoch` before and after its commit, and every request compares the word, which this process maps
///   (``StatusEpoch``: no system call). A file replaced or removed rather than rewritten is noticed within
///   ``pathCheckInterval``, and the cache is not used while no file is mapped;
/// - from another instance on PostgreSQL: triggers `NOTIFY baton_status` in the changing transaction, delivered at
///   its commit, and each instance `LISTEN`s. While the listening connection is down the cache is not used at all
///   — every request asks the database — and when it is back the cache starts empty.
final class TokenStatusCache: Sendable {
    /// The status of one token.
    struct Status: Sendable, Hashable {
        var disabled: Bool
        var role: String?
        var revoked: Bool
        var deviceRevoked: Bool
    }

    struct State {
        var generation: UInt64 = 0
        /// Whether changes are heard (PostgreSQL: the listener is connected).
        var live: Bool
        /// Status by token (`nil`: no such user), with the generation it was read under.
        var entries: [String: (status: Status?, generation: UInt64)] = [:]
        /// SQLite: the epoch file mapped (`nil` while it cannot be: the cache is then not used), the word last
        /// seen in it, and when the file at its path was last compared with the one mapped. The mapping keeps the
        /// file's inode from being given to another file, so a replacement always looks different.
        var epoch: StatusEpoch?
        var epochWord: UInt64 = 0
        var epochCheckedAt: ContinuousClock.Instant
        /// How many times a change emptied the cache (not counting the listener's ups and downs).
        var invalidations = 0
        /// PostgreSQL: whether the listening connection is up, and when it last heard this instance's heartbeat.
        var connected = false
        var heardAt: ContinuousClock.Instant?
    }

    /// PostgreSQL: changes count as heard only while the listener is connected and this instance's heartbeat came
    /// back within this — judged on every request, so a listener that went quiet turns the cache off within it
    /// even when nothing else runs. `nil` on SQLite, whose cache hears every change of the file.
    let heartbeatDeadline: Duration?

    let state: Mutex<State>
    /// SQLite: the data directory's `status.epoch`, which admin commands in other processes rewrite.
    let epochPath: String?
    static let capacity = 10_000
    /// How often, at most, a request compares the file at the epoch's path with the one mapped (one `stat`): how
    /// long a status change written into a replaced or removed epoch file may go unheard.
    static let pathCheckInterval: Duration = .seconds(1)

    init(live: Bool, epochURL: URL?, heartbeatDeadline: Duration? = nil) {
        self.heartbeatDeadline = heartbeatDeadline
        let epochPath = epochURL?.path
        var initial = State(live: live, epochCheckedAt: .now)
        if let epochPath {
            initial.epoch = try? StatusEpoch(path: epochPath)
            initial.epochWord = initial.epoch?.current ?? 0
            initial.live = live && initial.epoch != nil
        }
        state = Mutex(initial)
        self.epochPath = epochPath
    }

    /// The generation a status read now belongs to, or `nil` when the cache must not be used (changes are not
    /// being heard). On SQLite it reads the epoch's word first: a new word empties the cache.
    func generation() -> UInt64? {
        state.withLock { state in
            var settled = true
            if let epochPath { settled = Self.look(at: epochPath, &state) }
            if let heartbeatDeadline { Self.judge(&state, deadline: heartbeatDeadline) }
            return state.live && settled ? state.generation : nil
        }
    }

    /// Compares the epoch's word with the one last seen, and at most once a ``pathCheckInterval`` the file at its
    /// path with the one mapped: a file replaced or removed is mapped again (created if missing), and every entry
    /// goes, as what another process changed meanwhile may not have been heard. Without a mapped file the cache is
    /// not used: `live` is false until a later look (a ``pathCheckInterval`` later) maps one. The look runs under the
    /// cache's lock; its file work (an `lstat`, and a new mapping when the file changed) at most once an interval.
    ///
    /// - Returns: `false` while the word is odd — a commit between a writer's two writes, or a writer that never made
    ///   its second — when the cache must be neither read nor filled.
    static func look(at path: String, _ state: inout State) -> Bool {
        let now = ContinuousClock.now
        if now - state.epochCheckedAt >= pathCheckInterval {
            state.epochCheckedAt = now
            if state.epoch?.isStillAtPath() != true {
                state.epoch = try? StatusEpoch(path: path)
                state.epochWord = state.epoch?.current ?? 0
                state.generation &+= 1
                state.entries.removeAll(keepingCapacity: true)
            }
            state.live = state.epoch != nil
        }
        guard let word = state.epoch?.current else { return true }
        if word != state.epochWord {
            state.epochWord = word
            state.generation &+= 1
            state.entries.removeAll(keepingCapacity: true)
        }
        return !StatusEpoch.isChanging(word)
    }

    /// The remembered status of `key` if it was read under `generation` (the current one).
    func status(_ key: String, at generation: UInt64) -> Status?? {
        state.withLock { state in
            guard state.live, state.generation == generation, let entry = state.entries[key],
                entry.generation == generation
            else { return nil }
            return .some(entry.status)
        }
    }

    /// Remembers `status` of `key`, read under `generation`: kept only if nothing changed since that read began.
    func remember(_ key: String, _ status: Status?, readAt generation: UInt64) {
        state.withLock { state in
            guard state.live, state.generation == generation else { return }
            if state.entries.count >= Self.capacity { state.entries.removeAll(keepingCapacity: true) }
            state.entries[key] = (status, generation)
        }
    }

    /// Something that could change a status committed: every entry goes.
    func invalidate() {
        state.withLock { state in
            state.generation &+= 1
            state.invalidations += 1
            state.entries.removeAll(keepingCapacity: true)
        }
    }

    /// The listening connection is up (after its `LISTEN` took effect) or down.
    func listenerConnected(_ up: Bool) {
        state.withLock { state in
            state.connected = up
            if !up { state.heardAt = nil }
            if let heartbeatDeadline { Self.judge(&state, deadline: heartbeatDeadline) }
        }
    }

    /// This instance's heartbeat came back through the channel.
    func heartbeatHeard() {
        state.withLock { state in
            state.heardAt = .now
            if let heartbeatDeadline { Self.judge(&state, deadline: heartbeatDeadline) }
        }
    }

    /// Live while connected and the last heartbeat is recent. When that changes, every entry goes: what was
    /// remembered before may have missed a change.
    static func judge(_ state: inout State, deadline: Duration) {
        let live = state.connected && state.heardAt.map { ContinuousClock.now - $0 < deadline } ?? false
        guard state.live != live else { return }
        state.live = live
        state.generation &+= 1
        state.entries.removeAll(keepingCapacity: true)
    }
}

/// Tells the token-status caches of every process on one SQLite file that a status changed: this process's at
/// once, the others through the epoch file, whose word is rewritten in place before and after each such commit.
final class StatusChangeSignal: Sendable {
    let epochURL: URL?
    let listeners = Mutex<[@Sendable () -> Void]>([])

    init(epochURL: URL?) { self.epochURL = epochURL }

    func subscribe(_ listener: @escaping @Sendable () -> Void) { listeners.withLock { $0.append(listener) } }

    /// A status change committed (SQLite's observer): this process's caches drop their entries, and the epoch's word
    /// is rewritten for the other processes on the file, even now (``StatusEpoch``). If that write fails, the word
    /// stays odd and the other processes use no cache until a later change writes it.
    func changed() {
        notifyListeners()
        try? advanceEpoch(changing: false)
    }

    /// Rewrites the epoch file's word in place (``StatusEpoch/advance(path:changing:)``): odd before a commit
    /// (`changing`), even after it.
    ///
    /// - Throws: ``StatusEpochError`` when it cannot be written.
    func advanceEpoch(changing: Bool) throws {
        guard let epochURL else { return }
        try StatusEpoch.advance(path: epochURL.path, changing: changing)
    }

    /// This process committed a status change through one of its own paths: its caches drop their entries at once
    /// (on PostgreSQL, before the instance's own `NOTIFY` arrives).
    func notifyListeners() {
        for listener in listeners.withLock({ $0 }) { listener() }
    }
}

/// Hears, on a SQLite pool, the commits that change what a token's status read returns.
final class StatusTablesObserver: TransactionObserver, Sendable {
    let signal: StatusChangeSignal
    /// The transaction under way (GRDB calls an observer serially, one transaction at a time): whether it changed a
    /// status, and whether its odd word was written (``databaseWillCommit()``). Both are cleared when it ends.
    let transaction = Mutex((changed: false, wroteOdd: false))

    init(signal: StatusChangeSignal) { self.signal = signal }

    /// What the transaction that just ended did, forgotten for the next.
    private func endTransaction() -> (changed: Bool, wroteOdd: Bool) {
        transaction.withLock { state in
            defer { state = (false, false) }
            return state
        }
    }

    /// The columns whose update can change a status (`nil`: any). Keys and names that never change (`devices.id`,
    /// which a backup sets to itself) are not watched, so such an update empties no cache.
    static let columns: [String: Set<String>?] = [
        "users": ["disabled", "role"], "refreshtokens": ["revokedat"], "revokedaccesstokens": nil,
        "devices": ["revokedat"], "devicetokenfamilies": nil,
    ]

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool {
        switch eventKind {
        case .insert(let table):
            return ["revokedaccesstokens", "devicetokenfamilies"].contains(table.lowercased())
        case .delete(let table):
            return ["users", "devicetokenfamilies", "devices"].contains(table.lowercased())
        case .update(let table, let columns):
            guard let watched = Self.columns[table.lowercased()] else { return false }
            guard let watched else { return true }
            return columns.contains { watched.contains($0.lowercased()) }
        }
    }

    func databaseDidChange(with event: DatabaseEvent) {
        transaction.withLock { $0.changed = true }
    }

    /// Before the commit, the epoch's word is rewritten first: if it cannot be, the transaction is rolled back and the
    /// change fails loudly, rather than commit a change the other processes would never hear of.
    func databaseWillCommit() throws {
        guard transaction.withLock({ $0.changed }) else { return }
        try signal.advanceEpoch(changing: true)
        transaction.withLock { $0.wroteOdd = true }
    }

    /// After the commit it is rewritten again, even (a process that read the old status between the two writes must
    /// not keep it, and none remembers a status while the word is odd), and this process's caches empty.
    func databaseDidCommit(_ db: Database) {
        let ended = endTransaction()
        if ended.changed { signal.changed() }
    }

    /// A transaction rolled back after its odd word was written (its commit failed) changed nothing: the word is made
    /// even again, so the other processes use their caches again. One rolled back before it came to commit wrote
    /// nothing, and writes nothing.
    func databaseDidRollback(_ db: Database) {
        let ended = endTransaction()
        if ended.wroteOdd { try? signal.advanceEpoch(changing: false) }
    }
}

/// Whether an instance on PostgreSQL hears the status channel: its listening connection is up *and* it heard its
/// own heartbeat — a notification it sends through its pool every ``period`` — within ``deadline``. A connection
/// that went quiet without an error (a firewall that dropped it, a half-open socket after a failover, a pooler
/// that does not pass notifications on) is so noticed within the deadline, and the cache stops being used.
final class StatusListenerHealth: Sendable {
    static let period: Duration = .milliseconds(100)
    static let deadline: Duration = .milliseconds(500)
    /// The heartbeat's payload prefix; a change's notification has an empty payload.
    static let prefix = "heartbeat:"

    let instance = UUID().uuidString.lowercased()
    let cache: TokenStatusCache
    /// Tests: stop hearing the heartbeat, as a quiet connection would.
    let deaf = Atomic<Bool>(false)

    init(cache: TokenStatusCache) { self.cache = cache }

    var heartbeat: String { Self.prefix + instance }

    /// The listening connection is up (after its `LISTEN` took effect) or down.
    func connected(_ up: Bool) { cache.listenerConnected(up) }

    /// A notification arrived: a heartbeat (this instance's counts; the others' are ignored) or a change.
    func heard(_ payload: String) {
        if payload.hasPrefix(Self.prefix) {
            guard payload == heartbeat, !deaf.load(ordering: .relaxed) else { return }
            cache.heartbeatHeard()
        } else {
            cache.invalidate()
        }
    }
}
