import BatonOData
import Foundation
import Yams

/// The OASIS OData ABNF test-case corpus (Tests/BatonODataTests/Corpus), read with Yams.
struct ABNFCorpus: Sendable {
    struct Case: Sendable, CustomStringConvertible {
        var name: String
        var rule: String
        var input: String
        var failAt: Int?
        var description: String { "\(rule) «\(input)» (\(name))" }
    }

    var cases: [Case]
    /// Model element names by kind, from the corpus's `Constraints`.
    var constraints: [String: [String]]

    static let shared: ABNFCorpus = {
        do {
            return try load()
        } catch {
            fatalError("Cannot read the ABNF corpus: \(error)")
        }
    }()

    static func load() throws -> ABNFCorpus {
        guard
            let url = Bundle.module.url(
                forResource: "odata-abnf-testcases", withExtension: "yaml", subdirectory: "Corpus")
        else { throw CocoaError(.fileNoSuchFile) }
        var text = try String(contentsOf: url, encoding: .utf8)
        // One Input holds a raw tab in a plain scalar, which YAML forbids; quote such lines so libyaml reads them.
        text = text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            guard line.contains("\t"), let colon = line.range(of: "Input: ") else { return String(line) }
            let value = line[colon.upperBound...].replacingOccurrences(of: "\\", with: "\\\\")
                .replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\t", with: "\\t")
            return line[..<colon.upperBound] + "\"" + value + "\""
        }.joined(separator: "\n")
        guard let root = try Yams.compose(yaml: text) else { throw CocoaError(.fileReadCorruptFile) }
        var constraints: [String: [String]] = [:]
        for (key, value) in root["Constraints"]?.mapping ?? [:] {
            constraints[key.string ?? ""] = value.sequence?.compactMap(\.string) ?? []
        }
        var cases: [Case] = []
        for node in root["TestCases"]?.sequence ?? [] {
            guard let rule = node["Rule"]?.string, let input = node["Input"]?.string else { continue }
            cases.append(
                Case(
                    name: node["Name"]?.string ?? "", rule: rule, input: input,
                    failAt: node["FailAt"]?.string.flatMap { Int($0) }))
        }
        return ABNFCorpus(cases: cases, constraints: constraints)
    }

    /// Names of model elements of kinds Baton's model does not have (complex and collection properties,
    /// streams, functions, actions, singletons, enumerations, type casts, parameters, annotations).
    var unsupportedElementNames: Set<String> {
        let kinds = [
            "complexProperty", "complexColProperty", "primitiveColProperty", "streamProperty", "complexTypeName",
            "entityTypeName", "action", "actionImport", "complexColFunction", "complexColFunctionImport",
            "complexFunction", "complexFunctionImport", "entityColFunction", "entityColFunctionImport",
            "entityFunction", "entityFunctionImport", "primitiveColFunction", "primitiveColFunctionImport",
            "primitiveFunction", "primitiveFunctionImport", "singletonEntity", "enumerationMember",
            "enumerationTypeName", "parameterName", "namespacePart", "customName",
        ]
        return Set(kinds.flatMap { constraints[$0] ?? [] })
    }

    /// A typed model for the corpus: every entity set holds `Thing`s (key `ID`), except `OrderItems`
    /// (composite key `OrderID`, `ItemID`). `Thing` has every primitive property the corpus names, with a
    /// plausible type, and every navigation property it names.
    static func model(constraints: [String: [String]]) throws -> ServiceModel {
        let types: [String: EdmPrimitiveType] = [
            "Age": .int32, "Amount": .decimal, "BirthDate": .dateTimeOffset, "Completed": .boolean, "Cost": .decimal,
            "LifeTime": .duration, "Month": .int32, "Population": .int64, "Price": .decimal, "Quantity": .int32,
            "Rating": .int32, "ReleaseDate": .dateTimeOffset, "Revenue": .decimal, "Shipped": .boolean,
            "SumAmount": .decimal, "TaxRate": .decimal, "X": .int32, "Size": .int32, "Date": .date,
        ]
        var properties = [Property(name: "ID", type: .int32, isNullable: false)]
        for name in (constraints["primitiveNonKeyProperty"] ?? []) + ["Size", "Date", "Code"] where name != "ID" {
            if !properties.contains(where: { $0.name == name }) {
                properties.append(Property(name: name, type: types[name] ?? .string))
            }
        }
        var navigations: [NavigationProperty] = []
        for name in constraints["entityNavigationProperty"] ?? [] {
            navigations.append(NavigationProperty(name: name, targetType: "Model.Thing"))
        }
        for name in constraints["entityColNavigationProperty"] ?? [] {
            navigations.append(NavigationProperty(name: name, targetType: "Model.Thing", isCollection: true))
        }
        let thing = EntityType(name: "Thing", key: ["ID"], properties: properties, navigationProperties: navigations)
        let orderItem = EntityType(
            name: "OrderItem", key: ["OrderID", "ItemID"],
            properties: [
                Property(name: "OrderID", type: .int32, isNullable: false),
                Property(name: "ItemID", type: .string, isNullable: false), Property(name: "Quantity", type: .int32),
            ])
        var sets = (constraints["entitySetName"] ?? []).filter { $0 != "OrderItems" }.map {
            EntitySet(name: $0, entityType: "Model.Thing")
        }
        sets.append(EntitySet(name: "OrderItems", entityType: "Model.OrderItem"))
        return try ServiceModel(namespace: "Model", entityTypes: [thing, orderItem], entitySets: sets)
    }
}
