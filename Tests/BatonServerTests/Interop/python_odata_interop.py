"""Interoperability check: python-odata against a running baton-server.

Usage: python_odata_interop.py BASE_URL USER   (the user's password on standard input)
Reflects the model from $metadata, queries, creates (binding the aircraft) and updates. python-odata sends
no If-Match, so its plain update is refused with 428 (Baton requires optimistic concurrency); the session
then opts out explicitly with If-Match: * and the update applies. Prints "interop ok" on success.
"""

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
    check(sorted(service.entities) == ["Aircraft", "Flights", "PreflightChecks"], "the model is reflected from $metadata")
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
    print("interop ok")


if __name__ == "__main__":
    main()
