"""Sign-in through a real OpenID Provider and provisioning over SCIM, against a real baton-server.

Usage: idp_checks.py BASE_URL
Environment (never the command line): BATON_SCIM_TOKEN (provider corp's SCIM token), BATON_SCIM_TOKEN_OTHER
(provider other's). The provider corp knows s-alice (gs-admins), s-bob (gs-staff), s-mallory (claims the name of
the local admin `root`) and s-nogroup (in no mapped group). Drives the browser's side of the code flow with
requests (cookies, redirects), the provider's own login form included, and SCIM with scim2-client; runs the
scim2-tester conformance checker. Prints one line per check; exits non-zero on the first failure.
"""

import os
import re
import sys
from html import unescape
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import requests
from httpx2 import Client
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_models import PatchOp, PatchOperation, SearchRequest, User
from scim2_tester import Status, check_server

BASE = sys.argv[1].rstrip("/")


def check(condition, what):
    if not condition:
        print("FAILED:", what)
        sys.exit(1)
    print("ok:", what)


def text(page):
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", page)))


def to_provider(session, start="/admin/sign-in", provider="corp"):
    """Opens Baton's sign-in page and presses the provider's button; returns the provider's login URL."""
    page = session.get(BASE + start)
    form = {k: unescape(v) for k, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text)}
    answer = session.post(f"{BASE}/oauth/idp/{provider}/start", data=form, allow_redirects=False)
    assert answer.status_code == 303, (answer.status_code, answer.text[:300])
    return answer.headers["location"]


def provider_answer(session, login, sub):
    """Signs in at the provider's own page as `sub`; returns the callback URL the provider sends the browser to."""
    answer = session.post(login, data={"sub": sub}, allow_redirects=False)
    assert answer.status_code == 302, (answer.status_code, answer.text[:300])
    return answer.headers["location"]


