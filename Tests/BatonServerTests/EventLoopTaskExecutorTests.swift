import Dispatch
import HTTPTypes
import HummingbirdTesting
import NIOCore
import NIOPosix
import Testing

@testable import BatonServer

/// A request that prefers its event loop's ``EventLoopTaskExecutor`` runs on that loop through every kind of
/// `await` the server does, and comes back to it when work elsewhere resumes it.
@Suite(.serverSlot, .timeLimit(.minutes(10))) struct EventLoopTaskExecutorTests {
    /// A nonisolated function that runs on the generic executor (as every middleware's `handle` does).
    @concurrent static func onTheGenericExecutor(_ loop: any EventLoop) async -> Bool { loop.inEventLoop }

    @Test func aPreferringTaskStaysOnItsLoopAndComesBackToIt() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        for loop in group.makeIterator() {
            let executor = EventLoopTaskExecutor.executor(for: loop)
            #expect(EventLoopTaskExecutor.executor(for: loop) === executor, "one executor per loop")
            let steps = await withTaskExecutorPreference(executor) { () async -> [Bool] in
                var steps = [loop.inEventLoop]
                steps.append(await Self.onTheGenericExecutor(loop))
                steps.append(loop.inEventLoop)
                // Work on another thread resumes the task: it comes back to this loop, not to any.
                await withCheckedContinuation { continuation in
                    DispatchQueue.global().async { continuation.resume() }
                }
                steps.append(loop.inEventLoop)
                steps.append(EventLoopTaskExecutor.current === executor)
                return steps
            }
            #expect(steps == [true, true, true, true, true])
        }
        try await group.shutdownGracefully()
    }

    @Test func offTheLoopsARequestIsNotMoved() async throws {
        #expect(MultiThreadedEventLoopGroup.currentEventLoop == nil)
        #expect(EventLoopTaskExecutor.current == nil)
        let onALoop = await EventLoopTaskExecutor.onCurrentLoop { MultiThreadedEventLoopGroup.currentEventLoop != nil }
        #expect(!onALoop)
    }

    @Test func onALoopTheBodyRunsThereAndItsErrorsComeThrough() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let outcome = try await withTaskExecutorPreference(EventLoopTaskExecutor.executor(for: loop)) {
            try await EventLoopTaskExecutor.onCurrentLoop { () async throws -> Bool in
                #expect(EventLoopTaskExecutor.current?.loop === loop)
                return loop.inEventLoop
            }
        }
        #expect(outcome)
        struct Refused: Error {}
        await #expect(throws: Refused.self) {
            try await withTaskExecutorPreference(EventLoopTaskExecutor.executor(for: loop)) {
                try await EventLoopTaskExecutor.onCurrentLoop { () async throws -> Bool in throw Refused() }
            }
        }
        try await group.shutdownGracefully()
    }

    /// As `baton-server serve` runs a request (on an event loop, preferring it): a sign-in (bcrypt on NIO's thread
    /// pool), a key read (in place on SQLite, inside `synchronously`), a change (GRDB's writer queue) and a read of
    /// it all answer, and the request ends on the loop it started on.
    @Test func aRequestServedOnItsLoopSignsInReadsAndChanges() async throws {
        let server = try await TestServer()
        defer { server.remove() }
        try await server.server.users.add(
            name: "alice", displayName: nil, role: .supervisor, password: "correct-horse-battery")
        _ = try await server.server.seed(aircraft: 1, checks: 3)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let outcome = try await withTaskExecutorPreference(EventLoopTaskExecutor.executor(for: loop)) {
            try await server.test { client -> [String] in
                var seen: [String] = []
                let (access, _) = try await client.signIn("alice")
                seen.append("signed in on the loop: \(loop.inEventLoop)")
                let (_, page, _) = try await client.get("/odata/PreflightChecks?$top=1", token: access)
                let id = try #require(((page["value"] as? [[String: Any]])?.first?["ID"]) as? String)
                let (status, body, headers) = try await client.get("/odata/PreflightChecks(\(id))", token: access)
                seen.append("read \(status.code) \(body["ID"] as? String == id)")
                let etag = try #require(headers[.eTag])
                let change = try await client.execute(
                    uri: "/odata/PreflightChecks(\(id))", method: .patch,
                    headers: [
                        .authorization: "Bearer \(access)", .contentType: "application/json", .ifMatch: etag,
                    ],
                    body: ByteBuffer(string: #"{"Remarks":"checked on the loop"}"#))
                seen.append("changed \(change.status.code)")
                let (again, changed, _) = try await client.get("/odata/PreflightChecks(\(id))", token: access)
                seen.append("read \(again.code) \(changed["Remarks"] as? String ?? "-")")
                seen.append("ended on the loop: \(loop.inEventLoop)")
                return seen
            }
        }
        #expect(
            outcome == [
                "signed in on the loop: true", "read 200 true", "changed 204", "read 200 checked on the loop",
                "ended on the loop: true",
            ])
        try await group.shutdownGracefully()
    }
}
