/// A QR code (ISO/IEC 18004) of a short text in byte mode, versions 1–10, error correction level L or M: enough
/// for a sign-in page's address with its code, drawn in the terminal so a phone opens it. No package on this
/// machine's list draws QR codes; this encoder is checked module for module against the Python `qrcode`
/// library in the tests.
struct QRCode: Sendable {
    enum Level: Sendable, CaseIterable {
        case low, medium

        /// The two format bits of the level.
        var formatBits: Int { self == .low ? 1 : 0 }
    }

    /// `modules[y][x]`: true is dark.
    let modules: [[Bool]]
    let version: Int
    let mask: Int
    var size: Int { modules.count }

    /// Error-correction blocks per version (1–10): codewords of EC per block, then (blocks, data codewords) of
    /// each group.
    static let blocks: [Level: [(ec: Int, groups: [(count: Int, data: Int)])]] = [
        .low: [
            (7, [(1, 19)]), (10, [(1, 34)]), (15, [(1, 55)]), (20, [(1, 80)]), (26, [(1, 108)]),
            (18, [(2, 68)]), (20, [(2, 78)]), (24, [(2, 97)]), (30, [(2, 116)]), (18, [(2, 68), (2, 69)]),
        ],
        .medium: [
            (10, [(1, 16)]), (16, [(1, 28)]), (26, [(1, 44)]), (18, [(2, 32)]), (24, [(2, 43)]),
            (16, [(4, 27)]), (18, [(4, 31)]), (22, [(2, 38), (2, 39)]), (22, [(3, 36), (2, 37)]),
            (26, [(4, 43), (1, 44)]),
        ],
    ]

    static let alignment: [[Int]] = [
        [], [6, 18], [6, 22], [6, 26], [6, 30], [6, 34], [6, 22, 38], [6, 24, 42], [6, 26, 46], [6, 28, 50],
    ]

    /// The smallest code for `text` at `level` (a mask chosen by the standard's penalty rules unless `mask` is
    /// given); nil when the text is longer than version 10 holds.
    init?(_ text: String, level: Level = .low, mask: Int? = nil) {
        let bytes = Array(text.utf8)
        guard
            let version = (1...10).first(where: { version in
                let capacity = Self.dataCodewords(version, level)
                return 4 + (version < 10 ? 8 : 16) + bytes.count * 8 <= capacity * 8
            })
        else { return nil }
        let codewords = Self.codewords(bytes, version: version, level: level)
        var grid = Grid(version: version)
        grid.drawFunctionPatterns()
        grid.place(codewords)
        let penalties = (0..<8).map { grid.masked($0, level: level).penalty }
        let chosen = mask ?? penalties.indices.min { penalties[$0] < penalties[$1] } ?? 0
        let final = grid.masked(chosen, level: level)
        self.modules = final.modules
        self.version = version
        self.mask = chosen
    }

    static func dataCodewords(_ version: Int, _ level: Level) -> Int {
        (blocks[level]?[version - 1].groups ?? []).reduce(0) { $0 + $1.count * $1.data }
    }

    /// Mode, count, bytes, terminator and padding; split into blocks with Reed-Solomon codewords; interleaved.
    static func codewords(_ bytes: [UInt8], version: Int, level: Level) -> [UInt8] {
        var bits: [Bool] = []
        func append(_ value: Int, _ count: Int) {
            for shift in stride(from: count - 1, through: 0, by: -1) { bits.append((value >> shift) & 1 == 1) }
        }
        append(0b0100, 4)
        append(bytes.count, version < 10 ? 8 : 16)
        for byte in bytes { append(Int(byte), 8) }
        let capacity = dataCodewords(version, level) * 8
        append(0, min(4, capacity - bits.count))
        append(0, (8 - bits.count % 8) % 8)
        var data: [UInt8] = stride(from: 0, to: bits.count, by: 8).map { start in
            bits[start..<start + 8].reduce(0) { $0 << 1 | ($1 ? 1 : 0) }
        }
        var pad: UInt8 = 0xEC
        while data.count < capacity / 8 {
            data.append(pad)
            pad = pad == 0xEC ? 0x11 : 0xEC
        }
        guard let layout = blocks[level]?[version - 1] else { return data }
        var dataBlocks: [[UInt8]] = []
        var offset = 0
        for group in layout.groups {
            for _ in 0..<group.count {
                dataBlocks.append(Array(data[offset..<offset + group.data]))
                offset += group.data
            }
        }
        let divisor = ReedSolomon.divisor(degree: layout.ec)
        let ecBlocks = dataBlocks.map { ReedSolomon.remainder($0, divisor: divisor) }
        var result: [UInt8] = []
        for index in 0..<(dataBlocks.map(\.count).max() ?? 0) {
            for block in dataBlocks where index < block.count { result.append(block[index]) }
        }
        for index in 0..<layout.ec {
            for block in ecBlocks { result.append(block[index]) }
        }
        return result
    }

