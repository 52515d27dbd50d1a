extension StringProtocol {
    /// The first `count` Unicode scalars: how text from outside is cut to a length before it is stored, shown or
    /// named in an error. `prefix(_:)` counts `Character`s, and one character may carry any number of combining
    /// marks, so a bound in characters bounds nothing.
    package func prefix(scalars count: Int) -> String {
        String(String.UnicodeScalarView(unicodeScalars.prefix(count)))
    }
}

extension String {
    /// Whether the two strings are the same UTF-8 bytes: names of the model, keys and URIs are compared so, never
    /// with `==`, which takes canonically equivalent strings (a Kelvin sign and a `K`, a precomposed and a combined
    /// `é`) for one.
    ///
    /// The two byte buffers are compared at once: `utf8.elementsEqual(_:)` read each byte through a protocol
    /// witness, a microsecond and a half of every key read in the model's lookups.
    package func hasSameBytes(as other: String) -> Bool {
        var first = self
        var second = other
        return first.withUTF8 { first in
            second.withUTF8 { second in first.count == second.count && first.elementsEqual(second) }
        }
    }
}
