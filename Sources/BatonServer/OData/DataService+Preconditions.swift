import BatonOData
import BatonSQL
import Foundation
import Synchronization

/// The stored entities the changes of one run of a `$batch` check their `If-Match` against, read together before the
/// run: one `SELECT … WHERE key IN (…)` an entity set for up to ``DataService/preconditionKeysPerRead`` changes,
/// where each change read its entity alone.
///
/// On PostgreSQL only in a ``WriteIsolation/rowChecked`` transaction (`REPEATABLE READ`), whose reads lock nothing.
/// At `SERIALIZABLE`, with the read ahead, writers of disjoint checks failed
/// each other's serialization (`could not serialize access … as a pivot`) and ran their batches again: 1,040–1,560 µs
/// of the server's CPU a change against 358–378 µs without it (`baton-bench --instances 0 --disjoint --only
/// "100-change"`, alternating). A hundred rows read at once put a read lock on the whole table for all of the
/// transaction (PostgreSQL makes a transaction's locks on one relation into one past 32 of them), where read one
/// by one they reached it only late in the batch. Read through the key's index one by one in one statement
/// (`unnest(?::uuid[])` joined on the key) it went no better: 1,278–2,094 against 478–504 µs, with 315 and 518
/// serialization failures a run against 75 and 85.
///
/// An entity is handed out once: the first change of the run that addresses it (`Set(key)`) takes it, and any later
/// one reads the database, where the first may have changed it. Only a change addressing an entity changes its row,
/// and a run whose changes address entities any other way (a navigation, a property, a stream, `$n/…`) reads nothing
/// ahead: so the entity a change takes is the row as stored when it runs. An entity not found is not kept: its change
/// reads the database (an earlier change of the run may create it). After a run rolls back to go again with a
/// savepoint a change, the entities not yet taken are still the rows as stored (no change addressed them); a
/// transaction run again from its start reads them again.
///
/// Entities are found by their keys' values as bytes (``name(set:key:)``): a string key by its exact bytes — `String`'s
/// `==` takes a composed and a decomposed `é` for one key, where the database holds two entities — a GUID or an
/// integer by its value's.
final class PreconditionRows: Sendable {
    struct Entry: Sendable {
        var columns: [String]
        var entity: DataService.StoredEntity
    }

    /// An entity's name (``PreconditionRows/name(set:key:)``), hashed and compared as one run of bytes: an array of
    /// bytes hashes and compares each byte on its own, and three hashes of a 60-byte name were a fiftieth of a change.
    struct Name: Hashable, Sendable {
        let bytes: [UInt8]

        func hash(into hasher: inout Hasher) {
            bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        }

        static func == (left: Name, right: Name) -> Bool {
            left.bytes.withUnsafeBytes { left in
                right.bytes.withUnsafeBytes { right in
                    guard left.count == right.count else { return false }
                    guard let leftBase = left.baseAddress, let rightBase = right.baseAddress else { return true }
                    return memcmp(leftBase, rightBase, left.count) == 0
                }
            }
        }
    }

    private let entries: Mutex<[Name: Entry]>

    init(_ entries: [Name: Entry]) { self.entries = Mutex(entries) }

    /// The entity of `set` with `key`, read with `columns`, if it was read ahead and no change has taken it yet.
    func take(set: String, key: [KeyValue], columns: [String]) -> DataService.StoredEntity? {
        let name = Self.name(set: set, key: key)
        return entries.withLock { entries in
            guard let entry = entries.removeValue(forKey: name) else { return nil }
            return entry.columns.elementsEqual(columns) { $0.hasSameBytes(as: $1) } ? entry.entity : nil
        }
    }

    /// An entity's name, byte for byte: the set's and each key part's name, each after its length, then each part's
    /// value after a tag — a GUID's 16 bytes, an integer's 8, anything else its literal's bytes after their length.
    /// A GUID's or an integer's value is one however its literal was spelled, as it is for the database; a string's
    /// is its exact bytes. Built three times a change of a run, the GUID's literal text was a fiftieth of a change.
    static func name(set: String, key: [KeyValue]) -> Name {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(set.utf8.count + key.count * 40 + 8)
        func append(_ text: String) {
            withUnsafeBytes(of: UInt64(text.utf8.count).littleEndian) { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: text.utf8)
        }
        append(set)
        for part in key {
            append(part.name)
            switch part.value {
            case .guid(let guid):
                bytes.append(1)
                withUnsafeBytes(of: guid.uuid) { bytes.append(contentsOf: $0) }
            case .integer(let number):
                bytes.append(2)
                withUnsafeBytes(of: number.littleEndian) { bytes.append(contentsOf: $0) }
            default:
                bytes.append(0)
                append(part.value.urlLiteral)
            }
        }
        return Name(bytes: bytes)
    }
}

