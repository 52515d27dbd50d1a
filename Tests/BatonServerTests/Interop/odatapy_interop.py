"""Interoperability check: odatapy (an Olingo-style OData client) against a running baton-server.

Usage: odatapy_interop.py BASE_URL USER   (the user's password on standard input, never as an argument)
Covers CRUD with ETags, filter/select/orderby/count, server-driven paging, JSON and multipart batch, and
delta links. Prints "interop ok" and exits 0 when every step passes.
"""

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


def check_body(key, tail, fuel):
    return {
        "ID": key, "TailNumber": tail, "FuelKg": Decimal(fuel), "TyrePressureMainPsi": Decimal("200.5"),
        "TyrePressureNosePsi": Decimal("58"), "OilQuarts": Decimal("12.25"), "Status": "final",
    }


def main():
    base, user, token = sign_in()
    client = EdmEnabledODataClient(base + "/odata", HttpxTransport(headers={"Authorization": "Bearer " + token}))

    names = [entry.name for entry in client.get_service_document().entries]
    check(names == ["Aircraft", "Flights", "PreflightChecks"], "service document lists the entity sets")
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
    print("interop ok")


if __name__ == "__main__":
    main()
