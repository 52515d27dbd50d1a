import ConsoleKitTerminal
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The terminal the app talks through: console-kit's `Terminal` for styled output, hidden input and progress
/// bars; colours off when `NO_COLOR` is set (https://no-color.org), `TERM=dumb`, or the output is not a
/// terminal. Reading never crashes at the end of input: it answers `nil`, which every screen treats as "back"
/// or "quit".
final class ConsoleUI: Sendable {
    let terminal = Terminal()
    /// Whether styled output and terminal commands (moving the cursor, clearing) are used.
    let styled: Bool
    /// Whether standard input is a terminal (hidden input then reads from it without echo).
    let interactive: Bool
    /// When the person last answered a prompt (the inactivity lock's clock).
    let lastInput = Mutex(Date())
    /// Whether standard input has ended (Ctrl-D, a closed pipe): the app quits instead of asking again.
    var inputEnded: Bool { ended.withLock { $0 } }
    let ended = Mutex(false)

    init(environment: [String: String] = ProcessInfo.processInfo.environment) {
        let noColor = !(environment["NO_COLOR"] ?? "").isEmpty || environment["TERM"] == "dumb"
        styled = !noColor && isatty(STDOUT_FILENO) == 1
        interactive = isatty(STDIN_FILENO) == 1
        terminal.stylizedOutputOverride = styled
        terminal.activityBarWidth = 30
    }

    // MARK: Output

    func say(_ text: String, _ style: ConsoleStyle = .plain) {
        terminal.output(Self.wrapped(text).consoleText(style), newLine: true)
    }

    /// `text` with every line longer than `width` columns broken at spaces (continuations indented by two), so
    /// every screen fits an 80-column terminal whatever a message says.
    static func wrapped(_ text: String, width: Int = 80) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).map { line -> String in
            guard line.count > width else { return String(line) }
            var lines: [String] = []
            var current = ""
            for word in line.split(separator: " ", omittingEmptySubsequences: false) {
                let candidate = current.isEmpty ? String(word) : current + " " + word
                if candidate.count > width, !current.isEmpty {
                    lines.append(current)
                    current = "  " + word
                } else {
                    current = candidate
                }
            }
            lines.append(current)
            return lines.joined(separator: "\n")
        }.joined(separator: "\n")
    }

    func heading(_ text: String) { say(text, ConsoleStyle(color: .cyan, isBold: true)) }
    func success(_ text: String) { say("✓ " + text, .success) }
    func warning(_ text: String) { say("! " + text, .warning) }
    func failure(_ text: String) { say("✗ " + text, .error) }
    func dim(_ text: String) { say(text, ConsoleStyle(color: .brightBlack)) }

    /// The outcome of an action: shown now, and again at the top of the next screen so a screen change
    /// does not wipe it.
    func notice(_ text: String, _ style: ConsoleStyle = .success) {
        say(text, style)
        carried.withLock { $0.append((text, style)) }
    }

    let carried = Mutex<[(String, ConsoleStyle)]>([])

    /// Starts a new screen: clears the terminal when it can.
    func newScreen() {
        // console-kit erases the screen; the cursor goes home with the ANSI "CUP" sequence it has no command for.
        if styled {
            terminal.clear(.screen)
            terminal.output("\u{1B}[H".consoleText(), newLine: false)
            for (text, style) in carried.withLock({ $0 }) { say(text, style) }
        } else {
            say("")
        }
        carried.withLock { $0.removeAll() }
    }

    // MARK: Input

    /// One line typed by the person, trimmed; `nil` at the end of input (Ctrl-D, closed pipe).
    func ask(_ prompt: String) async -> String? {
        // Room for a short answer after a prompt on an 80-column screen.
        terminal.output(Self.wrapped(prompt, width: 72).consoleText(.info) + " ", newLine: false)
        let line = await Self.offThread { Swift.readLine(strippingNewline: true) }
        lastInput.withLock { $0 = Date() }
        if line == nil { ended.withLock { $0 = true } }
        return line?.trimmingCharacters(in: .whitespaces)
    }

    /// A secret typed without echo (console-kit's passphrase reading on the terminal); from a pipe, one line.
    /// `nil` when nothing was typed or the input ended.
    func askSecret(_ prompt: String) async -> String? {
        terminal.output(Self.wrapped(prompt, width: 72).consoleText(.info) + " ", newLine: false)
        let interactive = interactive
        let terminal = terminal
        let secret = await Self.offThread { () -> String? in
            interactive ? terminal.input(isSecure: true) : Swift.readLine(strippingNewline: true)
        }
        if secret == nil { ended.withLock { $0 = true } }
        lastInput.withLock { $0 = Date() }
        guard let secret, !secret.isEmpty else { return nil }
        return secret
    }

    /// Asks until `parse` accepts the answer, printing its reason each time it does not. `nil` when the person
    /// goes back (an empty line when `optional` is false, or the end of input).
    func ask<Value>(_ prompt: String, optional: Bool = false, _ parse: (String) -> Result<Value, InputProblem>)
        async -> Value??
    {
        while true {
            guard let answer = await ask(prompt) else { return nil }
            if answer.isEmpty, !optional { return nil }
            if answer.isEmpty { return .some(nil) }
            switch parse(answer) {
            case .success(let value): return .some(value)
            case .failure(let problem): failure(problem.message)
            }
        }
    }

    /// Reads on a thread of its own so the app's tasks (auto-lock, sync progress) keep running meanwhile.
    static func offThread<T: Sendable>(_ read: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: read()) }
        }
    }

    // MARK: Progress

    /// A progress display: console-kit's progress bar on a styled terminal, plain lines otherwise.
    func progress(_ title: String) -> Progress { Progress(ui: self, title: title) }

    final class Progress: Sendable {
        let ui: ConsoleUI
        let bar: ActivityIndicator<ProgressBar>?
        let lastPrinted = Mutex<Int>(-1)

        init(ui: ConsoleUI, title: String) {
            self.ui = ui
            if ui.styled {
                bar = ui.terminal.progressBar(title: title)
                bar?.start()
            } else {
                bar = nil
                ui.say(title)
            }
        }

        /// Moves the bar to `fraction` (0...1) and names what was done.
        func update(_ fraction: Double, _ detail: String) {
            if let bar {
                bar.activity.currentProgress = fraction
                bar.activity.title = detail
            } else {
                // Plain output: a line at each quarter, so logs and screen readers stay short.
                let quarter = Int(min(max(fraction, 0), 1) * 4)
                let print = lastPrinted.withLock { last in
                    guard quarter > last else { return false }
                    last = quarter
                    return true
                }
                if print { ui.say("  \(quarter * 25)% — \(detail)") }
            }
        }

        func finish(_ succeeded: Bool) {
            if let bar { succeeded ? bar.succeed() : bar.fail() }
        }
    }
}

/// Why an answer was not accepted; the prompt is asked again with this message.
struct InputProblem: Error, Sendable {
    let message: String
    init(_ message: String) { self.message = message }
}
