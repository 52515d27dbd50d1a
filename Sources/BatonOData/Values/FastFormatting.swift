import Foundation

extension UUID {
    /// The lower-case hyphenated form (`0f8fad5b-d9cb-…`), as OData writes GUIDs; formatted by hand because
    /// `uuidString.lowercased()` shows up in profiles of large pages.
    package var lowercasedString: String {
        let hex = Array("0123456789abcdef".utf8)
        var bytes = [UInt8]()
        bytes.reserveCapacity(36)
        withUnsafeBytes(of: uuid) { raw in
            for (index, byte) in raw.enumerated() {
                if index == 4 || index == 6 || index == 8 || index == 10 { bytes.append(UInt8(ascii: "-")) }
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0x0F)])
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Appends `value` as `width` zero-padded ASCII digits.
func appendDigits(_ value: Int, width: Int, to bytes: inout [UInt8]) {
    var divisor = 1
    for _ in 1..<width { divisor *= 10 }
    var remaining = value
    for _ in 0..<width {
        bytes.append(UInt8(ascii: "0") + UInt8(remaining / divisor % 10))
        remaining %= divisor
        divisor /= 10
        if divisor == 0 { divisor = 1 }
    }
}
