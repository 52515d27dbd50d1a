import Foundation

extension UUID {
    /// The UUID written as `8-4-4-4-12` hex digits (either case), read by byte: `nil` for anything else — another
    /// length, a missing or misplaced `-`, a sign, a `0x`, a space. Foundation's `UUID(uuidString:)` goes through
    /// `sscanf` on Linux: a sixth of parsing a key URL, a percent of a change in a batch.
    package init?(canonicalText text: UnsafeBufferPointer<UInt8>) {
        guard text.count == 36 else { return nil }
        var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        let complete = withUnsafeMutableBytes(of: &bytes) { buffer -> Bool in
            var count = 0
            var high: UInt8?
            for (offset, byte) in text.enumerated() {
                if offset == 8 || offset == 13 || offset == 18 || offset == 23 {
                    guard byte == UInt8(ascii: "-") else { return false }
                    continue
                }
                guard let digit = hexDigitValue(byte) else { return false }
                if let first = high {
                    buffer[count] = first << 4 | digit
                    count += 1
                    high = nil
                } else {
                    high = digit
                }
            }
            return count == 16
        }
        guard complete else { return nil }
        self.init(uuid: bytes)
    }

    /// `init(canonicalText:)` of a string's UTF-8 bytes. Not generic: across modules a generic reader ran unspecialized,
    /// slower than `sscanf`.
    package init?(canonicalText text: String) {
        guard text.utf8.count == 36 else { return nil }
        var text = text
        guard let uuid = text.withUTF8({ UUID(canonicalText: $0) }) else { return nil }
        self = uuid
    }
}
