import BatonFuzzing
import Foundation

/// The libFuzzer entry point, used when built with `-sanitize=fuzzer` (see docs/FUZZING.md).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    ParserFuzzing.exercise(Array(UnsafeBufferPointer(start: start, count: count)))
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
            ParserFuzzing.exercise(Array(UnsafeBufferPointer(start: data, count: size)))
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
                ParserFuzzing.exercise(Array(data))
                print("ok \(path)")
            }
        }
    }
#endif
