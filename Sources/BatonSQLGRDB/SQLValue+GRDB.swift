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
    /// GRDB statement arguments from SQL values, each read through a closure (GRDB's initializer from a sequence of
    /// concrete values maps them through a key path it builds at run time on every call). For the device's store and
    /// the demo; the server binds straight through SQLite's C interface (`Statement.bind` in BatonServer), where
    /// text keeps a NUL that GRDB's C-string binding would cut.
    public init(bridging values: [SQLValue]) {
        self.init(values.map { value -> (any DatabaseValueConvertible)? in value.databaseValue })
    }
}
