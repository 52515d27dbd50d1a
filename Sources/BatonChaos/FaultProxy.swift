import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What the network does to one HTTP request between a device and the server.
public enum NetworkFault: String, Sendable, Hashable, CaseIterable, Codable {
    /// Nothing: the request and its answer pass.
    case none
    /// The connection is reset once the request arrived, before the server sees it.
    case resetBeforeDelivery = "reset-before-delivery"
    /// The server gets the request and applies it; the connection is reset before its answer reaches the device.
    case resetAfterApplied = "reset-after-applied"
    /// The answer stops halfway: its head and half its body, then the connection closes.
    case truncatedAnswer = "truncated-answer"
    /// The answer is held past the device's timeout, then the connection closes.
    case stalledAnswer = "stalled-answer"
    /// The request reaches the server twice, at once; the device gets one of the answers.
    case duplicatedRequest = "duplicated-request"
    /// The request and its answer are each delayed, and the answer trickles at a limited bandwidth.
    case slowLink = "slow-link"
    /// The connection breaks halfway through the request's body: the server gets its head and half its body,
    /// then the end of the stream; the device sees a reset.
    case cutRequest = "cut-request"

    /// The faults that fail a request (every kind but `none` and `slowLink`).
    public static let failing: [NetworkFault] = [
        .resetBeforeDelivery, .resetAfterApplied, .truncatedAnswer, .stalledAnswer, .duplicatedRequest, .cutRequest,
    ]
}

/// A fault-injecting HTTP proxy on loopback (SwiftNIO): the device talks to it as to the server, and each request
/// takes the next fault of the plan (``inject(_:)``), or passes when the plan is empty. Every request goes to the
/// server on a connection of its own, so a fault never spills into another request. ``refuse`` stops accepting
/// connections (the device sees "connection refused") until ``accept()``.
public final class FaultProxy: Sendable {
    /// `http://127.0.0.1:PORT`.
    public let url: URL
    let channel: Mutex<(any Channel)?>
    let upstream: Mutex<Int?>
    let plan = Mutex<[NetworkFault]>([])
    let tally = Mutex<[NetworkFault: Int]>([:])
    let refused = Mutex(0)
    /// The devices' open connections: a refusal closes them too, so no pooled connection slips through.
    let children = Mutex<[ObjectIdentifier: any Channel]>([:])
    /// How long a stalled answer is held (past the device's timeout).
    public let stall: TimeAmount
    /// The delay of each direction, and the bandwidth of the answer, on a slow link.
    public let latency: TimeAmount
    public let bytesPerSecond: Int
    let port: Int

    /// Starts the proxy on a free port of 127.0.0.1, forwarding to `upstreamPort` (set it later with
    /// ``forward(to:)`` when the server starts after the proxy).
    public static func start(
        upstreamPort: Int? = nil, stall: TimeAmount = .seconds(3), latency: TimeAmount = .milliseconds(40),
        bytesPerSecond: Int = 256 * 1024
    ) async throws -> FaultProxy {
        let proxy = Box()
        let channel = try await bootstrap(proxy).bind(host: "127.0.0.1", port: 0).get()
        guard let port = channel.localAddress?.port, let url = URL(string: "http://127.0.0.1:\(port)") else {
            try? await channel.close()
            throw ChaosFailure("The fault proxy did not get a port.")
        }
        let owner = FaultProxy(
            url: url, port: port, channel: channel, upstream: upstreamPort, stall: stall, latency: latency,
            bytesPerSecond: bytesPerSecond)
        proxy.value = owner
        return owner
    }

