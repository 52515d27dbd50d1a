extension StringProtocol {
    /// The first `count` Unicode scalars: how text from outside is cut to a length before it is stored, shown or
    /// named in an error. `prefix(_:)` counts `Character`s, and one character may carry any number of combining
    /// marks, so a bound in characters bounds nothing.
    package func prefix(scalars count: Int) -> String {
        String(String.UnicodeScalarView(unicodeScalars.prefix(count)))
    }

    /// The text itself if it has at most `count` Unicode scalars, else its first `count` and `…`: a bound on what an
    /// error echoes (``ODataError``, the server's errors).
    package func bounded(toScalars count: Int) -> String {
        var end = unicodeScalars.startIndex
        guard unicodeScalars.formIndex(&end, offsetBy: count, limitedBy: unicodeScalars.endIndex),
            end != unicodeScalars.endIndex
        else { return String(self) }
        return String(String.UnicodeScalarView(unicodeScalars[..<end])) + "…"
    }
}

extension String {
    /// The text for a message naming outside text that no one reads in place (a provider's error code, a database
    /// URL's option): its printable ASCII bytes among its first 80, nothing else — no line end, escape sequence or
    /// control byte, whatever escaping brought it.
    package var printableASCII: String {
        String(decoding: utf8.prefix(80).filter { (0x20...0x7E).contains($0) }, as: UTF8.self)
    }

    /// Whether the two strings are the same UTF-8 bytes: names of the model, keys and URIs are compared so, never
    /// with `==`, which takes canonically equivalent strings (a Kelvin sign and a `K`, a precomposed and a combined
    /// `é`) for one.
    ///
    /// The two byte buffers are compared at once: `utf8.elementsEqual(_:)` read each byte through a protocol
    /// witness, about 0.7 µs of a key read in the model's lookups (the witness's own samples under `perf`).
    package func hasSameBytes(as other: String) -> Bool {
        var first = self
        var second = other
        return first.withUTF8 { first in
            second.withUTF8 { second in first.count == second.count && first.elementsEqual(second) }
        }
    }
}
