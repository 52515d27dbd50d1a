import NIOCore
import NIOHTTPTypes
import Synchronization

/// How long a connection may keep the server waiting, and how many connections it holds, with every default
/// stated. Silent or slow connections are closed, so a few hundred of them cannot stop the server answering.
public struct ConnectionLimits: Sendable {
    /// From a connection's opening, or the end of its previous answer, until the next request's head has fully
    /// arrived — the idle time of a kept-alive connection and the time to send headers. Default: 30 seconds.
    public var headTimeout: TimeAmount = .seconds(30)
    /// From a request's head until the end of its body. Default: 30 seconds.
    public var bodyTimeout: TimeAmount = .seconds(30)
    /// The most open connections. Default: 4,096.
    public var maximumConnections = 4_096
    /// The most open connections from one address (a load balancer is one address: raise it there).
    /// Default: 256.
    public var maximumConnectionsPerAddress = 256

    /// The defaults.
    public init() {}
}

/// Counts the open connections, in all and per address, across every event loop.
final class ConnectionCounter: Sendable {
    let limits: ConnectionLimits
    let state = Mutex<(total: Int, perAddress: [String: Int])>((0, [:]))

    init(limits: ConnectionLimits) { self.limits = limits }

    /// Takes a place for a connection from `address`; `false` when the limits are reached.
    func open(_ address: String) -> Bool {
        state.withLock { state in
            guard state.total < limits.maximumConnections,
                state.perAddress[address, default: 0] < limits.maximumConnectionsPerAddress
            else { return false }
            state.total += 1
            state.perAddress[address, default: 0] += 1
            return true
        }
    }

    func close(_ address: String) {
        state.withLock { state in
            state.total -= 1
            let left = state.perAddress[address, default: 1] - 1
            state.perAddress[address] = left > 0 ? left : nil
        }
    }

    var openConnections: Int { state.withLock { $0.total } }
}

/// Enforces ``ConnectionLimits`` on one HTTP/1 connection: refuses it over the connection limits, and closes it
/// when a request's head or body does not arrive in time. While a request is being answered no deadline runs.
///
/// A request moves the connection's deadline, not a timer: one timer per connection fires at most once per timeout
/// and, finding the deadline moved on (or no deadline while a request is answered), sets itself for the new one.
/// Scheduling and cancelling a timer for every request cost a keep-alive connection's key read about 8 µs.
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    let counter: ConnectionCounter
    var address: String?
    /// When the connection is closed unless what it waits for arrives; `nil` while a request is being answered.
    var deadline: NIODeadline?
    /// The one timer and when it fires (never after ``deadline``).
    var timer: Scheduled<Void>?
    var timerFiresAt: NIODeadline?
    /// Requests begun (their head read) and not yet answered.
    var unanswered = 0
    var readingBody = false

    init(counter: ConnectionCounter) { self.counter = counter }

    func handlerAdded(context: ChannelHandlerContext) {
        let address = context.channel.remoteAddress?.ipAddress ?? "local"
        guard counter.open(address) else {
            // Closed once set-up has finished, so the server's connection handling sees an ordinary close.
            let channel = context.channel
            context.eventLoop.execute { channel.close(promise: nil) }
            return
        }
        self.address = address
        arm(context, counter.limits.headTimeout)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        timerFiresAt = nil
        deadline = nil
        if let address {
            counter.close(address)
            self.address = nil
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            // Counted from its head: a request answered before its body ended (a 401, a 413) is not counted again
            // at its end, where it would wait for an answer that never comes, with no deadline, for good.
            readingBody = true
            unanswered += 1
            arm(context, counter.limits.bodyTimeout)
        case .body: break
        case .end:
            readingBody = false
            if unanswered > 0 { deadline = nil } else { arm(context, counter.limits.headTimeout) }
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) {
            unanswered = max(0, unanswered - 1)
            if unanswered == 0 && !readingBody { arm(context, counter.limits.headTimeout) }
        }
        context.write(data, promise: promise)
    }

    /// Sets the deadline `timeout` from now; the timer is moved only when it would fire too late.
    func arm(_ context: ChannelHandlerContext, _ timeout: TimeAmount) {
        let deadline = NIODeadline.now() + timeout
        self.deadline = deadline
        if let timerFiresAt, timerFiresAt <= deadline { return }
        schedule(context, at: deadline)
    }

    func schedule(_ context: ChannelHandlerContext, at when: NIODeadline) {
        timer?.cancel()
        timerFiresAt = when
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(deadline: when) { handler.value.fire(bound.value) }
    }

    /// The timer fired: closes the connection if its deadline passed, or sets the timer for the deadline it has now.
    func fire(_ context: ChannelHandlerContext) {
        timer = nil
        timerFiresAt = nil
        guard address != nil, let deadline else { return }
        if deadline <= .now() {
            context.channel.close(promise: nil)
        } else {
            schedule(context, at: deadline)
        }
    }
}
