import BatonOData
import Foundation
import Testing

@testable import BatonServer

/// Which requests are taken as media requests, and that the byte pre-check (`mayNameMedia`) which spares every
/// other request a second parse of its URL never turns a media request away.
@Suite struct MediaRequestTests {
    let checks = try? ServiceModel.aircraftChecks
    let hangar = try? ServiceModel(csdlJSON: StreamPropertyTests.model)

    @Test func mediaRequestsAreFoundWhateverTheirSpelling() throws {
        let checks = try #require(checks)
        let hangar = try #require(hangar)
        let id = "6f1c9a8e-4c57-4a8f-9a51-0d5e2f7b3c11"
        let cases: [(String, String, String?, ServiceModel, ODataRoutes.MediaRequest?)] = [
            ("GET", "CheckPhotos(\(id))/$value", nil, checks, .read),
            ("GET", "CheckPhotos(\(id))/%24value", nil, checks, .read),
            ("GET", "CheckPhotos/\(id)/$value?$format=json", nil, checks, .read),
            // The parser drops a fragment and one trailing '/': so does the pre-check.
            ("GET", "CheckPhotos(\(id))/$value/", nil, checks, .read),
            ("GET", "CheckPhotos(\(id))/$value#x", nil, checks, .read),
            ("GET", "Inspections(\(id))/Photo/#top", nil, hangar, .readStream("Photo")),
            ("PUT", "CheckPhotos(\(id))/$value", "image/jpeg", checks, .replace),
            ("POST", "CheckPhotos", "image/jpeg", checks, .create),
            ("POST", "CheckPhotos", "Application/JSON", checks, nil),
            ("GET", "Inspections(\(id))/Photo", nil, hangar, .readStream("Photo")),
            ("GET", "Inspections(\(id))/%53ketch", nil, hangar, .readStream("Sketch")),
            ("PUT", "Inspections(\(id))/Sketch", "image/png", hangar, .replaceStream("Sketch")),
            // Not media: a key read, a filtered page, a property, a key holding '/$value', a DELETE.
            ("GET", "CheckPhotos(\(id))", nil, checks, nil),
            ("GET", "PreflightChecks?$filter=Remarks eq '/$value'", nil, checks, nil),
            ("GET", "Inspections(\(id))/Title", nil, hangar, nil),
            ("GET", "CheckPhotos('x/$value')", nil, checks, nil),
            ("DELETE", "CheckPhotos(\(id))/$value", nil, checks, nil),
        ]
        for (method, url, contentType, model, expected) in cases {
            let found = ODataRoutes.mediaRequest(method: method, url: url, contentType: contentType, model: model)
            #expect(found == expected, "\(method) \(url)")
            // The pre-check lets every media request through to the parse.
            if expected != nil {
                #expect(ODataRoutes.mayNameMedia(method: method, url: url, contentType: contentType, model: model))
            }
        }
        // Most requests stop at the pre-check.
        #expect(
            !ODataRoutes.mayNameMedia(method: "GET", url: "PreflightChecks(\(id))", contentType: nil, model: checks))
        #expect(
            !ODataRoutes.mayNameMedia(
                method: "GET", url: "PreflightChecks?$filter=FuelKg gt 5000&$top=50", contentType: nil, model: checks))
    }
}