    /// The listener: each accepted connection gets the HTTP server codec and a ``ProxyHandler`` of the proxy in
    /// `box` (set once the proxy exists).
    static func bootstrap(_ box: Box) -> ServerBootstrap {
        ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                guard let owner = box.value else { return channel.close() }
                owner.register(channel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: false)
                    try channel.pipeline.syncOperations.addHandler(ProxyHandler(proxy: owner))
                }
            }
    }

    init(
        url: URL, port: Int, channel: any Channel, upstream: Int?, stall: TimeAmount, latency: TimeAmount,
        bytesPerSecond: Int
    ) {
        self.url = url
        self.port = port
        self.channel = Mutex(channel)
        self.upstream = Mutex(upstream)
        self.stall = stall
        self.latency = latency
        self.bytesPerSecond = bytesPerSecond
    }

    /// Where requests go.
    public func forward(to port: Int) { upstream.withLock { $0 = port } }

    /// Adds faults for the next requests, in order.
    public func inject(_ faults: [NetworkFault]) { plan.withLock { $0 += faults } }

    /// Faults planned and not yet used.
    public var pending: Int { plan.withLock { $0.count } }

    /// Faults applied so far, by kind (refused connections under `refused`).
    public var applied: [String: Int] {
        var counts = Dictionary(uniqueKeysWithValues: tally.withLock { $0 }.map { ($0.key.rawValue, $0.value) })
        let refusals = refused.withLock { $0 }
        if refusals > 0 { counts["connection-refused"] = refusals }
        return counts
    }

    func nextFault() -> NetworkFault {
        let fault = plan.withLock { $0.isEmpty ? NetworkFault.none : $0.removeFirst() }
        tally.withLock { $0[fault, default: 0] += 1 }
        return fault
    }

    func register(_ child: any Channel) {
        let key = ObjectIdentifier(child)
        children.withLock { $0[key] = child }
        child.closeFuture.whenComplete { [weak self] _ in _ = self?.children.withLock { $0.removeValue(forKey: key) } }
    }

    /// Stops listening and closes the open connections: connections are refused until ``accept()``. Counts one
    /// refusal per call.
    public func refuse() async {
        let current = channel.withLock { value in
            defer { value = nil }
            return value
        }
        try? await current?.close()
        for child in children.withLock({ Array($0.values) }) { try? await child.close() }
        refused.withLock { $0 += 1 }
    }

    /// Listens again on the same port.
    public func accept() async throws {
        guard channel.withLock({ $0 }) == nil else { return }
        let proxy = Box()
        proxy.value = self
        let listening = try await Self.bootstrap(proxy).bind(host: "127.0.0.1", port: port).get()
        channel.withLock { $0 = listening }
    }

    /// Stops the proxy.
    public func stop() async {
        let current = channel.withLock { value in
            defer { value = nil }
            return value
        }
        try? await current?.close()
    }

    /// Sends one request to the server on a connection of its own and completes with its whole answer; when `cut`,
    /// sends its head and half its body, then closes the connection (the future fails).
    func send(
        _ head: HTTPRequestHead, body: ByteBuffer, cut: Bool = false, on eventLoop: any EventLoop
    ) -> EventLoopFuture<(HTTPResponseHead, ByteBuffer)> {
        guard let port = upstream.withLock({ $0 }) else {
            return eventLoop.makeFailedFuture(ChaosFailure("The fault proxy has no server to forward to."))
        }
        let promise = eventLoop.makePromise(of: (HTTPResponseHead, ByteBuffer).self)
        var head = head
        head.headers.replaceOrAdd(name: "connection", value: "close")
        head.headers.replaceOrAdd(name: "content-length", value: "\(body.readableBytes)")
        head.headers.remove(name: "transfer-encoding")
        let request = head
        ClientBootstrap(group: eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(AnswerCollector(promise: promise))
                }
            }
            .connect(host: "127.0.0.1", port: port)
            .whenComplete { result in
                switch result {
                case .failure(let error): promise.fail(error)
                case .success(let channel):
                    channel.write(HTTPClientRequestPart.head(request), promise: nil)
                    if cut {
                        let half = body.getSlice(at: body.readerIndex, length: body.readableBytes / 2) ?? ByteBuffer()
                        channel.writeAndFlush(HTTPClientRequestPart.body(.byteBuffer(half))).whenComplete { _ in
                            channel.close(promise: nil)
                        }
                        return
                    }
                    channel.write(HTTPClientRequestPart.body(.byteBuffer(body)), promise: nil)
                    channel.writeAndFlush(HTTPClientRequestPart.end(nil), promise: nil)
                }
            }
        return promise.futureResult
    }

    /// Lets the child-channel initializer reach the proxy made after the bootstrap.
    final class Box: @unchecked Sendable {
        // Set once before the first connection is accepted; read on event loops after that.
        var value: FaultProxy?
    }
}

