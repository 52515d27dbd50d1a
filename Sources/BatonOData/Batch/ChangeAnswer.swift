/// What the answer to an uploaded change means for the device that queued it: the one rule the device's upload
/// and the server's refusal metric share.
public enum ChangeAnswer {
    /// Whether the change is refused for good (the device moves it to its error archive): a 4xx other than
    /// 408 (timeout), 424 (another member of its atomicity group failed) and 429 (throttled), which the device
    /// retries, as it does every 5xx.
    public static func isRefusal(status: Int) -> Bool {
        (400..<500).contains(status) && ![408, 424, 429].contains(status)
    }
}
