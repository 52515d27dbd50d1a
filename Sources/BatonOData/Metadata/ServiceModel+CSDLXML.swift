extension ServiceModel {
    /// The model as a CSDL XML `$metadata` document (OData CSDL XML 4.01).
    public var csdlXML: String {
        var xml = #"<?xml version="1.0" encoding="utf-8"?>"# + "\n"
        xml += #"<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.01">"# + "\n"
        xml +=
            #"  <edmx:Reference Uri="https://oasis-tcs.github.io/odata-vocabularies/vocabularies/Org.OData.Core.V1.xml">"#
        xml += "\n" + #"    <edmx:Include Namespace="Org.OData.Core.V1" Alias="Core"/>"# + "\n  </edmx:Reference>\n"
        xml += "  <edmx:DataServices>\n"
        xml += "    <Schema xmlns=\"http://docs.oasis-open.org/odata/ns/edm\" Namespace=\"\(Markup.xml(namespace))\""
        if let alias { xml += " Alias=\"\(Markup.xml(alias))\"" }
        xml += ">\n"
        for enumType in enumTypes {
            xml +=
                "      <EnumType Name=\"\(Markup.xml(enumType.name))\" UnderlyingType=\"\(enumType.underlyingType.rawValue)\">\n"
            for member in enumType.members {
                xml += "        <Member Name=\"\(Markup.xml(member.name))\" Value=\"\(member.value)\"/>\n"
            }
            xml += "      </EnumType>\n"
        }
        for type in entityTypes {
            xml +=
                "      <EntityType Name=\"\(Markup.xml(type.name))\"\(type.hasStream ? " HasStream=\"true\"" : "")>\n"
                + "        <Key>\n"
            for key in type.key { xml += "          <PropertyRef Name=\"\(Markup.xml(key))\"/>\n" }
            xml += "        </Key>\n"
            for property in type.properties {
                let typeName = property.enumType?.qualifiedName ?? property.type.rawValue
                xml += "        <Property Name=\"\(Markup.xml(property.name))\" Type=\"\(Markup.xml(typeName))\""
                xml += " Nullable=\"\(property.isNullable)\""
                if let maxLength = property.maxLength { xml += " MaxLength=\"\(maxLength)\"" }
                if let precision = property.precision { xml += " Precision=\"\(precision)\"" }
                if let scale = property.scale { xml += " Scale=\"\(scale)\"" }
                if let defaultValue = property.defaultValue {
                    // CSDL XML writes a default as its JSON payload form, unquoted: `P1D`, not `duration'P1D'`.
                    let json = defaultValue.json(as: property.type)
                    let text = if case .string(let string) = json { string } else { json.serialized }
                    xml += " DefaultValue=\"\(Markup.xml(text))\""
                }
                if property.isComputed {
                    xml += ">\n          <Annotation Term=\"Org.OData.Core.V1.Computed\" Bool=\"true\"/>\n"
                    xml += "        </Property>\n"
                } else {
                    xml += "/>\n"
                }
            }
            for stream in type.streamProperties {
                xml += "        <Property Name=\"\(Markup.xml(stream))\" Type=\"Edm.Stream\" Nullable=\"true\"/>\n"
            }
            for navigation in type.navigationProperties {
                let typeName = navigation.isCollection ? "Collection(\(navigation.targetType))" : navigation.targetType
                xml +=
                    "        <NavigationProperty Name=\"\(Markup.xml(navigation.name))\" Type=\"\(Markup.xml(typeName))\""
                if !navigation.isCollection { xml += " Nullable=\"\(navigation.isNullable)\"" }
                if let partner = navigation.partner { xml += " Partner=\"\(Markup.xml(partner))\"" }
                if navigation.referentialConstraints.isEmpty {
                    xml += "/>\n"
                } else {
                    xml += ">\n"
                    for constraint in navigation.referentialConstraints {
                        xml += "          <ReferentialConstraint Property=\"\(Markup.xml(constraint.property))\""
                        xml += " ReferencedProperty=\"\(Markup.xml(constraint.referencedProperty))\"/>\n"
                    }
                    xml += "        </NavigationProperty>\n"
                }
            }
            xml += "      </EntityType>\n"
        }
        xml += "      <EntityContainer Name=\"\(Markup.xml(containerName))\">\n"
        for set in entitySets {
            xml += "        <EntitySet Name=\"\(Markup.xml(set.name))\" EntityType=\"\(Markup.xml(set.entityType))\">\n"
            for (path, target) in set.navigationBindings.sorted(by: { $0.key < $1.key }) {
                xml +=
                    "          <NavigationPropertyBinding Path=\"\(Markup.xml(path))\" Target=\"\(Markup.xml(target))\"/>\n"
            }
            if !set.optimisticConcurrency.isEmpty {
                xml +=
                    "          <Annotation Term=\"Org.OData.Core.V1.OptimisticConcurrency\">\n            <Collection>\n"
                for path in set.optimisticConcurrency {
                    xml += "              <PropertyPath>\(Markup.xml(path))</PropertyPath>\n"
                }
                xml += "            </Collection>\n          </Annotation>\n"
            }
            xml += "        </EntitySet>\n"
        }
        if supportsRepeatableRequests {
            xml += "        <Annotation Term=\"Org.OData.Repeatability.V1.Supported\" Bool=\"true\"/>\n"
        }
        xml += "      </EntityContainer>\n    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n"
        return xml
    }
}
