import BatonOData
import Foundation
import MultipartKit
import NIOCore
import NIOHTTP1

/// `baton-bench --multipart`: the `$batch` multipart layer (`MultipartBatch`) against vapor/multipart-kit on the
/// same batch, in alternating rounds: reading a 100-request batch (a changeset of 50 PATCHes, then 50 GETs) into
/// its `application/http` parts, changesets opened, and writing those parts back. Both sides first have to agree
/// on the parts, and each reads what the other writes.
struct MultipartBenchmark {
    /// Batches per round; rounds alternate which side goes first.
    var batches = 500
    var rounds = 20

    /// One part of a batch as both sides see it: its changeset, its `Content-ID` and its `application/http` message.
    struct Item: Equatable {
        var group: String?
        var id: String
        var message: [UInt8]
    }

    static let boundary = "batch_36522ad7-fc75-4b56-8c71-56071383e77b"

    /// The batch: 50 PATCHes with `If-Match` and a JSON body in one changeset, then 50 filtered GETs.
    static func body() -> [UInt8] {
        var requests: [BatchRequest] = []
        for index in 0..<50 {
            let id = UUID().uuidString.lowercased()
            requests.append(
                BatchRequest(
                    id: "c\(index)", atomicityGroup: "g1", method: "PATCH", url: "PreflightChecks(\(id))",
                    headers: [("Content-Type", "application/json"), ("If-Match", "W/\"\(index + 1_000)\"")],
                    body: .object([
                        ("FuelKg", .number("\(5_000 + index)")), ("TyrePressureMainPsi", .number("200.5")),
                        ("Remarks", .string("Fuel sample clear, tyre \(index) checked by the morning shift")),
                    ])))
        }
        for index in 0..<50 {
            requests.append(
                BatchRequest(
                    id: "r\(index)", method: "GET",
                    url: "PreflightChecks?$filter=TailNumber%20eq%20'D-AI\(index)'&$top=5&$select=ID,FuelKg",
                    headers: [("Accept", "application/json")]))
        }
        return MultipartBatch.encodeRequests(requests, boundary: boundary)
    }

    // MARK: Baton's reader and writer

    static func readOurs(_ body: [UInt8]) throws -> [Item] {
        var items: [Item] = []
        for part in try MultipartBatch.splitParts(body, boundary: boundary) {
            if MultipartBatch.isMultipartMixed(part.contentType), let type = part.contentType {
                let changeset = try MultipartBatch.boundary(fromContentType: type)
                for inner in try MultipartBatch.splitParts(part.body, boundary: changeset) {
                    items.append(Item(group: changeset, id: inner.header("Content-ID") ?? "", message: inner.body))
                }
            } else {
                items.append(Item(group: nil, id: part.header("Content-ID") ?? "", message: part.body))
            }
        }
        return items
    }

    static func writeOurs(_ items: [Item]) -> [UInt8] {
        MultipartBatch.encode(items, boundary: boundary, group: \.group) { ($0.id, trimmed($0.message)) }
    }

    /// A part's message without the CRLF the writer adds before the next delimiter (as multipart-kit's parts are).
    static func trimmed(_ message: [UInt8]) -> [UInt8] {
        message.last == 10 ? Array(message.dropLast(message.dropLast().last == 13 ? 2 : 1)) : message
    }

    // MARK: multipart-kit's

    struct Malformed: Error {}

    static func kitParts(_ body: ByteBuffer, boundary: String) throws -> [MultipartPart] {
        let parser = MultipartParser(boundary: boundary)
        var parts: [MultipartPart] = []
        var headers = HTTPHeaders()
        var current = ByteBuffer()
        parser.onHeader = { name, value in headers.add(name: name, value: value) }
        parser.onBody = { chunk in current.writeBuffer(&chunk) }
        parser.onPartComplete = {
            parts.append(MultipartPart(headers: headers, body: current))
            headers = [:]
            current = ByteBuffer()
        }
        try parser.execute(body)
        // multipart-kit 4.7.1 takes a body without its closing delimiter; Baton refuses one, so this side checks.
        guard body.readableBytesView.firstRange(of: Array("--\(boundary)--".utf8)) != nil else { throw Malformed() }
        return parts
    }

    static func readKit(_ body: ByteBuffer) throws -> [Item] {
        var items: [Item] = []
        for part in try kitParts(body, boundary: boundary) {
            if let type = part.headers.first(name: "Content-Type"), MultipartBatch.isMultipartMixed(type) {
                let changeset = try MultipartBatch.boundary(fromContentType: type)
                for inner in try kitParts(part.body, boundary: changeset) {
                    items.append(
                        Item(
                            group: changeset, id: inner.headers.first(name: "Content-ID") ?? "",
                            message: Array(inner.body.readableBytesView)))
                }
            } else {
                items.append(
                    Item(
                        group: nil, id: part.headers.first(name: "Content-ID") ?? "",
                        message: Array(part.body.readableBytesView)))
            }
        }
        return items
    }

