import BatonSQL
import Foundation
import GRDB

extension SQLValue {
    /// The value as GRDB binds it.
    public var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        case .integer(let number): number.databaseValue
        case .real(let number): number.databaseValue
        case .text(let text): text.databaseValue
        case .blob(let bytes): Data(bytes).databaseValue
        }
    }

    /// The SQL value GRDB read.
    public init(_ value: DatabaseValue) {
        switch value.storage {
        case .null: self = .null
        case .int64(let number): self = .integer(number)
        case .double(let number): self = .real(number)
        case .string(let text): self = .text(text)
        case .blob(let data): self = .blob(Array(data))
        }
    }
}

extension SQLQuery {
    /// The arguments as GRDB statement arguments.
    public var statementArguments: StatementArguments { StatementArguments(bridging: arguments) }
}

extension StatementArguments {
    /// GRDB statement arguments from SQL values, each read through a closure. GRDB's initializer from a sequence of
    /// concrete values maps them through a key path it builds at run time on every call: on a key read of one
    /// argument that was a twentieth of the request.
    public init(bridging values: [SQLValue]) {
        self.init(values.map { value -> (any DatabaseValueConvertible)? in value.databaseValue })
    }
}