/// A `$batch` request's URL, relative to the service root, and as parsed: made once for a run, before its transaction
/// (``DataService/batchURLs(_:locations:context:)``), so the run does not parse it again.
struct BatchURL: Sendable {
    var text: String
    var parsed: ODataURL
}

extension DataService {
    /// The most keys one read of a run's preconditions names.
    static let preconditionKeysPerRead = 100

    /// The run's URLs, relative to the service root and parsed, made once before its transaction (the run does not
    /// parse them again): `nil` for one that cannot be made yet (a `$n` of an entity this run creates) or parsed,
    /// which ``run`` answers for.
    func batchURLs(_ requests: [BatchRequest], locations: [String: String], context: Context) -> [BatchURL?] {
        requests.map { request in
            guard let text = try? relativeURL(request, locations: locations, context: context),
                let parsed = try? parse(text)
            else { return nil }
            return BatchURL(text: text, parsed: parsed)
        }
    }

    /// How the transaction of changes at `urls` may be isolated (``WriteIsolation``): ``WriteIsolation/rowChecked``
    /// when each is a creation in an entity set, or an update or delete of one entity addressed by `Set(key)`, of
    /// a set without streams and whose type is not a media entity's — changes whose every check is about the row
    /// they then change (its ETag, its owner) or kept by the database (a key already taken); ``serializable``
    /// when any is anything else: a read, a navigation, a property, a photo (whose quota is a count of other rows),
    /// a `$n` not made yet.
    func isolation(of requests: [BatchRequest], urls: [BatchURL?]) -> WriteIsolation {
        for (request, url) in zip(requests, urls) {
            guard let url, Self.isRowChecked(method: request.method, url: url.parsed, model: model) else {
                return .serializable
            }
        }
        return .rowChecked
    }

    /// Whether a change of `method` at `url` checks only the row it changes (``isolation(of:urls:)``).
    static func isRowChecked(method: String, url: ODataURL, model: ServiceModel) -> Bool {
        guard case .resource(let segments) = url.path, case .entitySet(let name)? = segments.first,
            let set = model.entitySet(named: name), let type = model.entityType(of: set),
            !type.hasStream, type.streamProperties.isEmpty
        else { return false }
        switch (method, segments.count) {
        case ("POST", 1): return true
        case ("PATCH", 2), ("PUT", 2), ("DELETE", 2):
            if case .key = segments[1] { return true }
            return false
        default: return false
        }
    }