    /// The code in half-block characters, two module rows per line, inside a quiet zone of `border` modules.
    /// Light modules are drawn (a terminal's background is usually dark), so a phone reads dark on light.
    func lines(border: Int = 2) -> [String] {
        let span = size + 2 * border
        func light(_ x: Int, _ y: Int) -> Bool {
            let (mx, my) = (x - border, y - border)
            guard (0..<size).contains(mx), (0..<size).contains(my) else { return true }
            return !modules[my][mx]
        }
        return stride(from: 0, to: span, by: 2).map { y in
            String(
                (0..<span).map { x -> Character in
                    switch (light(x, y), y + 1 < span ? light(x, y + 1) : false) {
                    case (true, true): "█"
                    case (true, false): "▀"
                    case (false, true): "▄"
                    case (false, false): " "
                    }
                })
        }
    }
}

/// The module grid while a code is built: which modules are function patterns, and their colours.
struct Grid {
    let version: Int
    let size: Int
    var modules: [[Bool]]
    var isFunction: [[Bool]]

    init(version: Int) {
        self.version = version
        size = version * 4 + 17
        modules = Array(repeating: Array(repeating: false, count: size), count: size)
        isFunction = modules
    }

    mutating func set(_ x: Int, _ y: Int, _ dark: Bool) {
        modules[y][x] = dark
        isFunction[y][x] = true
    }

    mutating func drawFunctionPatterns() {
        for index in 0..<size {
            set(6, index, index % 2 == 0)
            set(index, 6, index % 2 == 0)
        }
        for (x, y) in [(3, 3), (size - 4, 3), (3, size - 4)] {
            for dy in -4...4 {
                for dx in -4...4 where (0..<size).contains(x + dx) && (0..<size).contains(y + dy) {
                    let distance = max(abs(dx), abs(dy))
                    set(x + dx, y + dy, distance != 2 && distance != 4)
                }
            }
        }
        let positions = QRCode.alignment[version - 1]
        for (i, ax) in positions.enumerated() {
            for (j, ay) in positions.enumerated() {
                let last = positions.count - 1
                if (i == 0 && j == 0) || (i == 0 && j == last) || (i == last && j == 0) { continue }
                for dy in -2...2 {
                    for dx in -2...2 { set(ax + dx, ay + dy, max(abs(dx), abs(dy)) != 1) }
                }
            }
        }
        drawFormat(0, level: .low)  // reserved now, written for real with the mask
        if version >= 7 {
            var remainder = version
            for _ in 0..<12 { remainder = (remainder << 1) ^ ((remainder >> 11) * 0x1F25) }
            let bits = version << 12 | remainder
            for index in 0..<18 {
                let dark = (bits >> index) & 1 == 1
                let a = size - 11 + index % 3
                let b = index / 3
                set(a, b, dark)
                set(b, a, dark)
            }
        }
    }

    mutating func drawFormat(_ mask: Int, level: QRCode.Level) {
        let data = level.formatBits << 3 | mask
        var remainder = data
        for _ in 0..<10 { remainder = (remainder << 1) ^ ((remainder >> 9) * 0x537) }
        let bits = (data << 10 | remainder) ^ 0x5412
        func bit(_ index: Int) -> Bool { (bits >> index) & 1 == 1 }
        for index in 0...5 { set(8, index, bit(index)) }
        set(8, 7, bit(6))
        set(8, 8, bit(7))
        set(7, 8, bit(8))
        for index in 9..<15 { set(14 - index, 8, bit(index)) }
        for index in 0..<8 { set(size - 1 - index, 8, bit(index)) }
        for index in 8..<15 { set(8, size - 15 + index, bit(index)) }
        set(8, size - 8, true)
    }

