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
    public var statementArguments: StatementArguments {
        StatementArguments(arguments.map { $0.databaseValue })
    }
}
