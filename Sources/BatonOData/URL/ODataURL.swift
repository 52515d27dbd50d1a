import Foundation

/// A request URL parsed relative to the service root: the addressed resource and its query options.
///
/// ```swift
/// let url = try ODataURL(parsing: "PreflightChecks?$filter=FuelKg gt 5000&$top=5", model: .aircraftChecks)
/// ```
public struct ODataURL: Sendable, Hashable {
    /// The addressed resource.
    public var path: ResourcePath
    /// The entity set and type the path ends in, for resource paths.
    public var target: ResourceTarget?
    /// The system and custom query options.
    public var query: QueryOptions

    /// Parses `relative` (path and optional query, still percent-encoded) against `model`.
    ///
    /// - Throws: ``ODataError`` with the position of the first problem in `relative`: `syntax`, `unknownName`
    ///   (naming the unknown element and suggesting the closest known one), `typeMismatch`, or
    ///   `notImplemented` for valid OData that Baton does not support.
    public init(parsing relative: String, model: ServiceModel) throws(ODataError) {
        guard relative.utf8.count <= 64 * 1024 else {
            throw ODataError(.limitExceeded, "The URL is longer than 65536 bytes")
        }
        var text = Substring(relative)
        var offset = 0
        if text.hasPrefix("/") {
            text = text.dropFirst()
            offset = 1
        }
        if let hash = text.firstIndex(ofByte: UInt8(ascii: "#")) { text = text[..<hash] }
        let rawPath: Substring
        let rawQuery: Substring?
        if let question = text.firstIndex(ofByte: UInt8(ascii: "?")) {
            rawPath = text[..<question]
            rawQuery = text[text.utf8.index(after: question)...]
        } else {
            rawPath = text
            rawQuery = nil
        }
        let (path, target): (ResourcePath, ResourceTarget?)
        if let entity = Self.entityByGUID(rawPath, model: model) {
            (path, target) = entity
        } else {
            (path, target) = try Self.parsePath(rawPath, baseOffset: offset, model: model)
        }
        self.path = path
        self.target = target
        guard let rawQuery else {
            self.query = QueryOptions()
            return
        }
        let queryOffset = offset + rawPath.characterCount + 1
        if let target {
            self.query = try QueryOptionsParser(model: model, entityType: target.entityType)
                .parse(rawQuery, baseOffset: queryOffset)
        } else {
            self.query = try Self.parseServiceLevelQuery(rawQuery, baseOffset: queryOffset, model: model)
        }
    }

    /// Parses the query options of `$metadata`, `$batch` or the service document: only `$format` and
    /// custom options apply there.
    static func parseServiceLevelQuery(_ raw: Substring, baseOffset: Int, model: ServiceModel) throws(ODataError)
        -> QueryOptions
    {
        var options = QueryOptions()
        var offset = baseOffset
        for part in raw.pieces(separatedBy: UInt8(ascii: "&")) {
            defer { offset += part.count + 1 }
            guard !part.isEmpty else { continue }
            let pieces = part.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = try SourceText(raw: pieces[0], baseOffset: offset).string
            let value = try SourceText(raw: pieces.count > 1 ? pieces[1] : "", baseOffset: offset + pieces[0].count + 1)
            let bare = HeaderScanner.asciiLowercased(name.hasPrefix("$") ? name.dropFirst() : name[...])
            if bare == "format" {
                options.format = value.string
            } else if name.hasPrefix("$") || QueryOptionsParser.systemOptions.contains(bare) {
                throw ODataError(
                    .syntax, "Query option '\(name)' does not apply to this resource", position: offset, target: name)
            } else {
                options.customOptions.append(CustomOption(name: name, value: value.string))
            }
        }
        return options
    }

