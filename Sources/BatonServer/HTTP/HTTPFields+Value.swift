import HTTPTypes

extension HTTPFields {
    /// The value of the field named `name` as `subscript(_:)` reads it — several fields of that name joined with
    /// `, ` (cookies with `; `) — but one field's value as it is: the subscript joins even one value into a new
    /// string, a copy of the bearer token on every request.
    func value(_ name: HTTPField.Name) -> String? {
        var found: HTTPField?
        for field in self where field.name == name {
            guard found == nil else { return self[name] }
            found = field
        }
        return found?.value
    }
}