def with_query(url, **changes):
    parts = urlparse(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query.update(changes)
    return urlunparse(parts._replace(query=urlencode(query)))


# The cockpit through the provider: a mapped admin gets in, and the page shows who they are.
alice = requests.Session()
page = alice.get(BASE + "/admin/sign-in")
check("Sign in with Corp ID" in page.text, "the sign-in page offers the provider beside the password form")
callback = provider_answer(alice, to_provider(alice), "s-alice")
check(urlparse(callback).path == "/oauth/idp/corp/callback", "the provider answers at corp's own callback")
cookie = alice.cookies.get("baton_idp")
landed = alice.get(callback)
# The cockpit's callback moves on by itself (Refresh), a same-site navigation that carries its Strict cookie.
check(landed.url.startswith(BASE + "/admin/callback") and landed.headers.get("refresh") == "0; url=/admin/",
      "the cockpit's callback moves on to /admin/ by itself")
landed = alice.get(BASE + "/admin/")
check(landed.url == BASE + "/admin/" and "Alice Admin (alice)" in landed.text, "alice signs in to the cockpit")
# The same answer again, cookie and all: each state is used once.
replay = requests.get(callback, cookies={"baton_idp": cookie})
check(replay.status_code == 400 and "does not belong" in text(replay.text), "a replayed answer is refused")

# The cockpit's page of providers: both listed with their callbacks, never a secret; a bad one is refused.
providers = alice.get(BASE + "/admin/identity-providers")
check(providers.status_code == 200 and 'data-name="corp"' in providers.text and 'data-name="other"' in providers.text
      and BASE + "/oauth/idp/corp/callback" in providers.text and "other-secret" not in providers.text,
      "the cockpit lists the providers with their callbacks and no secret")
csrf = re.search(r'name="csrf" value="([^"]+)"', providers.text).group(1)
bad_add = alice.post(BASE + "/admin/identity-providers", data={
    "csrf": csrf, "name": "evil", "issuer": "http://evil.example", "clientID": "x", "clientSecret": "y",
    "nameClaim": "sub", "roleClaim": "groups", "roleMap": "g=admin"})
check(bad_add.status_code == 400 and "https URL" in text(bad_add.text), "the cockpit refuses a plain-http issuer")
added = alice.post(BASE + "/admin/identity-providers", data={
    "csrf": csrf, "name": "third", "displayName": "Third", "issuer": "https://third.example", "clientID": "x",
    "clientSecret": "third-secret", "nameClaim": "email", "roleClaim": "groups", "roleMap": "g=ground-staff"})
check(added.status_code == 200 and 'data-name="third"' in added.text, "the cockpit adds a provider")
removed = alice.post(BASE + "/admin/identity-providers/third/remove", data={"csrf": csrf})
check(removed.status_code == 200 and 'data-name="third"' not in removed.text, "the cockpit removes it")

# A mapped ground-staff person signs in, but the cockpit is for admins.
bob = requests.Session()
refused = bob.get(provider_answer(bob, to_provider(bob), "s-bob"))
check(refused.status_code == 403 and "only for users with the admin role" in text(refused.text),
      "bob (ground staff) is not let into the cockpit")

# A forged state, and a state from another browser.
mallet = requests.Session()
forged = mallet.get(with_query(provider_answer(mallet, to_provider(mallet), "s-alice"), state="forged-state"))
check(forged.status_code == 400 and "Sign-in not recognised" in forged.text, "a forged state is refused")
stranger = requests.Session()
victim = requests.Session()
stolen = provider_answer(victim, to_provider(victim), "s-alice")
check(stranger.get(stolen).status_code == 400, "an answer opened in another browser (no sealed cookie) is refused")

# Mix-up: an answer for corp's sign-in presented at the other provider's callback, and an `iss` not corp's.
mix = requests.Session()
answer = provider_answer(mix, to_provider(mix), "s-alice")
mixed = mix.get(answer.replace("/oauth/idp/corp/callback", "/oauth/idp/other/callback"))
check(mixed.status_code == 400, "corp's code at the other provider's callback is refused (mix-up)")
mix = requests.Session()
answer = provider_answer(mix, to_provider(mix), "s-alice")
wrong_iss = mix.get(with_query(answer, iss="https://other.example"))
check(wrong_iss.status_code == 400 and "another issuer" in text(wrong_iss.text), "an answer with another iss is refused")

# No open redirect: an unregistered redirect_uri never reaches the provider.
evil = requests.post(BASE + "/oauth/idp/corp/start", data={
    "response_type": "code", "client_id": "baton-cockpit", "redirect_uri": "https://evil.example/steal",
    "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM", "code_challenge_method": "S256"},
    allow_redirects=False)
check(evil.status_code == 400 and "location" not in evil.headers, "an unregistered redirect_uri is refused at the start")

# A provider user whose claimed name is a local admin's, and one in no mapped group.
mallory = requests.Session()
clash = mallory.get(provider_answer(mallory, to_provider(mallory), "s-mallory"))
check(clash.status_code == 403 and "already has a user named 'root'" in text(clash.text),
      "a claimed name equal to the local admin's is refused")
nobody = requests.Session()
none = nobody.get(provider_answer(nobody, to_provider(nobody), "s-nogroup"))
check(none.status_code == 403 and "none of the groups" in text(none.text), "a person in no mapped group is refused")

# A tablet's code through the provider: signing in there allows nothing until the person presses Allow on
# Baton's page (a provider that signs a returning person in silently would otherwise let any web page post an
# attacker's code to /oauth/idp/corp/start in the victim's browser and let the attacker's tablet in as them).
def device_code():
    return requests.post(BASE + "/oauth/device_authorization", data={"client_id": "baton-device"}).json()


def poll(started):
    answer = requests.post(BASE + "/oauth/token", data={
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code", "device_code": started["device_code"],
        "client_id": "baton-device"})
    return "ok" if answer.status_code == 200 else answer.json().get("error")


def through_provider(started, sub):
    session = requests.Session()
    start = session.post(BASE + "/oauth/idp/corp/start", data={"user_code": started["user_code"]},
                         allow_redirects=False)
    return session, session.get(provider_answer(session, start.headers["location"], sub))


silent = device_code()
_, asked = through_provider(silent, "s-bob")
check(asked.status_code == 200 and "Allow the tablet?" in asked.text and silent["user_code"] in text(asked.text),
      "after the provider, Baton asks whether to allow the tablet's code")
check(poll(silent) == "authorization_pending", "signing in at the provider alone allows no tablet")
started = device_code()
tablet, asked = through_provider(started, "s-bob")
ticket = unescape(re.search(r'name="ticket" value="([^"]+)"', asked.text).group(1))
forged = requests.post(BASE + "/oauth/idp/corp/allow", data={"ticket": ticket[:-6] + "AAAAAA", "action": "allow"})
check(forged.status_code == 400, "a forged ticket allows nothing")
elsewhere = requests.post(BASE + "/oauth/idp/other/allow", data={"ticket": ticket, "action": "allow"})
check(elsewhere.status_code == 400, "corp's ticket at the other provider's route allows nothing")
allowed = tablet.post(BASE + "/oauth/idp/corp/allow", data={"ticket": ticket, "action": "allow"})
check(allowed.status_code == 200 and "Signed in as" in text(allowed.text), "bob presses Allow")
check(poll(started) == "ok", "the tablet gets its tokens")
again = tablet.post(BASE + "/oauth/idp/corp/allow", data={"ticket": ticket, "action": "allow"})
check(again.status_code == 400, "the same ticket decides nothing twice")

# Only Baton's own pages start a sign-in: a form another site posts is refused (Origin, Fetch Metadata).
for header in [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}]:
    crossed = requests.post(BASE + "/oauth/idp/corp/start", data={"user_code": "BDFH-KLMN"}, headers=header,
                            allow_redirects=False)
    check(crossed.status_code == 403 and "location" not in crossed.headers,
          f"a sign-in started from another site is refused ({list(header)[0]})")
same = requests.post(BASE + "/oauth/idp/corp/start", data={"user_code": device_code()["user_code"]},
                     headers={"Origin": BASE, "Sec-Fetch-Site": "same-origin"}, allow_redirects=False)
check(same.status_code == 303, "Baton's own page starts it")

