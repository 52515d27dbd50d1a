"""Interoperability check: the query strings everyday HTTP clients build, against a running baton-server.

Usage: query_encoding_interop.py BASE_URL USER   (the user's password on standard input)
Python's requests (`params=`), urllib.parse.urlencode and `curl -G --data-urlencode` all write a space as '+'
and a literal '+' as %2B. Each must get the same answer as the strictly percent-encoded URL, with the literal
'+' of a remark kept. A form-encoded query with an error gets a 400 that names the problem, not the '+'.
Creates one check with Remarks "a+b c" and an omitted Status (its CSDL default, final). Prints "interop ok".
"""

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
import uuid

import requests
from interop_common import check, sign_in



def ids(payload):
    return sorted(entity["ID"] for entity in payload["value"])


def main():
    base, user, token = sign_in()
    headers = {"Authorization": "Bearer " + token}
    odata = base + "/odata/"

    # A check whose remark holds both a plus and a space, created without Status (the model's default applies).
    plane = requests.get(odata + "Aircraft", params={"$top": "1"}, headers=headers, timeout=10).json()["value"][0]
    created = requests.post(odata + "PreflightChecks", headers=headers, timeout=10, json={
        "ID": str(uuid.uuid4()), "TailNumber": plane["TailNumber"], "FuelKg": 5100.5,
        "TyrePressureMainPsi": 200.5, "TyrePressureNosePsi": 58, "OilQuarts": 12.25, "Remarks": "a+b c",
    })
    check(created.status_code == 201, f"create without Status: {created.status_code} {created.text}")
    check(created.json()["Status"] == "final", "Status takes its default, final")

    query = {"$filter": "FuelKg gt 5000 and Remarks eq 'a+b c'", "$select": "ID,Remarks", "$orderby": "FuelKg desc"}
    strict = base + "/odata/PreflightChecks?" + "&".join(
        f"{name}={urllib.parse.quote(value, safe=chr(39) + ',()+')}" for name, value in query.items())
    check("%20" in strict and "+" in strict, "the strict URL spells a space %20 and keeps the literal +")
    expected = requests.get(strict, headers=headers, timeout=10)
    check(expected.status_code == 200, f"strict URL: {expected.status_code} {expected.text}")
    check(ids(expected.json()) == [created.json()["ID"]], "the strict URL finds exactly the new check")
    want = ids(expected.json())

    # 1. requests, params=
    answer = requests.get(odata + "PreflightChecks", params=query, headers=headers, timeout=10)
    check("+gt+" in answer.request.url, "requests wrote spaces as +")
    check(answer.status_code == 200, f"requests params=: {answer.status_code} {answer.text}")
    check(ids(answer.json()) == want, "requests params= finds the same check")

    # 2. urllib.parse.urlencode with urllib.request
    request = urllib.request.Request(odata + "PreflightChecks?" + urllib.parse.urlencode(query), headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        check(ids(json.load(response)) == want, "urlencode finds the same check")

    # 3. curl -G --data-urlencode
    check(shutil.which("curl") is not None, "curl is installed (apt-get install curl)")
    arguments = ["curl", "-s", "-G", "-H", "@-", odata + "PreflightChecks"]
    for name, value in query.items():
        arguments += ["--data-urlencode", f"{name}={value}"]
    curl = subprocess.run(arguments, input=f"Authorization: Bearer {token}\n", capture_output=True, text=True,
                          timeout=20)
    check(curl.returncode == 0, f"curl ran: {curl.stderr}")
    check(ids(json.loads(curl.stdout)) == want, f"curl --data-urlencode finds the same check: {curl.stdout[:300]}")

    # 4. $search and $expand the same way
    words = requests.get(odata + "PreflightChecks", params={"$search": "a+b", "$select": "ID"}, headers=headers,
                         timeout=10)
    check(words.status_code == 200, f"$search through params=: {words.status_code} {words.text}")
    nested = requests.get(odata + "Aircraft", headers=headers, timeout=10,
                          params={"$expand": "Checks($filter=FuelKg gt 5000;$select=ID)", "$top": "2"})
    check(nested.status_code == 200, f"$expand with a nested $filter through params=: {nested.text}")

    # 5. A form-encoded mistake is named, not blamed on the +.
    wrong = requests.get(odata + "PreflightChecks", params={"$filter": "FuelKgs gt 5000"}, headers=headers,
                         timeout=10)
    check(wrong.status_code == 400, f"a wrong property: {wrong.status_code}")
    message = wrong.json()["error"]["message"]
    check("FuelKgs" in message and "'+'" not in message, f"the error names the property: {message}")
    print("interop ok")


if __name__ == "__main__":
    main()
