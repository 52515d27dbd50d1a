import BatonOData
import Foundation

/// Feeds one input to every parser; none may crash or hang. Errors are expected and ignored.
func exercise(_ data: [UInt8]) {
    guard let model = FuzzModel.shared else { return }
    let text = String(decoding: data, as: UTF8.self)
    _ = try? ODataURL(parsing: text, model: model)
    _ = try? ODataURL(parsing: "PreflightChecks?$filter=" + text, model: model)
    _ = try? JSONValue(parsing: data)
    _ = try? JSONBatch.decodeRequests(data)
    _ = try? MultipartBatch.decodeRequests(data, boundary: "b")
    if let type = model.entityType(named: "PreflightCheck") {
        _ = try? EntityPayload(decoding: data, as: type, mode: .create)
    }
    _ = try? ETagCondition(parsing: text)
    _ = try? Preferences(parsing: [text])
}

enum FuzzModel {
    static let shared: ServiceModel? = try? ServiceModel.aircraftChecks
}

/// The libFuzzer entry point, used when built with `-sanitize=fuzzer` (see the README).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    exercise(Array(UnsafeBufferPointer(start: start, count: count)))
    return 0
}

#if !BATON_LIBFUZZER
    // Without libFuzzer: replay the files named on the command line (crash reproducers, corpus files).
    for path in CommandLine.arguments.dropFirst() {
        guard let data = FileManager.default.contents(atPath: path) else {
            FileHandle.standardError.write(Data("baton-fuzz: cannot read \(path)\n".utf8))
            exit(1)
        }
        exercise(Array(data))
        print("ok \(path)")
    }
#endif
