import BatonOData
import BatonSQL
import Foundation
import Testing

/// A read by key through ``KeyReadCache`` is exactly the full translation of the same read — the first time (which
/// fills the cache) and every time after — for every entity set of the shipped model, on both dialects.
@Suite struct KeyReadCacheTests {
    let model: ServiceModel
    init() throws { model = try ServiceModel.aircraftChecks }

    /// A value of `type` that differs with `seed`.
    static func value(of type: EdmPrimitiveType, seed: Int) -> PrimitiveValue {
        switch type {
        case .guid: .guid(UUID())
        case .string: .string("key '\(seed)' ✈︎ \u{301}")
        case .int16, .int32, .int64, .byte, .sbyte: .integer(Int64(seed * 7 + 1))
        case .boolean: .boolean(seed % 2 == 0)
        default: .string("\(seed)")
        }
    }

    /// The full translation of the read of `key` with `select` and `extra`: the key's conditions as its `$filter`.
    func fullTranslation(
        _ translator: SQLTranslator, set: EntitySet, key: [KeyValue], select: [String]?, extra: [String]
    ) throws -> SQLQuery {
        let type = try #require(model.entityType(of: set))
        var options = QueryOptions()
        options.select = select
        options.filter = ODataExpression.conjunction(ODataExpression.keyConditions(key, of: type))
        return try translator.select(from: set.name, options: options, extraColumns: extra)
    }

    /// Reads `key` through `cache`, expects exactly the full translation of the same read, and returns the read.
    @discardableResult
    func expectTheFullTranslation(
        _ translator: SQLTranslator, set: EntitySet, key: [KeyValue], select: [String]? = nil, extra: [String] = [],
        cache: KeyReadCache, sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> SQLQuery {
        let cached = try translator.select(
            from: set.name, key: key, select: select, extraColumns: extra, cache: cache)
        let full = try fullTranslation(translator, set: set, key: key, select: select, extra: extra)
        #expect(cached.sql == full.sql, "\(set.name) \(select ?? []) \(extra)", sourceLocation: sourceLocation)
        #expect(cached.arguments == full.arguments, sourceLocation: sourceLocation)
        return cached
    }

    @Test(arguments: [SQLDialect.sqlite, .postgres])
    func aKeyReadIsTheFullTranslationBeforeAndAfterItsShapeIsKept(dialect: SQLDialect) throws {
        let translator = SQLTranslator(model: model, dialect: dialect)
        let cache = KeyReadCache()
        var shapes = 0
        for set in model.entitySets {
            let type = try #require(model.entityType(of: set))
            let firstOther = type.properties.first { !type.key.contains($0.name) }?.name
            for select in [nil, firstOther.map { [$0] }] {
                for extra in [[], ["$seq"]] {
                    shapes += 1
                    for seed in 0..<3 {
                        let key = type.keyProperties.map {
                            KeyValue(name: $0.name, value: Self.value(of: $0.type, seed: seed))
                        }
                        let cached = try expectTheFullTranslation(
                            translator, set: set, key: key, select: select, extra: extra, cache: cache)
                        #expect(cached.arguments.count == key.count)
                    }
                }
            }
        }
        #expect(cache.count == shapes)
    }

    @Test func aKeyOfAnotherLiteralTypeIsAShapeOfItsOwn() throws {
        let translator = SQLTranslator(model: model, dialect: .postgres)
        let cache = KeyReadCache()
        let set = try #require(model.entitySet(named: "PreflightChecks"))
        let keyName = try #require(model.entityType(of: set)?.key.first)
        let asGUID = [KeyValue(name: keyName, value: .guid(UUID()))]
        let asText = [KeyValue(name: keyName, value: .string("not-a-guid"))]
        for key in [asGUID, asText, asGUID, asText] {
            try expectTheFullTranslation(translator, set: set, key: key, cache: cache)
        }
        #expect(cache.count == 2)
    }

    @Test func aNullKeyIsTranslatedInFullAndNotKept() throws {
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let cache = KeyReadCache()
        let set = try #require(model.entitySet(named: "PreflightChecks"))
        let keyName = try #require(model.entityType(of: set)?.key.first)
        let key = [KeyValue(name: keyName, value: .null)]
        let cached = try expectTheFullTranslation(translator, set: set, key: key, cache: cache)
        #expect(cached.sql.contains(" IS "))
        #expect(cache.count == 0)
    }

    @Test func theCacheStopsGrowingAtItsCapacityAndStillTranslates() throws {
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let cache = KeyReadCache()
        let set = try #require(model.entitySet(named: "PreflightChecks"))
        let type = try #require(model.entityType(of: set))
        let names = type.properties.map(\.name)
        try #require(names.count >= 10)
        // More distinct `$select` lists than the capacity: the non-empty subsets of the first ten names.
        let selects = (1..<1024).map { mask in
            names.prefix(10).indices.filter { mask & (1 << $0) != 0 }.map { names[$0] }
        }
        try #require(selects.count > KeyReadCache.capacity + 10)
        for select in selects.prefix(KeyReadCache.capacity + 10) {
            let key = type.keyProperties.map { KeyValue(name: $0.name, value: Self.value(of: $0.type, seed: 1)) }
            try expectTheFullTranslation(translator, set: set, key: key, select: select, cache: cache)
        }
        #expect(cache.count == KeyReadCache.capacity)
        // The server's own shapes (no `$select`) are kept still: a client's lists cannot take their place.
        for set in model.entitySets {
            let type = try #require(model.entityType(of: set))
            let key = type.keyProperties.map { KeyValue(name: $0.name, value: Self.value(of: $0.type, seed: 2)) }
            try expectTheFullTranslation(translator, set: set, key: key, cache: cache)
        }
        #expect(cache.count == KeyReadCache.capacity + model.entitySets.count)
    }

    @Test func oneSelectionInAnyOrderOrWithRepeatsIsOneShape() throws {
        let translator = SQLTranslator(model: model, dialect: .postgres)
        let cache = KeyReadCache()
        let set = try #require(model.entitySet(named: "PreflightChecks"))
        let type = try #require(model.entityType(of: set))
        let names = Array(type.properties.map(\.name).suffix(3))
        try #require(names.count == 3)
        for select in [names, names.reversed(), [names[1], names[0], names[2], names[0]]] {
            let key = type.keyProperties.map { KeyValue(name: $0.name, value: Self.value(of: $0.type, seed: 3)) }
            try expectTheFullTranslation(translator, set: set, key: key, select: select, cache: cache)
        }
        #expect(cache.count == 1)
    }

    @Test func anUnknownEntitySetIsRefusedAsTheFullTranslationRefusesIt() throws {
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let key = [KeyValue(name: "ID", value: .guid(UUID()))]
        let full = #expect(throws: BatonSQLError.self) {
            try translator.select(from: "NoSuchSet", options: QueryOptions())
        }
        let cached = #expect(throws: BatonSQLError.self) {
            try translator.select(from: "NoSuchSet", key: key, cache: KeyReadCache())
        }
        #expect(full == cached)
    }
}