    static func writeKit(_ items: [Item]) throws -> ByteBuffer {
        let serializer = MultipartSerializer()
        func http(_ item: Item) -> MultipartPart {
            MultipartPart(
                headers: [
                    "Content-Type": "application/http", "Content-Transfer-Encoding": "binary", "Content-ID": item.id,
                ],
                body: ByteBuffer(bytes: trimmed(item.message)))
        }
        var parts: [MultipartPart] = []
        var index = 0
        while index < items.count {
            guard let group = items[index].group else {
                parts.append(http(items[index]))
                index += 1
                continue
            }
            var inner: [MultipartPart] = []
            while index < items.count, items[index].group == group {
                inner.append(http(items[index]))
                index += 1
            }
            var nested = ByteBuffer()
            try serializer.serialize(parts: inner, boundary: group, into: &nested)
            parts.append(
                MultipartPart(headers: ["Content-Type": "multipart/mixed; boundary=\(group)"], body: nested))
        }
        var out = ByteBuffer()
        try serializer.serialize(parts: parts, boundary: boundary, into: &out)
        return out
    }

    // MARK: The run

    func run() throws {
        let body = Self.body()
        let buffer = ByteBuffer(bytes: body)
        let ours = try Self.readOurs(body)
        let kit = try Self.readKit(buffer)
        guard ours.count == 100, ours.map(\.id) == kit.map(\.id), ours.map(\.group) == kit.map(\.group),
            ours.map({ Self.trimmed($0.message) }) == kit.map({ Self.trimmed($0.message) })
        else { throw BenchmarkFailure("The two readers disagree on the batch's parts.") }
        // Each reads what the other writes.
        let crossOurs = try Self.readOurs(Array(try Self.writeKit(ours).readableBytesView)).map(\.id)
        let crossKit = try Self.readKit(ByteBuffer(bytes: Self.writeOurs(kit))).map(\.id)
        guard crossOurs == ours.map(\.id), crossKit == ours.map(\.id) else {
            throw BenchmarkFailure("A reader does not read what the other side wrote.")
        }
        print("A batch of \(body.count) bytes: \(ours.count) requests, 50 of them in one changeset.")
        print("Read: to application/http parts, changesets opened; write: those parts to a batch body.")
        var times: [String: [Double]] = [:]
        func time(_ name: String, _ body: () throws -> Void) rethrows {
            let clock = ContinuousClock()
            let start = clock.now
            for _ in 0..<batches { try body() }
            let elapsed = start.duration(to: clock.now)
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) * 1e-18
            times[name, default: []].append(seconds / Double(batches) * 1e6)
        }
        var sink = 0
        let sides: [(String, () throws -> Void)] = [
            ("Baton read", { sink &+= try Self.readOurs(body).count }),
            ("multipart-kit read", { sink &+= try Self.readKit(buffer).count }),
            ("Baton write", { sink &+= Self.writeOurs(ours).count }),
            ("multipart-kit write", { sink &+= try Self.writeKit(ours).readableBytes }),
            (
                "Baton decodeRequests (whole)",
                { sink &+= try MultipartBatch.decodeRequests(body, boundary: Self.boundary).count }
            ),
        ]
        for (name, body) in sides { try time(name, body) }  // warm-up
        times = [:]
        for round in 0..<rounds {
            for (name, body) in round % 2 == 0 ? sides : sides.reversed() { try time(name, body) }
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        print("\nµs per batch, median (p90) of \(rounds) alternating rounds of \(batches) batches:")
        for (name, _) in sides {
            let values = times[name] ?? [0]
            let p90 = values.sorted()[min(values.count - 1, values.count * 9 / 10)]
            print(
                "  \(name.padding(toLength: 30, withPad: " ", startingAt: 0)) \(String(format: "%8.1f", median(values))) (\(String(format: "%.1f", p90)))"
            )
        }
        let readRatio = median(times["multipart-kit read"] ?? [0]) / median(times["Baton read"] ?? [1])
        let writeRatio = median(times["multipart-kit write"] ?? [0]) / median(times["Baton write"] ?? [1])
        print(
            "multipart-kit / Baton: read \(String(format: "%.2f", readRatio))×, write \(String(format: "%.2f", writeRatio))×"
        )
        if sink == 42 { print("") }
    }
}
