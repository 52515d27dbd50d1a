import BatonOData
import BatonSQL
import Foundation

extension DataService {
    // MARK: Tokens and links

    /// Where a read in pages stands: how many entities it served, the sequence value its change tracking starts
    /// at, and the key of the last entity served (for reads in key order).
    struct SkipToken {
        var offset: Int
        var through: Watermark?
        var after: [PrimitiveValue]?
    }

    /// An opaque skip token: base64url of `k<offset>:<through or ->:<the last key, as a JSON array>`, or of
    /// `offset[:through]` for reads that continue at an offset.
    static func encodeSkipToken(offset: Int, through: Watermark?, after: [PrimitiveValue]? = nil, type: EntityType)
        -> String
    {
        guard let after else {
            return base64URL(Data((through.map { "\(offset):\($0.token)" } ?? String(offset)).utf8))
        }
        let text = "k\(offset):\(through?.token ?? "-"):\(keyJSON(after, type: type))"
        // A key too long for a token (a string key of kilobytes) continues at the offset instead.
        guard text.utf8.count <= maximumKeyPosition else {
            return encodeSkipToken(offset: offset, through: through, after: nil, type: type)
        }
        return base64URL(Data(text.utf8))
    }

    /// A key's values (in the type's key order) as the JSON array a skip token carries.
    static func keyJSON(_ values: [PrimitiveValue], type: EntityType) -> String {
        JSONValue.array(zip(type.keyProperties, values).map { property, value in value.json(as: property.type) })
            .serialized
    }

    /// The longest key position a skip token carries, in bytes before base64: a longer one is not parsed (and
    /// never written: such a read continues at its offset).
    static let maximumKeyPosition = 8 * 1024

    /// The longest skip token read at all: a key position's, in base64.
    static let maximumSkipToken = (maximumKeyPosition + 2) / 3 * 4

    /// The longest key a create accepts, as JSON: with the offset and sequence it fits ``maximumKeyPosition``, so
    /// only keys stored some other way (written into the database directly) are ever paged by offset.
    static let maximumKeyBytes = 4 * 1024

    /// A delta token: where the client's copy stands (``Watermark``), and (when later) where it stood when it read
    /// the last entity it holds (`through.held`).
    static func encodeDeltaToken(through: Watermark, held: Watermark) -> String {
        held == through ? through.token : "\(through.token).\(held.token)"
    }