# People from the provider have no Baton password: the message names the provider.
grant = requests.post(BASE + "/oauth/token", data={
    "grant_type": "password", "client_id": "baton-device", "username": "alice", "password": "anything-at-all"})
check(grant.status_code == 400 and "identity provider 'corp'" in grant.json().get("error_description", ""),
      "the password grant refuses alice and names her provider")

# SCIM, with a real SCIM client.
def scim(token):
    client = SyncSCIMClient(Client(base_url=BASE + "/scim/v2", headers={"Authorization": "Bearer " + token}))
    client.discover()
    return client


corp = scim(os.environ["BATON_SCIM_TOKEN"])
carol = corp.create(User(user_name="carol", display_name="Carol C.", active=True))
check(carol.id == "carol" and carol.active is True, "SCIM creates carol")
found = corp.query(User, query_parameters=SearchRequest(filter='userName eq "carol"'))
check(found.total_results == 1 and found.resources[0].display_name == "Carol C.", "SCIM finds carol by userName")
corp.modify(User, "carol", PatchOp[User](operations=[
    PatchOperation(op=PatchOperation.Op.replace_, path="active", value=False)]))
check(corp.query(User, "carol").active is False, "SCIM deactivates carol")
raw = requests.patch(BASE + "/scim/v2/Users/carol", json={
    "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
    "Operations": [{"op": "replace", "path": "displayName", "value": "Carol"},
                   {"op": "add", "path": "roles", "value": [{"value": "admin"}]}]},
    headers={"Authorization": "Bearer " + os.environ["BATON_SCIM_TOKEN"]})
check(raw.status_code == 400 and raw.json().get("scimType") == "mutability", "a SCIM PATCH cannot make carol an admin")
check(corp.query(User, "carol").display_name == "Carol C.", "the refused PATCH applied none of its operations")
bad = requests.post(BASE + "/scim/v2/Users", data="{not json",
                    headers={"Authorization": "Bearer " + os.environ["BATON_SCIM_TOKEN"],
                             "Content-Type": "application/scim+json"})
check(bad.status_code == 400 and bad.json().get("scimType") == "invalidSyntax", "a body that is not JSON is a SCIM error")
taken = requests.post(BASE + "/scim/v2/Users", json={
    "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"], "userName": "root"},
    headers={"Authorization": "Bearer " + os.environ["BATON_SCIM_TOKEN"]})
check(taken.status_code == 409 and taken.json().get("scimType") == "uniqueness", "SCIM cannot take over the local admin")
etag = requests.get(BASE + "/scim/v2/Users/carol",
                    headers={"Authorization": "Bearer " + os.environ["BATON_SCIM_TOKEN"]}).headers["etag"]
stale = requests.delete(BASE + "/scim/v2/Users/carol", headers={
    "Authorization": "Bearer " + os.environ["BATON_SCIM_TOKEN"], "If-Match": 'W/"0000000000000000"'})
check(stale.status_code == 412, "a DELETE with a stale If-Match is refused")

other = scim(os.environ["BATON_SCIM_TOKEN_OTHER"])
check(other.query(User, query_parameters=SearchRequest()).total_results == 0, "the other provider's token lists none of corp's people")
cross = requests.delete(BASE + "/scim/v2/Users/carol",
                        headers={"Authorization": "Bearer " + os.environ["BATON_SCIM_TOKEN_OTHER"]})
check(cross.status_code == 404, "the other provider's token cannot delete corp's carol")
anonymous = requests.get(BASE + "/scim/v2/Users")
check(anonymous.status_code == 401 and "Bearer" in anonymous.headers.get("www-authenticate", ""),
      "SCIM without a token is 401")
deleted = requests.delete(BASE + "/scim/v2/Users/carol", headers={
    "Authorization": "Bearer " + os.environ["BATON_SCIM_TOKEN"], "If-Match": etag})
check(deleted.status_code == 204, "SCIM deletes carol")

# The conformance checker, against a client of its own.
results = check_server(scim(os.environ["BATON_SCIM_TOKEN"]))
failed = [r for r in results if r.status not in (Status.SUCCESS, Status.COMPLIANT, Status.ACCEPTABLE, Status.SKIPPED)]
for r in failed:
    print("  conformance:", r.status.name, r.title, (r.reason or "")[:200])
check(len(results) > 20 and not failed, f"scim2-tester: {len(results)} checks, none failed")

# Last, as it removes corp: a ticket from before the provider was removed decides nothing.
started = device_code()
tablet, asked = through_provider(started, "s-bob")
ticket = unescape(re.search(r'name="ticket" value="([^"]+)"', asked.text).group(1))
admin_page = alice.get(BASE + "/admin/identity-providers")
csrf = re.search(r'name="csrf" value="([^"]+)"', admin_page.text).group(1)
check(alice.post(BASE + "/admin/identity-providers/corp/remove", data={"csrf": csrf}).status_code == 200,
      "the cockpit removes corp")
late = tablet.post(BASE + "/oauth/idp/corp/allow", data={"ticket": ticket, "action": "allow"})
check(late.status_code == 400 and poll(started) == "authorization_pending",
      "a ticket from before the provider was removed allows nothing")
print("identity provider checks passed")
