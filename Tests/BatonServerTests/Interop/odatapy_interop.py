"""Interoperability check: odatapy (an Olingo-style OData client) against a running baton-server.

Usage: odatapy_interop.py BASE_URL USER   (the user's password on standard input, never as an argument)
Covers CRUD with ETags, filter/select/orderby/count, server-driven paging, JSON and multipart batch, delta
links, and a media entity (a photo) created, read, replaced and deleted. Prints "interop ok" and exits 0 when every step passes.
"""

import hashlib
import json
import struct
import zlib
import urllib.parse
import uuid
from decimal import Decimal

from odatapy.client import EdmEnabledODataClient
from odatapy.client.transport import HttpxTransport
from interop_common import check, sign_in



def value(entity, name):
    for prop in entity.properties:
        if prop.name == name:
            return prop.value
    return None


def one_pixel_png():
    """A real 1x1 PNG, chunk by chunk, with Python's own zlib and CRC-32."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\xc0\x40\x20"))
            + chunk(b"IEND", b""))


def check_body(key, tail, fuel):
    return {
        "ID": key, "TailNumber": tail, "FuelKg": Decimal(fuel), "TyrePressureMainPsi": Decimal("200.5"),
        "TyrePressureNosePsi": Decimal("58"), "OilQuarts": Decimal("12.25"), "Status": "final",
    }


def main():
    base, user, token = sign_in()
    client = EdmEnabledODataClient(base + "/odata", HttpxTransport(headers={"Authorization": "Bearer " + token}))

    names = [entry.name for entry in client.get_service_document().entries]
    check(names == ["Aircraft", "Flights", "PreflightChecks", "CheckPhotos"], "service document lists the entity sets")
    tail = value(next(iter(client.iter_entities(client.entity_set_uri("Aircraft").top(1)))), "TailNumber")

    # Create, read, update with the ETag, refuse a stale ETag, delete.
    key = uuid.uuid4()
    created = client.create_entity_result("PreflightChecks", check_body(key, tail, "5200.5"))
    check(created.entity is not None and value(created.entity, "FuelKg") == Decimal("5200.5"), "create returns the entity")
    check(value(created.entity, "CheckedBy") == user, "the server sets CheckedBy")
    entity_uri = client.entity_uri("PreflightChecks", key)
    read = client.get_entity(entity_uri)
    check(read.etag, "entities carry an ETag")
    client.update_entity(entity_uri, {"Remarks": "rechecked"}, etag=read.etag)
    check(value(client.get_entity(entity_uri), "Remarks") == "rechecked", "PATCH with If-Match applies")
    try:
        client.update_entity(entity_uri, {"Remarks": "lost update"}, etag=read.etag)
        check(False, "a stale ETag is refused")
    except Exception as failure:  # odatapy raises its client error with the status
        check("412" in str(failure) or getattr(failure, "status_code", None) == 412, f"stale ETag answers 412 ({failure!r})")

    # Query options and count.
    uri = client.entity_set_uri("PreflightChecks").filter("FuelKg gt 1000").select("ID", "FuelKg").orderby("FuelKg desc").count()
    page = client.get_entity_set(uri)
    fuels = [value(e, "FuelKg") for e in page.entities]
    check(fuels == sorted(fuels, reverse=True), "orderby desc is honoured")
    check(page.count is not None and page.count >= len(fuels), "count is returned")

    # Server-driven paging: every entity once, over several pages.
    pages = list(client.iter_pages(client.entity_set_uri("PreflightChecks"), max_page_size=7))
    ids = [value(e, "ID") for p in pages for e in p.entities]
    total = client.get_count(client.entity_set_uri("PreflightChecks"))
    check(len(pages) > 1 and len(ids) == total and len(set(ids)) == total, "nextLink paging yields each entity once")

    # Delta: track, change, follow the delta link.
    tracked = client.get_entity_set(client.entity_set_uri("PreflightChecks"), track_changes=True, max_page_size=1000)
    check(tracked.delta_link, "track-changes returns a delta link")
    client.update_entity(entity_uri, {"Remarks": "after tracking"}, etag=client.get_entity(entity_uri).etag)
    client.delete_entity(entity_uri, etag="*")
    delta = client.get_delta(tracked.delta_link)
    removed = [str(d.id) for d in delta.deleted_entities]
    check(any(str(key) in entry for entry in removed), f"the delta reports the deleted check ({removed})")
    check(all(value(e, "ID") != key for e in delta.entities), "a deleted entity is not reported as changed")

    # Batches, JSON and multipart, with a changeset.
    for fmt in ("json", "multipart"):
        batch = client.batch(format=fmt)
        batch.add_retrieve(client.entity_set_uri("Aircraft").top(1))
        changes = batch.add_changeset()
        changes.create("PreflightChecks", check_body(uuid.uuid4(), tail, "4100"))
        result = client.execute_batch(batch)
        statuses = []
        for part in result.parts:
            statuses += [p.status_code for p in part] if isinstance(part, list) else [part.status_code]
        check(statuses == [200, 201], f"{fmt} batch answers 200 and 201 ({statuses})")

    # Media: a photo of a check. Its properties travel in Slug (as SAP's services take them), which this client
    # sends with every request of a second client built for the upload.
    check_key = uuid.uuid4()
    client.create_entity_result("PreflightChecks", check_body(check_key, tail, "4300"))
    photo_key = uuid.uuid4()
    slug = urllib.parse.quote(json.dumps({"ID": str(photo_key), "CheckID": str(check_key), "Caption": "odatapy"}), safe="")
    uploader = EdmEnabledODataClient(
        base + "/odata", HttpxTransport(headers={"Authorization": "Bearer " + token, "Slug": slug}))
    jpeg = bytes([0xFF, 0xD8, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]) + bytes(range(0, 250, 2)) * 8 + bytes([0xFF, 0xD9])
    made = uploader.create_media_entity("CheckPhotos", jpeg, "image/jpeg")
    check(made.status_code == 201, f"a photo is created from its bytes ({made.status_code})")
    check(made.entity is not None and value(made.entity, "TakenBy") == user, "the server keeps who took it")
    photo_uri = client.entity_uri("CheckPhotos", photo_key)
    media = client.get_media(photo_uri)
    check(media.content == jpeg and media.content_type == "image/jpeg", "the photo's bytes read back as sent")
    check(media.etag == '"' + hashlib.sha256(jpeg).hexdigest() + '"', "its ETag is its SHA-256")
    png = one_pixel_png()
    entity = client.get_entity(photo_uri)
    client.update_media_entity(photo_uri, png, "image/png", etag=entity.etag)
    check(client.get_media(photo_uri).content_type == "image/png", "PUT $value with If-Match replaces the bytes")
    try:
        uploader.create_media_entity("CheckPhotos", b"<html><script>alert(1)</script></html>", "image/png")
        check(False, "HTML declared as PNG is refused")
    except Exception as failure:
        check("415" in str(failure) or getattr(failure, "status_code", None) == 415, f"HTML is refused with 415 ({failure!r})")
    client.delete_media_entity(photo_uri, etag="*")
    print("interop ok")


if __name__ == "__main__":
    main()
