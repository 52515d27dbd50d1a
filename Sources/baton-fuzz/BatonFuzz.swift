import BatonOData
import BatonSQL
import Foundation

/// Feeds one input to every parser and what parses to the SQL translation; none may crash or hang. Errors are expected and ignored.
func exercise(_ data: [UInt8]) {
    guard let model = FuzzModel.shared else { return }
    let text = String(decoding: data, as: UTF8.self)
    for candidate in [
        text, "PreflightChecks?$filter=" + text, "PreflightChecks?$search=" + text,
        "PreflightChecks?$orderby=" + text, "Aircraft?$expand=" + text,
    ] {
        // What parses goes on through the SQL translation, in both dialects, as the server and the offline store
        // run it.
        guard let url = try? ODataURL(parsing: candidate, model: model),
            case .resource(let segments) = url.path, case .entitySet(let set)? = segments.first
        else { continue }
        for dialect in [SQLDialect.sqlite, .postgres] {
            _ = try? SQLTranslator(model: model, dialect: dialect).select(from: set, options: url.query)
            _ = try? SQLTranslator(model: model, dialect: dialect).count(from: set, options: url.query)
        }
    }
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

#if BATON_LIBFUZZER
    /// SwiftPM links an executable's `main` to `baton_fuzz_main`, so libFuzzer's own `main` is never used; start
    /// libFuzzer's driver from here instead, through its public C entry point.
    @_cdecl("baton_fuzz_main")
    public func batonFuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
        typealias Callback = @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
        typealias Driver =
            @convention(c) (
                UnsafeMutablePointer<CInt>, UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                Callback
            ) -> CInt
        // The main program's own symbols (libFuzzer is linked into it).
        guard let program = dlopen(nil, RTLD_NOW), let symbol = dlsym(program, "LLVMFuzzerRunDriver") else {
            FileHandle.standardError.write(Data("baton-fuzz: not built with -sanitize=fuzzer\n".utf8))
            return 2
        }
        var count = argc
        var arguments = argv
        return unsafeBitCast(symbol, to: Driver.self)(&count, &arguments) { data, size in
            guard let data else { return 0 }
            exercise(Array(UnsafeBufferPointer(start: data, count: size)))
            return 0
        }
    }
#else
    /// Without libFuzzer: replays the files named on the command line (crash reproducers, corpus files).
    @main
    enum BatonFuzz {
        static func main() {
            for path in CommandLine.arguments.dropFirst() {
                guard let data = FileManager.default.contents(atPath: path) else {
                    FileHandle.standardError.write(Data("baton-fuzz: cannot read \(path)\n".utf8))
                    exit(1)
                }
                exercise(Array(data))
                print("ok \(path)")
            }
        }
    }
#endif
