import BatonOData
import BatonSQL
import Crypto
import Foundation
import HTTPTypes
import Hummingbird

extension SCIMRoutes {
    // MARK: Documents

    var base: String { issuer.value + "/scim/v2" }

    func meta(_ type: String, _ location: String) -> JSONValue {
        .object([("resourceType", .string(type)), ("location", .string(base + location))])
    }

    func list(_ resources: [JSONValue], total: Int, start: Int) -> JSONValue {
        .object([
            ("schemas", .array([.string(Self.listSchema)])), ("totalResults", .number(String(total))),
            ("startIndex", .number(String(start))), ("itemsPerPage", .number(String(resources.count))),
            ("Resources", .array(resources)),
        ])
    }

    var serviceProviderConfig: JSONValue {
        func supported(_ flag: Bool) -> JSONValue { .object([("supported", .bool(flag))]) }
        return .object([
            ("schemas", .array([.string("urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig")])),
            ("documentationUri", .string("https://github.com/baton/baton/blob/main/docs/SECURITY.md")),
            ("patch", supported(true)),
            (
                "bulk",
                .object([
                    ("supported", .bool(false)), ("maxOperations", .number("0")), ("maxPayloadSize", .number("0")),
                ])
            ),
            ("filter", .object([("supported", .bool(true)), ("maxResults", .number(String(Self.maxCount)))])),
            ("changePassword", supported(false)), ("sort", supported(false)), ("etag", supported(true)),
            (
                "authenticationSchemes",
                .array([
                    .object([
                        ("type", .string("oauthbearertoken")), ("name", .string("SCIM token")),
                        ("description", .string("A provider's token from baton-server idp scim-token NAME.")),
                        ("primary", .bool(true)),
                    ])
                ])
            ),
            ("meta", meta("ServiceProviderConfig", "/ServiceProviderConfig")),
        ])
    }

    var resourceType: JSONValue {
        .object([
            ("schemas", .array([.string("urn:ietf:params:scim:schemas:core:2.0:ResourceType")])),
            ("id", .string("User")), ("name", .string("User")), ("endpoint", .string("/Users")),
            ("description", .string("A person who signs in to Baton")), ("schema", .string(Self.userSchema)),
            ("schemaExtensions", .array([])),
            ("meta", meta("ResourceType", "/ResourceTypes/User")),
        ])
    }

    /// The core User schema as far as Baton keeps it (RFC 7643 §7).
    static func userSchemaDocument(meta: (String, String) -> JSONValue) -> JSONValue {
        func attribute(
            _ name: String, _ type: String = "string", mutability: String = "readWrite", required: Bool = false,
            uniqueness: String = "none", multi: Bool = false, sub: [JSONValue]? = nil, description: String
        ) -> JSONValue {
            var fields: [(String, JSONValue)] = [
                ("name", .string(name)), ("type", .string(type)), ("multiValued", .bool(multi)),
                ("description", .string(description)), ("required", .bool(required)),
                ("mutability", .string(mutability)), ("returned", .string("default")),
                ("uniqueness", .string(uniqueness)),
            ]
            if type == "string" { fields.append(("caseExact", .bool(false))) }
            if let sub { fields.append(("subAttributes", .array(sub))) }
            return .object(fields)
        }
        return .object([
            ("schemas", .array([.string("urn:ietf:params:scim:schemas:core:2.0:Schema")])),
            ("id", .string(userSchema)), ("name", .string("User")), ("description", .string("User Account")),
            (
                "attributes",
                .array([
                    attribute(
                        "userName", mutability: "immutable", required: true, uniqueness: "server",
                        description: "The Baton user name."),
                    attribute("displayName", description: "The name apps show."),
                    // Baton always knows whether a person is active: it can be set, not removed.
                    attribute("active", "boolean", required: true, description: "false withdraws the person."),
                    attribute(
                        "roles", "complex", mutability: "readOnly", multi: true,
                        sub: [attribute("value", mutability: "readOnly", description: "The Baton role.")],
                        description: "The Baton role, from the provider's groups at sign-in."),
                ])
            ),
            ("meta", meta("Schema", "/Schemas/\(userSchema)")),
        ])
    }

    static func scim(_ value: JSONValue, status: HTTPResponse.Status = .ok) -> Response {
        Response(
            status: status, headers: [.contentType: "application/scim+json", .cacheControl: "no-store"],
            body: .init(byteBuffer: ByteBuffer(bytes: value.serializedBytes)))
    }
}
