import BatonSecureStore
import Foundation

/// What the secure store's writer process is told, on its standard input (a passcode never goes on a command line).
package struct StoreWriterInput: Codable, Sendable {
    /// The secure store's file.
    var storePath: String
    var passcode: String

    package init(storePath: String, passcode: String) {
        (self.storePath, self.passcode) = (storePath, passcode)
    }
}

/// The secure store's crash test (`SecureStoreCrashTests`): `baton-chaos store-writer` opens the store and writes an
/// increasing counter forever, printing each value once its write returned, until it is killed.
package enum StoreWriter {
    /// Returns only on failure: 1, with `error MESSAGE` on standard output.
    package static func run(_ input: StoreWriterInput) async -> Int32 {
        do {
            let store = try SecureStore.open(at: URL(fileURLWithPath: input.storePath), passcode: input.passcode)
            var counter = (try await store.value([String].self, forKey: "payload")).flatMap { Int($0[0]) } ?? 0
            // A large value makes each write take long enough to be killed in the middle of one.
            let padding = String(repeating: "x", count: 256 * 1024)
            while true {
                counter += 1
                try await store.set(["\(counter)", padding], forKey: "payload")
                FileHandle.standardOutput.write(Data("\(counter)\n".utf8))
            }
        } catch {
            FileHandle.standardOutput.write(Data("error \(error)\n".utf8))
            return 1
        }
    }
}
