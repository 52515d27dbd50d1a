import BatonOData
import BatonSQL
import Foundation
import Testing

/// A read by key through ``SQLTextCache`` is exactly the full translation of the same read — the first time (which
/// fills the cache) and every time after — for every entity set of the shipped model, on both dialects.
@Suite struct SQLTextCacheTests {
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
        cache: SQLTextCache, sourceLocation: SourceLocation = #_sourceLocation
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
        let cache = SQLTextCache()
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
        let cache = SQLTextCache()
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
        let cache = SQLTextCache()
        let set = try #require(model.entitySet(named: "PreflightChecks"))
        let keyName = try #require(model.entityType(of: set)?.key.first)
        let key = [KeyValue(name: keyName, value: .null)]
        let cached = try expectTheFullTranslation(translator, set: set, key: key, cache: cache)
        #expect(cached.sql.contains(" IS "))
        #expect(cache.count == 0)
    }

    @Test func theCacheStopsGrowingAtItsCapacityAndStillTranslates() throws {
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let cache = SQLTextCache()
        let set = try #require(model.entitySet(named: "PreflightChecks"))
        let type = try #require(model.entityType(of: set))
        let names = type.properties.map(\.name)
        try #require(names.count >= 10)
        // More distinct `$select` lists than the capacity: the non-empty subsets of the first ten names.
        let selects = (1..<1024).map { mask in
            names.prefix(10).indices.filter { mask & (1 << $0) != 0 }.map { names[$0] }
        }
        try #require(selects.count > SQLTextCache.capacity + 10)
        for select in selects.prefix(SQLTextCache.capacity + 10) {
            let key = type.keyProperties.map { KeyValue(name: $0.name, value: Self.value(of: $0.type, seed: 1)) }
            try expectTheFullTranslation(translator, set: set, key: key, select: select, cache: cache)
        }
        #expect(cache.count == SQLTextCache.capacity)
        // The server's own shapes (no `$select`) are kept still: a client's lists cannot take their place.
        for set in model.entitySets {
            let type = try #require(model.entityType(of: set))
            let key = type.keyProperties.map { KeyValue(name: $0.name, value: Self.value(of: $0.type, seed: 2)) }
            try expectTheFullTranslation(translator, set: set, key: key, cache: cache)
        }
        #expect(cache.count == SQLTextCache.capacity + model.entitySets.count)
    }

    @Test func oneSelectionInAnyOrderOrWithRepeatsIsOneShape() throws {
        let translator = SQLTranslator(model: model, dialect: .postgres)
        let cache = SQLTextCache()
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
            try translator.select(from: "NoSuchSet", key: key, cache: SQLTextCache())
        }
        #expect(full == cached)
    }

    /// Updates `key` of `set` through `cache`, expects exactly the full translation of the same update (or the same
    /// error), and returns the update.
    @discardableResult
    func expectTheFullUpdate(
        _ translator: SQLTranslator, set: String, key: [KeyValue], values: [String: PrimitiveValue],
        system: [(String, SQLValue)] = [("$seq", .integer(7))], cache: SQLTextCache,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws -> SQLQuery? {
        let full = Result { () throws(BatonSQLError) -> SQLQuery in
            try translator.update(set, key: key, values: values, systemValues: system)
        }
        let cached = Result { () throws(BatonSQLError) -> SQLQuery in
            try translator.update(set, key: key, values: values, systemValues: system, cache: cache)
        }
        switch (full, cached) {
        case (.success(let full), .success(let cached)):
            #expect(cached.sql == full.sql, "\(set) \(values.keys.sorted())", sourceLocation: sourceLocation)
            #expect(cached.arguments == full.arguments, sourceLocation: sourceLocation)
            return cached
        case (.failure(let full), .failure(let cached)):
            #expect(cached == full, sourceLocation: sourceLocation)
            return nil
        default:
            Issue.record("full \(full), cached \(cached)", sourceLocation: sourceLocation)
            return nil
        }
    }

    @Test(arguments: [SQLDialect.sqlite, .postgres])
    func anUpdateIsTheFullTranslationBeforeAndAfterItsShapeIsKept(dialect: SQLDialect) throws {
        let translator = SQLTranslator(model: model, dialect: dialect)
        let cache = SQLTextCache()
        var shapes = 0
        for set in model.entitySets {
            let type = try #require(model.entityType(of: set))
            let others = type.properties.filter { !type.key.contains($0.name) }
            // One property, the first two, and all of them: each its own shape.
            for count in Set([1, min(2, others.count), others.count]) where count > 0 {
                shapes += 1
                for seed in 0..<3 {
                    let key = type.keyProperties.map {
                        KeyValue(name: $0.name, value: Self.value(of: $0.type, seed: seed))
                    }
                    let values = Dictionary(
                        uniqueKeysWithValues: others.prefix(count).map {
                            ($0.name, Self.value(of: $0.type, seed: seed))
                        })
                    let update = try expectTheFullUpdate(
                        translator, set: set.name, key: key, values: values, cache: cache)
                    #expect(update?.arguments.count == count + 1 + key.count)
                }
            }
        }
        #expect(cache.count == shapes)
    }

    @Test func anUpdateTheTranslationRefusesIsRefusedTheSameWayAndNotKept() throws {
        let translator = SQLTranslator(model: model, dialect: .postgres)
        let cache = SQLTextCache()
        let type = try #require(model.entityType(named: "PreflightCheck"))
        let id = KeyValue(name: "ID", value: .guid(UUID()))
        let remarks: [String: PrimitiveValue] = ["Remarks": .string("ok")]
        try #require(type.key == ["ID"])
        // Fill the shape first, so a refusal cannot hide behind a miss.
        try expectTheFullUpdate(translator, set: "PreflightChecks", key: [id], values: remarks, cache: cache)
        #expect(cache.count == 1)
        for (key, values, system) in [
            ([id], ["Remarks": .string("ok"), "NoSuchProperty": .integer(1)], [("$seq", SQLValue.integer(7))]),
            ([id, id], remarks, [("$seq", .integer(7))]),
            ([KeyValue(name: "Remarks", value: .string("x"))], remarks, [("$seq", .integer(7))]),
            ([], remarks, [("$seq", .integer(7))]),
            ([id], [:], []),
        ] as [([KeyValue], [String: PrimitiveValue], [(String, SQLValue)])] {
            let update = try expectTheFullUpdate(
                translator, set: "PreflightChecks", key: key, values: values, system: system, cache: cache)
            #expect(update == nil, "\(key) \(values)")
        }
        try expectTheFullUpdate(translator, set: "NoSuchSet", key: [id], values: remarks, cache: cache)
        #expect(cache.count == 1)
    }

    /// A kept update's text depends on its shape alone: values of other literal types, and null, set into the same
    /// columns, bind into the same statement exactly as the full translation binds them.
    @Test(arguments: [SQLDialect.sqlite, .postgres])
    func anUpdateShapeKeptOnceServesValuesOfEveryKind(dialect: SQLDialect) throws {
        let translator = SQLTranslator(model: model, dialect: dialect)
        let cache = SQLTextCache()
        let type = try #require(model.entityType(named: "PreflightCheck"))
        let fuel = try #require(type.property(named: "FuelKg"))
        let remarks = try #require(type.property(named: "Remarks"))
        try #require(fuel.type == .decimal && remarks.type == .string)
        let key = [KeyValue(name: "ID", value: .guid(UUID()))]
        for value in [
            PrimitiveValue.decimal(Decimal(string: "5200.25") ?? 0), .null, .integer(5200), .double(5200.5),
            .decimal(Decimal(string: "-0.001") ?? 0),
        ] {
            try expectTheFullUpdate(
                translator, set: "PreflightChecks", key: key,
                values: ["FuelKg": value, "Remarks": value == .null ? .null : .string("ok")], cache: cache)
        }
        #expect(cache.count == 1)
    }

    @Test func updateShapesStopAtTheCapacityAndAreStillTranslated() throws {
        let translator = SQLTranslator(model: model, dialect: .sqlite)
        let cache = SQLTextCache()
        let type = try #require(model.entityType(named: "PreflightCheck"))
        let others = type.properties.filter { !type.key.contains($0.name) }
        try #require(others.count >= 10)
        let key = [KeyValue(name: "ID", value: .guid(UUID()))]
        for mask in 1..<(SQLTextCache.capacity + 10) {
            let chosen = others.prefix(10).indices.filter { mask & (1 << $0) != 0 }.map { others[$0] }
            let values = Dictionary(uniqueKeysWithValues: chosen.map { ($0.name, Self.value(of: $0.type, seed: mask)) })
            try expectTheFullUpdate(translator, set: "PreflightChecks", key: key, values: values, cache: cache)
        }
        #expect(cache.count == SQLTextCache.capacity)
    }
}
