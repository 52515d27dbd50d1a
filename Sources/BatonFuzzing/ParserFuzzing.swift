import BatonOData
import BatonSQL
import Foundation

/// One fuzz input through one of Baton's parsers: the first byte picks the parser, the rest is its input. None
/// may crash or hang; errors are expected and ignored. What parses goes on where the server takes it: a URL
/// through the SQL translation in both dialects, a CSDL document back out as CSDL XML and JSON.
///
/// `baton-fuzz` runs it under libFuzzer; the tests replay the kept corpus and every input that once crashed
/// (`fuzz/corpus`, `fuzz/regressions`) through it.
public enum ParserFuzzing {
    public enum Target: UInt8, CaseIterable, Sendable {
        case url, filter, queryOptions, json, jsonBatch, multipartBatch, payload, csdl, headers
    }

    static let model: ServiceModel? = try? ServiceModel.aircraftChecks

    /// Whether the model the inputs are parsed against loaded (without it every input is skipped).
    public static var isReady: Bool { model != nil }

    /// The target an input goes to.
    public static func target(of data: some Collection<UInt8>) -> Target? {
        data.first.flatMap { Target(rawValue: $0 % UInt8(Target.allCases.count)) }
    }

    public static func exercise(_ data: [UInt8]) {
        guard let model, let target = target(of: data) else { return }
        let input = Array(data.dropFirst())
        let text = String(decoding: input, as: UTF8.self)
        switch target {
        case .url:
            translate(text, model: model)
        case .filter:
            translate("PreflightChecks?$filter=" + text, model: model)
        case .queryOptions:
            translate("PreflightChecks?" + text, model: model)
            translate("Aircraft?$expand=" + text, model: model)
        case .json:
            if let value = try? JSONValue(parsing: input) { _ = try? ODataPayload.decodeError(value) }
        case .jsonBatch:
            _ = try? JSONBatch.decodeRequests(input)
            _ = try? JSONBatch.decodeResponses(input)
        case .multipartBatch:
            _ = try? MultipartBatch.decodeRequests(input, boundary: "b")
            _ = try? MultipartBatch.decodeResponses(input, boundary: "b")
        case .payload:
            guard let checks = model.entityType(named: "PreflightCheck") else { return }
            _ = try? EntityPayload(decoding: input, as: checks, mode: .create)
            _ = try? EntityPayload(decoding: input, as: checks, mode: .merge)
        case .csdl:
            guard let parsed = try? ServiceModel(csdlJSON: text) else { return }
            _ = parsed.csdlXML
            _ = parsed.csdlJSONDocument
            if let set = parsed.entitySets.first { translate("\(set.name)?$top=1&$count=true", model: parsed) }
        case .headers:
            _ = try? ETagCondition(parsing: text)
            _ = try? Preferences(parsing: text.split(separator: "\n").map(String.init))
            _ = try? ODataVersion(parsing: text)
            _ = DeviceRequestProof.parse(text)
            _ = Repeatability.parseIMFFixdate(text)
            _ = try? PrimitiveValue(parsingLiteral: text)
        }
    }

    /// Parses `url`; what parses is translated to SQL in both dialects, as the server and the offline store run it.
    static func translate(_ url: String, model: ServiceModel) {
        guard let parsed = try? ODataURL(parsing: url, model: model), case .resource(let segments) = parsed.path,
            case .entitySet(let set)? = segments.first
        else { return }
        for dialect in [SQLDialect.sqlite, .postgres] {
            _ = try? SQLTranslator(model: model, dialect: dialect).select(from: set, options: parsed.query)
            _ = try? SQLTranslator(model: model, dialect: dialect).count(from: set, options: parsed.query)
        }
    }
}
