/// A small seeded random source (SplitMix64): the same seed gives the same sequence on every platform, so demo
/// data and fault runs repeat by their seed. Not for anything secret.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    /// The generator's state; the seed to start from.
    public var state: UInt64

    /// A generator starting from `seed`.
    ///
    /// - Parameter seed: the seed.
    public init(seed: UInt64) { state = seed }

    /// The next value of the sequence.
    ///
    /// - Returns: 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in `0..<bound` (0 when `bound` is not positive).
    ///
    /// - Parameter bound: one past the largest value.
    /// - Returns: the value.
    public mutating func next(below bound: Int) -> Int { Int(next() % UInt64(max(1, bound))) }
}