    /// Reads the entities the changes of a run will check their `If-Match` against (``PreconditionRows``): on
    /// SQLite, and on PostgreSQL when the run's transaction is ``WriteIsolation/rowChecked`` (at `SERIALIZABLE`
    /// a hundred rows read at once became a lock on the whole table, see ``PreconditionRows``). No entity is read
    /// ahead when a change of the run addresses an entity other than by `Set(key)` or `$n` alone, or when fewer
    /// than two changes would take one; when the read fails (short of a conflict or the database gone), each
    /// change reads its own as before.
    ///
    /// What is read ahead is what ``checkPrecondition(_:request:columns:prefetched:in:)`` reads: the properties of
    /// ``changeColumns(_:)`` and the sequence, of entity sets without streams, keyed by one property of a type whose
    /// values each have one literal (a string, a GUID, an integer). `urls` are ``batchURLs(_:locations:context:)``.
    func readPreconditions(
        _ requests: [BatchRequest], urls: [BatchURL?], isolation: WriteIsolation, in db: any SQLConnection
    ) async throws -> PreconditionRows? {
        // Per entity set, in the order first met: what is read of it, and its keys' values, each once.
        var wanted: [Wanted] = []
        var addressedOtherwise = db.dialect != .sqlite && isolation != .rowChecked
        for (request, url) in zip(requests, urls) {
            guard let parsed = url?.parsed else {
                // `$n` alone is the entity request n creates in this run, which nothing read ahead holds; anything
                // after it (`$n/Aircraft`) may lead to one that is.
                if request.method != "GET", request.method != "POST", request.url.utf8.first == UInt8(ascii: "$"),
                    request.url.utf8.dropFirst().contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") })
                {
                    addressedOtherwise = true
                }
                continue
            }
            guard !addressedOtherwise, request.method != "GET", request.method != "POST" else { continue }
            guard case .resource(let segments) = parsed.path, segments.count == 2,
                case .entitySet(let name) = segments[0], case .key(let key) = segments[1],
                let set = model.entitySet(named: name), let type = model.entityType(of: set)
            else {
                // A navigation, a property, a stream: it may change an entity another change addresses by key.
                addressedOtherwise = true
                continue
            }
            // A set whose changes read more (streams), keyed by several properties, or by a type with more than one
            // literal for a value (`1.0` and `1.00`; one instant at two offsets), is never read ahead: a change
            // through one literal would leave the entity read under another to a later change.
            guard type.key.count == 1, let keyProperty = type.property(named: type.key[0]),
                keyProperty.type == .string || keyProperty.type == .guid || keyProperty.type.isIntegral,
                let columns = changeColumns(of: set)
            else { continue }
            guard key.count == 1, key[0].name.hasSameBytes(as: keyProperty.name), !key[0].value.isNull else {
                addressedOtherwise = true
                continue
            }
            let entityName = PreconditionRows.name(set: set.name, key: key)
            if let index = wanted.firstIndex(where: { $0.set.name.hasSameBytes(as: set.name) }) {
                if wanted[index].names.insert(entityName).inserted { wanted[index].values.append(key[0].value) }
            } else {
                wanted.append(
                    Wanted(
                        set: set, type: type, keyProperty: keyProperty, columns: columns, names: [entityName],
                        values: [key[0].value]))
            }
        }
        guard !addressedOtherwise, wanted.reduce(0, { $0 + $1.values.count }) > 1 else { return nil }
        do {
            guard db.dialect == .postgres else { return PreconditionRows(try await readAhead(wanted, in: db)) }
            // On PostgreSQL a failed statement fails its transaction: the read goes in a savepoint, so that when it
            // fails the changes can still each read their own.
            var entries: [PreconditionRows.Name: PreconditionRows.Entry] = [:]
            try await db.inSavepoint {
                entries = try await readAhead(wanted, in: db)
                return true
            }
            return PreconditionRows(entries)
        } catch let error as StorageError where error.kind == .conflict || error.kind == .unavailable {
            throw error
        } catch {
            // Each change reads its own entity, and answers for what it finds (a row it cannot read fails it alone).
            return nil
        }
    }

    /// What a run reads ahead of one entity set.
    struct Wanted {
        var set: EntitySet
        var type: EntityType
        var keyProperty: Property
        /// ``changeColumns(of:)``.
        var columns: [String]
        /// The entities' names (``PreconditionRows/name(set:key:)``), and their keys' values in the same order.
        var names: Set<PreconditionRows.Name>
        var values: [PrimitiveValue]
    }

    /// The entities of `wanted`'s keys, by ``PreconditionRows/name(set:key:)``.
    private func readAhead(_ wanted: [Wanted], in db: any SQLConnection) async throws
        -> [PreconditionRows.Name: PreconditionRows.Entry]
    {
        var entries: [PreconditionRows.Name: PreconditionRows.Entry] = [:]
        for set in wanted {
            var start = 0
            while start < set.values.count {
                let chunk = set.values[start..<min(start + Self.preconditionKeysPerRead, set.values.count)]
                start += chunk.count
                var options = QueryOptions()
                options.select = set.columns
                options.filter = .in(
                    .property(
                        PropertyPath(property: set.keyProperty.name, type: set.keyProperty.type, isNullable: false)),
                    chunk.map { .literal($0) })
                let query = try translator.select(
                    from: set.set.name, options: options, extraColumns: [DataStore.sequenceColumn])
                let rows = try await db.fetchAll(query.sql, query.arguments)
                for entity in try Self.entities(from: rows, type: set.type, dialect: db.dialect) {
                    let key = [
                        KeyValue(name: set.keyProperty.name, value: entity.values[set.keyProperty.name] ?? .null)
                    ]
                    entries[PreconditionRows.name(set: set.set.name, key: key)] = PreconditionRows.Entry(
                        columns: set.columns, entity: entity)
                }
            }
        }
        return entries
    }
}