    /// The path of one entity by its GUID key, `Set(GUID)` — the address of nearly every read by key and every change
    /// of a `$batch` — read from its bytes, without making the ``SourceText`` of its segments (under `perf`, a key
    /// read's URL went from about 5.5 µs to 3.3 µs); `nil` for any other path, which ``parsePath(_:baseOffset:model:)`` reads
    /// (and explains when wrong). It takes only a set's name of ASCII letters, digits and `_` and 36 bytes of
    /// canonical GUID text — no `%`, so nothing it reads was escaped — and gives what ``parsePath(_:baseOffset:model:)``
    /// gives for the same path (`ODataURLTests/theGUIDPathsShortPathAgreesWithTheParser`).
    static func entityByGUID(_ raw: Substring, model: ServiceModel) -> (ResourcePath, ResourceTarget?)? {
        let bytes = raw.utf8
        guard bytes.count > 38, bytes.last == UInt8(ascii: ")") else { return nil }
        let open = bytes.index(bytes.endIndex, offsetBy: -38)
        guard bytes[open] == UInt8(ascii: "(") else { return nil }
        for byte in bytes[..<open] {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "_"):
                continue
            default: return nil
            }
        }
        guard let set = model.entitySet(named: String(raw[..<open])), let type = model.entityType(of: set),
            type.key.count == 1, let property = type.property(named: type.key[0]), property.type == .guid
        else { return nil }
        let start = bytes.index(after: open)
        let uuid = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { buffer -> UUID? in
            _ = buffer.initialize(from: bytes[start..<bytes.index(start, offsetBy: 36)])
            return UUID(canonicalText: UnsafeBufferPointer(buffer))
        }
        guard let uuid else { return nil }
        return (
            .resource([.entitySet(set.name), .key([KeyValue(name: property.name, value: .guid(uuid))])]),
            ResourceTarget(entitySet: set, entityType: type, isCollection: false)
        )
    }

    static func parsePath(_ raw: Substring, baseOffset: Int, model: ServiceModel) throws(ODataError)
        -> (ResourcePath, ResourceTarget?)
    {
        if raw.isEmpty { return (.serviceDocument, nil) }
        var segments: [PathSegment] = []
        var offset = baseOffset
        var set: EntitySet?
        var type: EntityType?
        var isCollection = false
        var lastWasPrimitive = false
        var terminal: String?
        var rawSegments = raw.pieces(separatedBy: UInt8(ascii: "/"))
        if rawSegments.count > 1, rawSegments.last?.isEmpty == true { rawSegments.removeLast() }
        for (position, rawSegment) in rawSegments.enumerated() {
            defer { offset += rawSegment.characterCount + 1 }
            let source = try SourceText(raw: rawSegment, baseOffset: offset)
            var name = source.string
            var keyText: SourceText?
            if let open = source.scalars.firstIndex(of: "(") {
                name = source.text(0..<open)
                keyText = SourceText(slicing: source, open..<source.scalars.count)
            }
            if name.isEmpty && keyText == nil {
                throw ODataError(.syntax, "Empty path segment; remove the extra '/'", position: offset)
            }
            if let terminal {
                throw ODataError(.syntax, "Nothing may follow '\(terminal)' in a resource path", position: offset)
            }
            // Only a name that starts with `$` can be one of these: nearly every path names an entity set first.
            if position == 0, name.utf8.first == UInt8(ascii: "$") {
                switch name {
                case "$metadata" where rawSegments.count == 1 && keyText == nil: return (.metadata, nil)
                case "$batch" where rawSegments.count == 1 && keyText == nil: return (.batch, nil)
                case "$metadata", "$batch":
                    throw ODataError(.syntax, "'\(name)' cannot be followed by more path segments", position: offset)
                case "$entity", "$all", "$crossjoin", "$root":
                    throw ODataError(
                        .notImplemented, "The '\(name)' resource is not implemented", position: offset, target: name)
                default: break
                }
            }
            if position == 0 {
                guard let entitySet = model.entitySet(named: name) else {
                    if keyText != nil {
                        throw ODataError(
                            .notImplemented, "Function and action imports ('\(name)') are not implemented",
                            position: offset, target: name)
                    }
                    throw ODataError(
                        .unknownName,
                        "Unknown entity set '\(name)'.\(suggest(name, model.entitySets.map { $0.name }))",
                        position: offset,
                        target: name)
                }
                set = entitySet
                type = model.entityType(of: entitySet)
                isCollection = true
                segments.append(.entitySet(entitySet.name))
            } else {
                guard let currentType = type, let currentSet = set else { break }
                if ["$ref", "$query", "$each", "$filter", "$entity"].contains(name)
                    || name.utf8.contains(UInt8(ascii: "."))
                    || (isCollection && keyText != nil && !name.isEmpty)
                {
                    throw ODataError(
                        .notImplemented,
                        "Path segment '\(source.string)' (references, casts, bound operations, \(name.hasPrefix("$") ? name : "functions")) "
                            + "is not implemented", position: offset, target: name)
                }
                if lastWasPrimitive {
                    guard name == "$value", keyText == nil else {
                        throw ODataError(
                            .syntax, "Only '/$value' may follow a primitive property, not '\(name)'", position: offset)
                    }
                    segments.append(.value)
                    terminal = "$value"
                    continue
                }
                if name == "$count" {
                    guard isCollection, keyText == nil else {
                        throw ODataError(.syntax, "'$count' must follow a collection", position: offset)
                    }
                    segments.append(.count)
                    terminal = "$count"
                    continue
                }
                if name == "$value" {
                    guard keyText == nil, !isCollection else {
                        throw ODataError(
                            .syntax, "'$value' must follow one media entity, not a collection", position: offset,
                            target: name)
                    }
                    // Well-formed, but the type has no media resource.
                    guard currentType.hasStream else {
                        throw ODataError(
                            .typeMismatch, "'\(currentType.name)' is not a media entity type: it has no '$value'",
                            position: offset, target: name)
                    }
                    segments.append(.value)
                    terminal = "$value"
                    continue
                }
                if isCollection {
                    // Key-as-segment (OData 4.01): `Aircraft/D-AIBL`.
                    guard keyText == nil else {
                        throw ODataError(
                            .syntax, "Expected a key after the collection, not '\(source.string)'", position: offset)
                    }
                    segments.append(
                        .key(try parseKeyAsSegment(source, type: currentType, set: currentSet, model: model)))
                    isCollection = false
                    continue
                }
                if let navigation = currentType.navigationProperty(named: name) {
                    guard let targetType = model.entityType(named: navigation.targetType),
                        let targetSet = model.targetSet(of: navigation, from: currentSet)
                    else {
                        throw ODataError(
                            .invalidModel, "Navigation property '\(name)' has no entity set bound", position: offset)
                    }
                    segments.append(.navigation(name))
                    type = targetType
                    set = targetSet
                    isCollection = navigation.isCollection
                } else if let property = currentType.property(named: name), keyText == nil {
                    segments.append(.property(property.name))
                    lastWasPrimitive = true
                    isCollection = false
                    continue
                } else if currentType.isStreamProperty(name), keyText == nil {
                    // A stream property: its bytes, and nothing after them.
                    segments.append(.stream(name))
                    terminal = name
                    isCollection = false
                    continue
                } else if name.hasPrefix("$") {
                    throw ODataError(
                        .notImplemented, "Path segment '\(name)' is not implemented", position: offset, target: name)
                } else {
                    throw ODataError(
                        .unknownName,
                        "Unknown property '\(name)' on '\(currentType.name)'.\(suggest(name, currentType.memberNames))",
                        position: offset, target: name)
                }
            }
            if let keyText, let currentType = type {
                guard isCollection else {
                    throw ODataError(
                        .syntax, "A key predicate can only follow a collection", position: keyText.rawOffsets[0])
                }
                segments.append(.key(try parseKeyPredicate(keyText, type: currentType, model: model)))
                isCollection = false
            }
        }
        guard let set, let type else { return (.resource(segments), nil) }
        return (.resource(segments), ResourceTarget(entitySet: set, entityType: type, isCollection: isCollection))
    }

    /// Parses `(value)` or `(Name=value,…)`.
    static func parseKeyPredicate(_ text: SourceText, type: EntityType, model: ServiceModel) throws(ODataError)
        -> [KeyValue]
    {
        if let key = guidKey(text, type: type) { return [key] }
        var parser = ExpressionParser(source: text, model: model, entityType: type)
        try parser.expect("(", "'('")
        var values: [KeyValue] = []
        let keys = type.keyProperties
        if let word = parser.peekWord(), parser.wordEnd(from: parser.index) < text.scalars.count,
            text.scalars[parser.wordEnd(from: parser.index)] == "=", !["true", "false", "null"].contains(word)
        {
            repeat {
                let start = parser.index
                guard let name = parser.peekWord() else {
                    throw parser.error(.syntax, "Expected a key property name \(parser.foundDescription)")
                }
                parser.index = parser.wordEnd(from: parser.index)
                // Compared byte for byte, as every name of the model is: `==` took a Kelvin sign for a `K`.
                guard let property = keys.first(where: { $0.name.hasSameBytes(as: name) }) else {
                    throw parser.error(
                        .unknownName,
                        "'\(name.prefix(scalars: 80))' is not a key property of '\(type.name)'; its key is (\(type.key.joined(separator: ",")))",
                        at: start, target: name)
                }
                guard !values.contains(where: { $0.name.hasSameBytes(as: name) }) else {
                    throw parser.error(
                        .syntax, "Key property '\(name.prefix(scalars: 80))' is given twice", at: start, target: name)
                }
                try parser.expect("=", "'=' after '\(name.prefix(scalars: 80))'")
                values.append(KeyValue(name: property.name, value: try keyLiteral(&parser, for: property)))
            } while parser.take(",")
            guard values.count == keys.count else {
                throw parser.error(
                    .syntax,
                    "The key of '\(type.name)' has \(keys.count) parts (\(type.key.joined(separator: ","))), "
                        + "but \(values.count) were given")
            }
            values.sort { a, b in
                (type.key.firstIndex(of: a.name) ?? 0) < (type.key.firstIndex(of: b.name) ?? 0)
            }
        } else {
            guard keys.count == 1, let property = keys.first else {
                throw parser.error(
                    .syntax,
                    "'\(type.name)' has a composite key; name its parts: (\(type.key.map { "\($0)=…" }.joined(separator: ",")))"
                )
            }
            values.append(KeyValue(name: property.name, value: try keyLiteral(&parser, for: property)))
        }
        try parser.expect(")", "')' to close the key")
        try parser.expectEnd()
        return values
    }

    /// The key of `(GUID)` when `type`'s key is one `Edm.Guid` property — the address of nearly every request,
    /// read by scalar without the expression parser; `nil` for anything else, which the parser reads (and explains
    /// when wrong). The parser's answer for the same text is the same (`ODataURLTests`).
    static func guidKey(_ text: SourceText, type: EntityType) -> KeyValue? {
        let scalars = text.scalars
        // 38 scalars from 38 raw ones: nothing was percent-encoded (an escaped parenthesis is data to the parser).
        guard scalars.count == 38, text.rawOffsets[38] - text.rawOffsets[0] == 38, scalars[0] == "(",
            scalars[37] == ")", type.key.count == 1,
            let property = type.property(named: type.key[0]), property.type == .guid
        else { return nil }
        let uuid = withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 36) { bytes -> UUID? in
            for (offset, scalar) in scalars[1..<37].enumerated() {
                guard scalar.isASCII else { return nil }
                bytes[offset] = UInt8(scalar.value)
            }
            return UUID(canonicalText: UnsafeBufferPointer(bytes))
        }
        return uuid.map { KeyValue(name: property.name, value: .guid($0)) }
    }

    static func keyLiteral(_ parser: inout ExpressionParser, for property: Property) throws(ODataError)
        -> PrimitiveValue
    {
        let start = parser.index
        let literal: PrimitiveValue
        if parser.peek() == "@" {
            throw parser.error(.notImplemented, "Parameter aliases in keys are not implemented", target: property.name)
        }
        if let word = parser.peekWord(), !["true", "false", "null", "INF", "NaN"].contains(word),
            {
                var probe = parser; return (try? probe.scanGUID()) == nil
            }()
        {
            throw parser.error(
                .unknownName, "'\(word)' is not a value for key '\(property.name)'; quote strings: '\(word)'",
                target: word)
        }
        if parser.peek() == "'" {
            literal = .string(try parser.parseQuotedString())
        } else if let value = try parser.parseBareLiteral() {
            literal = value
        } else {
            throw parser.error(.syntax, "Expected a key value for '\(property.name)' \(parser.foundDescription)")
        }
        guard literal != .null, let converted = literal.converted(to: property.type) else {
            throw parser.error(
                .typeMismatch,
                "Key '\(property.name)' is \(property.type.rawValue), but the value given is "
                    + "\(literal.literalType?.rawValue ?? "null")", at: start, target: property.name)
        }
        return converted
    }

    static func parseKeyAsSegment(_ text: SourceText, type: EntityType, set: EntitySet, model: ServiceModel)
        throws(ODataError) -> [KeyValue]
    {
        guard type.key.count == 1, let property = type.keyProperties.first else {
            throw ODataError(
                .notImplemented,
                "'\(set.name)' has a composite key; address an entity with (\(type.key.map { "\($0)=…" }.joined(separator: ",")))",
                position: text.rawOffsets[0])
        }
        let raw = text.string
        let value: PrimitiveValue
        if property.type == .string {
            value = .string(raw)
        } else {
            do throws(ODataError) {
                var parser = ExpressionParser(source: text, model: model, entityType: type)
                value = try keyLiteral(&parser, for: property)
                try parser.expectEnd()
            } catch {
                throw ODataError(
                    .typeMismatch, "Key '\(property.name)' is \(property.type.rawValue), but '\(raw)' is not",
                    position: text.rawOffsets[0], target: property.name)
            }
        }
        return [KeyValue(name: property.name, value: value)]
    }
}

extension ODataURL {
    /// `text` made safe to stand as the value of a query option (`$filter=` + it): every UTF-8 byte but ASCII
    /// letters, digits and `-._~'()` percent-encoded, so `&`, `#`, `%`, `+` or a line break in a literal cannot end
    /// the option or change it — whatever combining mark stands beside them.
    public static func queryValue(_ text: String) -> String {
        var result = ""
        result.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"), UInt8(ascii: "'"), UInt8(ascii: "("), UInt8(ascii: ")"):
                result.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                result +=
                    "%" + String(byte >> 4, radix: 16, uppercase: true) + String(byte & 15, radix: 16, uppercase: true)
            }
        }
        return result
    }
}