/// One client connection of the proxy: collects a request, applies its fault, answers (or not).
final class ProxyHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let proxy: FaultProxy
    var head: HTTPRequestHead?
    var body = ByteBuffer()

    init(proxy: FaultProxy) { self.proxy = proxy }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.clear()
        case .body(var chunk):
            body.writeBuffer(&chunk)
        case .end:
            guard let head else { return }
            self.head = nil
            handle(head, body: body, context: context)
        }
    }

    func handle(_ head: HTTPRequestHead, body: ByteBuffer, context: ChannelHandlerContext) {
        let fault = proxy.nextFault()
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        switch fault {
        case .resetBeforeDelivery:
            reset(context)
            return
        case .slowLink:
            loop.assumeIsolated().scheduleTask(in: proxy.latency) {
                let (handler, context) = bound.value
                handler.forward(head, body: body, fault: fault, context: context)
            }
            return
        default:
            forward(head, body: body, fault: fault, context: context)
        }
    }

    func forward(_ head: HTTPRequestHead, body: ByteBuffer, fault: NetworkFault, context: ChannelHandlerContext) {
        let loop = context.eventLoop
        let answer = proxy.send(head, body: body, cut: fault == .cutRequest, on: loop)
        if fault == .duplicatedRequest {
            // Both copies go to the server at once; the device gets the first copy's answer.
            _ = proxy.send(head, body: body, on: loop)
        }
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        answer.hop(to: loop).assumeIsolated().whenComplete { result in
            let (handler, context) = bound.value
            switch result {
            case .failure:
                handler.reset(context)
            case .success(let (responseHead, responseBody)):
                handler.answer(
                    responseHead, body: responseBody, keepAlive: head.isKeepAlive, fault: fault, context: context)
            }
        }
    }

    func answer(
        _ head: HTTPResponseHead, body: ByteBuffer, keepAlive: Bool, fault: NetworkFault, context: ChannelHandlerContext
    ) {
        var head = head
        head.headers.remove(name: "transfer-encoding")
        head.headers.replaceOrAdd(name: "content-length", value: "\(body.readableBytes)")
        head.headers.replaceOrAdd(name: "connection", value: keepAlive ? "keep-alive" : "close")
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        switch fault {
        case .resetAfterApplied:
            reset(context)
        case .truncatedAnswer:
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.writeAndFlush(
                wrapOutboundOut(
                    .body(
                        .byteBuffer(body.getSlice(at: body.readerIndex, length: body.readableBytes / 2) ?? ByteBuffer())
                    )), promise: nil)
            context.close(promise: nil)
        case .stalledAnswer:
            loop.assumeIsolated().scheduleTask(in: proxy.stall) {
                let (_, context) = bound.value
                context.close(promise: nil)
            }
        case .slowLink:
            // Delayed again, then sent in pieces at the link's bandwidth.
            let pieces = max(1, body.readableBytes / max(1, proxy.bytesPerSecond / 10))
            loop.assumeIsolated().scheduleTask(in: proxy.latency + .milliseconds(Int64(100 * (pieces - 1)))) {
                let (handler, context) = bound.value
                handler.write(head, body: body, keepAlive: keepAlive, context: context)
            }
        default:
            write(head, body: body, keepAlive: keepAlive, context: context)
        }
    }

    func write(_ head: HTTPResponseHead, body: ByteBuffer, keepAlive: Bool, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).assumeIsolated().whenComplete { _ in
            if !keepAlive { bound.value.close(promise: nil) }
        }
    }

    /// Closes the connection with a reset (SO_LINGER 0), as a failing network would.
    func reset(_ context: ChannelHandlerContext) {
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        guard let socket = context.channel as? any SocketOptionProvider else {
            context.close(promise: nil)
            return
        }
        socket.setSoLinger(linger(l_onoff: 1, l_linger: 0))
            .assumeIsolated().whenComplete { _ in bound.value.close(promise: nil) }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// Collects the server's answer to one forwarded request.
final class AnswerCollector: ChannelInboundHandler {
    typealias InboundIn = HTTPClientResponsePart

    let promise: EventLoopPromise<(HTTPResponseHead, ByteBuffer)>
    var head: HTTPResponseHead?
    var body = ByteBuffer()
    var done = false

    init(promise: EventLoopPromise<(HTTPResponseHead, ByteBuffer)>) { self.promise = promise }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): self.head = head
        case .body(var chunk): body.writeBuffer(&chunk)
        case .end:
            guard let head, !done else { return }
            done = true
            promise.succeed((head, body))
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done {
            done = true
            promise.fail(ChaosFailure("The server closed the connection before answering."))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !done {
            done = true
            promise.fail(error)
        }
        context.close(promise: nil)
    }
}

/// A failure of the harness itself (not of what it tests).
public struct ChaosFailure: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}
