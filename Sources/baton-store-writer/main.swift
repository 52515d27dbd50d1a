import BatonSecureStore
import Foundation

// Test helper for the secure store's crash safety: opens the store at the path given as the only argument
// with the passcode read from standard input (never from the command line), then writes an increasing
// counter forever, printing each value once its write returned. The test kills it at a random moment.
guard CommandLine.arguments.count == 2, let passcode = readLine(strippingNewline: true) else {
    FileHandle.standardError.write(Data("usage: baton-store-writer STORE-FILE < passcode\n".utf8))
    exit(64)
}
let url = URL(fileURLWithPath: CommandLine.arguments[1])
do {
    let store = try SecureStore.open(at: url, passcode: passcode)
    var counter = (try await store.value([String].self, forKey: "payload")).flatMap { Int($0[0]) } ?? 0
    // A large value makes each write take long enough to be killed in the middle of one.
    let padding = String(repeating: "x", count: 256 * 1024)
    while true {
        counter += 1
        try await store.set(["\(counter)", padding], forKey: "payload")
        FileHandle.standardOutput.write(Data("\(counter)\n".utf8))
    }
} catch {
    FileHandle.standardError.write(Data("baton-store-writer: \(error)\n".utf8))
    exit(1)
}