    /// Places the codewords in the zigzag of two-module columns, right to left, skipping function modules.
    mutating func place(_ codewords: [UInt8]) {
        var index = 0
        var right = size - 1
        while right >= 1 {
            if right == 6 { right = 5 }
            for vertical in 0..<size {
                for column in 0..<2 {
                    let x = right - column
                    let upward = (right + 1) & 2 == 0
                    let y = upward ? size - 1 - vertical : vertical
                    guard !isFunction[y][x], index < codewords.count * 8 else { continue }
                    modules[y][x] = (codewords[index >> 3] >> (7 - (index & 7))) & 1 == 1
                    index += 1
                }
            }
            right -= 2
        }
    }

    /// This grid with `mask` applied to the data modules and its format information written.
    func masked(_ mask: Int, level: QRCode.Level) -> Grid {
        var grid = self
        for y in 0..<size {
            for x in 0..<size where !isFunction[y][x] {
                let invert =
                    switch mask {
                    case 0: (x + y) % 2 == 0
                    case 1: y % 2 == 0
                    case 2: x % 3 == 0
                    case 3: (x + y) % 3 == 0
                    case 4: (x / 3 + y / 2) % 2 == 0
                    case 5: x * y % 2 + x * y % 3 == 0
                    case 6: (x * y % 2 + x * y % 3) % 2 == 0
                    default: ((x + y) % 2 + x * y % 3) % 2 == 0
                    }
                if invert { grid.modules[y][x].toggle() }
            }
        }
        grid.drawFormat(mask, level: level)
        return grid
    }

    /// The standard's penalty: runs of five or more, 2x2 blocks, finder-like patterns, and dark-light balance.
    var penalty: Int {
        var total = 0
        let lines = modules + (0..<size).map { x in (0..<size).map { y in modules[y][x] } }
        let pattern: [Bool] = [true, false, true, true, true, false, true, false, false, false, false]
        let reversed = Array(pattern.reversed())
        for line in lines {
            var run = 1
            for index in 1..<line.count {
                if line[index] == line[index - 1] {
                    run += 1
                    if run == 5 { total += 3 } else if run > 5 { total += 1 }
                } else {
                    run = 1
                }
            }
            // 1:1:3:1:1 with four light modules on one side; the quiet zone outside counts as light.
            let padded = Array(repeating: false, count: 4) + line + Array(repeating: false, count: 4)
            for start in 0...(padded.count - 11) {
                let window = Array(padded[start..<start + 11])
                if window == pattern || window == reversed { total += 40 }
            }
        }
        for y in 0..<size - 1 {
            for x in 0..<size - 1 {
                let color = modules[y][x]
                if modules[y][x + 1] == color, modules[y + 1][x] == color, modules[y + 1][x + 1] == color { total += 3 }
            }
        }
        let dark = modules.reduce(0) { $0 + $1.filter { $0 }.count }
        let cells = size * size
        total += max(0, (abs(dark * 20 - cells * 10) + cells - 1) / cells - 1) * 10
        return total
    }
}

/// Reed-Solomon error correction over GF(256) with the QR polynomial x⁸ + x⁴ + x³ + x² + 1.
enum ReedSolomon {
    static func multiply(_ x: UInt8, _ y: UInt8) -> UInt8 {
        var z = 0
        for bit in stride(from: 7, through: 0, by: -1) {
            z = (z << 1) ^ ((z >> 7) * 0x11D)
            z ^= ((Int(y) >> bit) & 1) * Int(x)
        }
        return UInt8(z & 0xFF)
    }

    /// The generator polynomial's coefficients (highest first, the leading 1 left out).
    static func divisor(degree: Int) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: degree)
        result[degree - 1] = 1
        var root: UInt8 = 1
        for _ in 0..<degree {
            for index in 0..<degree {
                result[index] = multiply(result[index], root)
                if index + 1 < degree { result[index] ^= result[index + 1] }
            }
            root = multiply(root, 0x02)
        }
        return result
    }

    static func remainder(_ data: [UInt8], divisor: [UInt8]) -> [UInt8] {
        var result = [UInt8](repeating: 0, count: divisor.count)
        for byte in data {
            let factor = byte ^ result.removeFirst()
            result.append(0)
            for index in result.indices { result[index] ^= multiply(divisor[index], factor) }
        }
        return result
    }
}