    /// The two watermarks of a delta token, or nil for one this server did not issue.
    static func decodeDeltaToken(_ token: String) -> (through: Watermark, held: Watermark)? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, let through = Watermark(token: parts[0]) else { return nil }
        guard parts.count == 2 else { return (through, through) }
        guard let held = Watermark(token: parts[1]) else { return nil }
        switch (through, held) {
        case (.sequence(let through), .sequence(let held)) where held > through: break
        case (.snapshot(let through), .snapshot(let held)) where held != through && held.xmax >= through.xmax: break
        default: return nil
        }
        return (through, held)
    }

    /// A delta page's skip token: the last sequence served and the page set's `through`.
    static func encodeDeltaSkipToken(after: Int64, through: Watermark) -> String {
        base64URL(Data("s\(after):\(through.token)".utf8))
    }

    /// The last sequence served and `through`; a token from before sequence-order paging (a position) starts the
    /// delta over from its token (changes are sent again, none is skipped).
    static func decodeDeltaSkipToken(_ token: String) throws -> (after: Int64?, through: Watermark?) {
        guard token.utf8.count <= maximumSkipToken, let data = Data(base64URLEncoded: token) else {
            throw invalidSkipToken
        }
        let text = String(decoding: data, as: UTF8.self)
        guard text.hasPrefix("s") else { return (nil, try decodeSkipToken(token, type: nil).through) }
        let parts = text.dropFirst().split(separator: ":")
        guard parts.count == 2, let after = Int64(parts[0]), let through = Watermark(token: parts[1]), after >= 0
        else { throw invalidSkipToken }
        if case .sequence(let through) = through, after > through { throw invalidSkipToken }
        return (after, through)
    }

    /// A skip token's position; a key position must be a key of `type` (nil: none is accepted).
    static func decodeSkipToken(_ token: String, type: EntityType?) throws -> SkipToken {
        guard token.utf8.count <= maximumSkipToken, let data = Data(base64URLEncoded: token) else {
            throw invalidSkipToken
        }
        let text = String(decoding: data, as: UTF8.self)
        if text.hasPrefix("k") {
            let parts = text.dropFirst().split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard let type, parts.count == 3, let offset = Int(parts[0]), (0...maximumOffset).contains(offset),
                let members = (try? JSONValue(parsing: parts[2]))?.arrayValue, members.count == type.key.count
            else { throw invalidSkipToken }
            var through: Watermark?
            if parts[1] != "-" {
                guard let value = Watermark(token: parts[1]) else { throw invalidSkipToken }
                through = value
            }
            var after: [PrimitiveValue] = []
            for (name, member) in zip(type.key, members) {
                // The key's type only, not its facets: a key stored before the model tightened one (a shorter
                // MaxLength) is still a position this server wrote.
                guard let property = type.property(named: name),
                    let value = try? PrimitiveValue(
                        json: member, for: Property(name: name, type: property.type, isNullable: false)),
                    !value.isNull
                else { throw invalidSkipToken }
                after.append(value)
            }
            return SkipToken(offset: offset, through: through, after: after)
        }
        let parts = text.split(separator: ":")
        guard let offset = parts.first.flatMap({ Int($0) }), (0...maximumOffset).contains(offset), parts.count <= 2
        else {
            throw invalidSkipToken
        }
        if parts.count == 2 {
            guard let through = Watermark(token: parts[1]) else { throw invalidSkipToken }
            return SkipToken(offset: offset, through: through)
        }
        return SkipToken(offset: offset)
    }

    /// The largest offset a skip token may carry: far beyond any real collection, far below overflow.
    static let maximumOffset = 1 << 40

    static let invalidSkipToken = ServerError.badRequest(
        "The $skiptoken is not one this server issued; follow @odata.nextLink as given.", target: "$skiptoken")

    /// The relative URL with the named query options (with or without `$`, any case) removed and `option`
    /// appended; empty options are dropped.
    static func replacingQueryOption(in url: String, names: Set<String>, with option: (String, String)) -> String {
        // Split by byte: `?`, `&` and `=` are ASCII, and a combining mark after one would hide it from a split by
        // Character (taking the option after it into the one before). Written in one pass into one buffer: split
        // into arrays of pieces and strings, the link was a sixtieth of a delta page.
        var url = url
        return url.withUTF8 { whole in
            // A fragment is no part of the request (the parser drops it): the link goes without it.
            let end = whole.firstIndex(of: UInt8(ascii: "#")) ?? whole.endIndex
            let question = whole[..<end].firstIndex(of: UInt8(ascii: "?"))
            var link: [UInt8] = []
            link.reserveCapacity(end + option.0.utf8.count + option.1.utf8.count + 2)
            link.append(contentsOf: whole[..<(question ?? end)])
            link.append(UInt8(ascii: "?"))
            if let question {
                var start = question + 1
                while start < end {
                    let stop = whole[start..<end].firstIndex(of: UInt8(ascii: "&")) ?? end
                    let item = whole[start..<stop]
                    if !item.isEmpty, !Self.isQueryOption(item, namedOneOf: names) {
                        link.append(contentsOf: item)
                        link.append(UInt8(ascii: "&"))
                    }
                    start = stop + 1
                }
            }
            link.append(contentsOf: option.0.utf8)
            link.append(UInt8(ascii: "="))
            link.append(contentsOf: option.1.utf8)
            return String(decoding: link, as: UTF8.self)
        }
    }

    /// Whether a query option's name — before its first `=`, percent-decoded when it holds a `%`, without a leading
    /// `$` — is one of `names` (small ASCII letters), its ASCII letters compared without case.
    static func isQueryOption(_ item: Slice<UnsafeBufferPointer<UInt8>>, namedOneOf names: Set<String>) -> Bool {
        let raw = item[..<(item.firstIndex(of: UInt8(ascii: "=")) ?? item.endIndex)]
        // Percent-decoded only when it holds a `%` (Foundation's decoder was a fortieth of a delta page).
        guard raw.contains(UInt8(ascii: "%")) else { return isOneOf(raw, names) }
        return isOneOf(ArraySlice((String(decoding: raw, as: UTF8.self).removingPercentEncoding ?? "").utf8), names)
    }

    /// Whether `name`'s bytes, without one leading `$` and ASCII letters folded to small ones, are one of `names`.
    static func isOneOf<Name: Collection<UInt8>>(_ name: Name, _ names: Set<String>) -> Bool {
        let name = name.first == UInt8(ascii: "$") ? name.dropFirst() : name[...]
        return names.contains { wanted in
            wanted.utf8.count == name.count
                && wanted.utf8.elementsEqual(name) { $0 == HeaderScanner.asciiLowercased($1) }
        }
    }
}
