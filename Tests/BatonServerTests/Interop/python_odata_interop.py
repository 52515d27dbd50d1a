"""Interoperability check: python-odata against a running baton-server.

Usage: python_odata_interop.py BASE_URL USER   (the user's password on standard input)
Reflects the model from $metadata, queries, creates (binding the aircraft) and updates. python-odata sends
no If-Match, so its plain update is refused with 428 (Baton requires optimistic concurrency); the session
then opts out explicitly with If-Match: * and the update applies. Prints "interop ok" on success.
"""

import hashlib
import json
import urllib.parse
import uuid
from decimal import Decimal

import requests
from odata import ODataService
from odata.exceptions import ODataError
from interop_common import check, sign_in



def main():
    base, user, token = sign_in()
    session = requests.Session()
    session.headers["Authorization"] = "Bearer " + token
    service = ODataService(base + "/odata/", session=session, reflect_entities=True)
    check(sorted(service.entities) == ["Aircraft", "CheckPhotos", "Flights", "PreflightChecks"], "the model is reflected from $metadata")
    Check = service.entities["PreflightChecks"]
    Plane = service.entities["Aircraft"]

    heavy = service.query(Check).filter(Check.FuelKg > 5000).order_by(Check.FuelKg.desc()).limit(3).all()
    check(len(heavy) == 3 and all(isinstance(c.FuelKg, Decimal) and c.FuelKg > 5000 for c in heavy), "filter and limit")
    check([c.FuelKg for c in heavy] == sorted((c.FuelKg for c in heavy), reverse=True), "order_by desc")

    plane = service.query(Plane).first()
    new = Check()
    new.ID = uuid.uuid4()
    new.Aircraft = plane
    new.TailNumber = plane.TailNumber
    new.FuelKg = Decimal("5100.5")
    new.TyrePressureMainPsi = Decimal("200.5")
    new.TyrePressureNosePsi = Decimal("58")
    new.OilQuarts = Decimal("12.25")
    new.Status = "final"
    service.save(new)
    stored = service.query(Check).filter(Check.ID == new.ID).first()
    check(stored is not None and stored.FuelKg == Decimal("5100.5"), "create, binding the aircraft")
    check(stored.TailNumber == plane.TailNumber and stored.CheckedBy == user, "bound key and server-kept author")

    stored.Remarks = "from python-odata"
    try:
        service.save(stored)
        check(False, "an update without If-Match is refused")
    except ODataError as failure:
        check("428" in str(failure), f"the update without If-Match answers 428 ({failure})")
    session.headers["If-Match"] = "*"
    service.save(stored)
    again = service.query(Check).filter(Check.ID == new.ID).first()
    check(again.Remarks == "from python-odata", "update with If-Match applies")

    # A photo of that check with plain requests: POST the bytes with the properties in Slug, read them back at
    # $value, see them listed with the check's photos; HTML passed off as a PNG is refused by its bytes.
    del session.headers["If-Match"]
    photo = str(uuid.uuid4())
    jpeg = bytes([0xFF, 0xD8, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]) + bytes(range(1, 255, 2)) * 16 + bytes([0xFF, 0xD9])
    slug = urllib.parse.quote(json.dumps({"ID": photo, "CheckID": str(new.ID), "Caption": "requests"}), safe="")
    made = session.post(base + "/odata/CheckPhotos", data=jpeg, headers={"Content-Type": "image/jpeg", "Slug": slug})
    check(made.status_code == 201, f"a photo is created from its bytes ({made.status_code} {made.text[:200]})")
    body = made.json()
    check(body["SHA256"] == hashlib.sha256(jpeg).hexdigest() and body["TakenBy"] == user, "SHA-256 and TakenBy kept")
    check(body["@odata.mediaReadLink"] == f"CheckPhotos({photo})/$value", "the media read link")
    read = session.get(base + "/odata/" + body["@odata.mediaReadLink"])
    check(read.status_code == 200 and read.content == jpeg, "the bytes read back as sent")
    check(read.headers["Content-Type"] == "image/jpeg" and read.headers["X-Content-Type-Options"] == "nosniff",
          "served as a JPEG, never sniffed")
    listed = session.get(base + f"/odata/PreflightChecks({new.ID})/Photos").json()["value"]
    check([p["ID"] for p in listed] == [photo], "listed with its check's photos")
    html = session.post(base + "/odata/CheckPhotos", data=b"<html><script>alert(1)</script></html>",
                        headers={"Content-Type": "image/png", "Slug": slug})
    check(html.status_code == 415 and html.json()["error"]["code"] == "NotAnImage", f"HTML is refused ({html.status_code})")
    print("interop ok")


if __name__ == "__main__":
    main()
