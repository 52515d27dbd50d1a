extension StringProtocol {
    /// The first `count` Unicode scalars: how text from outside is cut to a length before it is stored, shown or
    /// named in an error. `prefix(_:)` counts `Character`s, and one character may carry any number of combining
    /// marks, so a bound in characters bounds nothing.
    package func prefix(scalars count: Int) -> String {
        String(String.UnicodeScalarView(unicodeScalars.prefix(count)))
    }
}
