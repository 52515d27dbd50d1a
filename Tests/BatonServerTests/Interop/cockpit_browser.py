"""The admin cockpit in a real browser: Debian's chromium through chromium-driver and Selenium, headless.

Usage: cockpit_browser.py BASE_URL SCREENSHOT_DIR
Passwords come from the environment (never the command line): BATON_ADMIN_PASSWORD for `admin`,
BATON_STAFF_PASSWORD for the ground-staff users `bob` and `dana`, and BATON_DEVICE_KEY (hex) the raw P-256 key
of the tablet `tablet-9`, which signs its log and usage uploads. Prints one line per check; exits non-zero on the
first failure.
"""

import base64
import hashlib
import json
import os
import re
import sys
import time

import requests
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, utils
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE = sys.argv[1].rstrip("/")
SHOTS = sys.argv[2]
ADMIN_PASSWORD = os.environ["BATON_ADMIN_PASSWORD"]
STAFF_PASSWORD = os.environ["BATON_STAFF_PASSWORD"]
DEVICE_KEY = ec.derive_private_key(int(os.environ["BATON_DEVICE_KEY"], 16), ec.SECP256R1())
# What users write, planted where the cockpit shows it: a code point that joins the `<` into one grapheme cluster
# with it (U+0600 ARABIC NUMBER SIGN) and a meta refresh, which the CSP does not block.
ATTACK = "\u0600<meta http-equiv=refresh content=0;url=/health>"
_last_proof = [0]


def device_proof(method, path, body):
    """`Baton-Device-Proof` for `method` on `path` (/devices/{id}/{action}) with `body`, signed by tablet-9's key."""
    _last_proof[0] = max(int(time.time() * 1000), _last_proof[0] + 1)
    stamp = _last_proof[0]
    message = "\n".join(["baton-device-request-v1", method, path, "tablet-9", str(stamp),
                         hashlib.sha256(body).hexdigest()]).encode()
    r, s = utils.decode_dss_signature(DEVICE_KEY.sign(message, ec.ECDSA(hashes.SHA256())))
    signature = base64.urlsafe_b64encode(r.to_bytes(32, "big") + s.to_bytes(32, "big")).rstrip(b"=").decode()
    return f"t={stamp}, sig={signature}"


def device_post(path, headers, payload):
    """POSTs `payload` as JSON to `path` with the user's token and the tablet's own proof."""
    body = json.dumps(payload).encode()
    proven = dict(headers, **{"Content-Type": "application/json",
                              "Baton-Device-Proof": device_proof("POST", path, body)})
    return requests.post(BASE + path, headers=proven, data=body)


def stays_text(driver, url, what):
    """Opens `url` and checks, after the planted refresh would have fired, that the browser is still there and
    the page holds no element the attack wrote."""
    driver.get(url)
    time.sleep(1.5)
    check(driver.current_url == url, f"{what}: the browser stays on the page (at {driver.current_url})")
    check(not driver.find_elements(By.CSS_SELECTOR, "meta[http-equiv], form[action*='/oauth/device']"),
          f"{what}: the planted markup is no element")


def check(condition, message):
    if not condition:
        print(f"FAILED: {message}", flush=True)
        sys.exit(1)
    print(f"ok: {message}", flush=True)


def browser(width=1280, height=800, phone=False):
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}",
                     "--disable-gpu", "--no-first-run"]:
        options.add_argument(argument)
    if phone:
        # A headless window is at least 500 px wide; a phone's viewport is emulated instead.
        options.add_experimental_option(
            "mobileEmulation", {"deviceMetrics": {"width": width, "height": height, "pixelRatio": 1}})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def sign_in(driver, name, password):
    driver.get(BASE + "/admin/")
    check("/oauth/authorize" in driver.current_url, f"{name}: the cockpit sends the browser to Baton's sign-in page")
    driver.find_element(By.NAME, "username").send_keys(name)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The redirects (authorization endpoint, callback) finish before the next page is read.
    WebDriverWait(driver, 10).until(lambda d: "/oauth/authorize" not in d.current_url)


def submit(driver, button):
    """Clicks a form's button (or a link) and waits until the answer's page has replaced the one it was on."""
    driver.execute_script("window.batonOldPage = true")
    button.click()

    def replaced(d):
        try:
            return d.execute_script("return window.batonOldPage === undefined && document.readyState === 'complete'")
        except Exception:  # the old document went away mid-question: ask again
            return False
    WebDriverWait(driver, 10).until(replaced)


def session_cookie(driver):
    return next((c for c in driver.get_cookies() if c["name"] == "baton_cockpit"), None)


def csrf_of(driver):
    return driver.find_element(By.CSS_SELECTOR, "input[name=csrf]").get_attribute("value")


def shot(driver, name):
    path = os.path.join(SHOTS, name)
    driver.save_screenshot(path)
    print(f"screenshot: {path}", flush=True)


def device_token(name, password):
    answer = requests.post(BASE + "/oauth/token", data={
        "grant_type": "password", "client_id": "baton-device", "username": name, "password": password})
    return answer.status_code, answer.json().get("access_token")


def user_row(driver, name):
    rows = driver.find_elements(By.CSS_SELECTOR, f"tr[data-user='{name}']")
    return rows[0] if rows else None


admin = browser()
try:
    # Sign-in through the authorization code flow with PKCE, then the overview.
    sign_in(admin, "admin", ADMIN_PASSWORD)
    check(admin.current_url == BASE + "/admin/", "admin lands on the overview after signing in")
    check(admin.find_element(By.TAG_NAME, "h1").text == "Overview", "the overview page shows")
    check(admin.find_element(By.ID, "users-count").text == "3", "the overview counts three users")
    cookie = session_cookie(admin)
    check(cookie is not None and cookie["httpOnly"] and cookie.get("sameSite") == "Strict"
          and cookie["path"] == "/admin" and not cookie["secure"],
          "the session cookie is HttpOnly, SameSite=Strict, path /admin, not Secure on loopback")
    jar = {"baton_cockpit": cookie["value"]}
    page = requests.get(BASE + "/admin/", cookies=jar, allow_redirects=False)
    headers = page.headers
    check(page.status_code == 200 and "script-src" not in headers.get("Content-Security-Policy", "")
          and "default-src 'none'" in headers.get("Content-Security-Policy", "")
          and headers.get("X-Frame-Options") == "DENY" and headers.get("Referrer-Policy") == "no-referrer"
          and headers.get("Cache-Control") == "no-store",
          "cockpit pages carry a strict CSP, X-Frame-Options DENY, Referrer-Policy no-referrer, no-store")
    check(not re.search(r"<script|\son\w+=", page.text, re.IGNORECASE), "no script, no inline handlers")
    shot(admin, "overview.png")

    # Users: add one, with bad input refused first.
    admin.get(BASE + "/admin/users")
    check(admin.find_element(By.TAG_NAME, "h1").text == "Users", "the users page shows")
    csrf = csrf_of(admin)
    before = requests.get(BASE + "/admin/users", cookies=jar).text.count("<tr data-user=")
    for form, expected in [
        ({"name": "", "role": "ground-staff", "password": "a-long-enough-password-1"}, "is not valid"),
        ({"name": "x" * 65, "role": "ground-staff", "password": "a-long-enough-password-1"}, "is not valid"),
        ({"name": "erin", "role": "pilot", "password": "a-long-enough-password-1"}, "Choose a role"),
        ({"name": "erin", "role": "ground-staff", "password": "short"}, "assword"),
        ({"name": "erin", "displayName": "E" * 129, "role": "ground-staff",
          "password": "a-long-enough-password-1"}, "at most 128"),
    ]:
        answer = requests.post(BASE + "/admin/users", cookies=jar, data={"csrf": csrf, **form})
        check(answer.status_code == 400 and expected in answer.text and 'id="form-error"' in answer.text,
              f"adding a user with bad input ({expected}) is refused with a message on the page")
    after = requests.get(BASE + "/admin/users", cookies=jar).text.count("<tr data-user=")
    check(before == after, "bad input added nobody")
    form = admin.find_element(By.ID, "add-user")
    form.find_element(By.NAME, "name").send_keys("casey")
    form.find_element(By.NAME, "displayName").send_keys("Casey Ng")
    form.find_element(By.NAME, "password").send_keys("lantern-first-2291")
    submit(admin, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    check("Added casey" in admin.find_element(By.ID, "form-notice").text, "adding casey is confirmed")
    check(user_row(admin, "casey") is not None, "casey is listed")
    status, _ = device_token("casey", "lantern-first-2291")
    check(status == 200, "casey signs in with the password given once")

    # Searching.
    admin.get(BASE + "/admin/users?q=case")
    names = [row.get_attribute("data-user") for row in admin.find_elements(By.CSS_SELECTOR, "tr[data-user]")]
    check(names == ["casey"], "searching 'case' lists casey alone")
    admin.get(BASE + "/admin/users")
    shot(admin, "users.png")

    # The last admin cannot be deleted, disabled or demoted.
    for action, data in [("delete", {}), ("disable", {}), ("role", {"role": "supervisor"})]:
        answer = requests.post(BASE + f"/admin/users/admin/{action}", cookies=jar, data={"csrf": csrf, **data})
        check(answer.status_code == 400 and "last enabled admin" in answer.text,
              f"{action} of the last admin is refused with a message")
    status, _ = device_token("admin", ADMIN_PASSWORD)
    check(status == 200, "the admin still exists and signs in")

    # A form without its CSRF token changes nothing.
    answer = requests.post(BASE + "/admin/users/casey/disable", cookies=jar, data={})
    check(answer.status_code == 403, "a form posted without its CSRF token is refused (403)")
    answer = requests.post(BASE + "/admin/users/casey/disable", cookies=jar, data={"csrf": "not-the-token"})
    check(answer.status_code == 403, "a form posted with a wrong CSRF token is refused (403)")
    status, _ = device_token("casey", "lantern-first-2291")
    check(status == 200, "casey was not disabled by the refused forms")

    # Role change and password reset from the row's forms.
    row = user_row(admin, "casey")
    role_form = row.find_element(By.CSS_SELECTOR, "form[action$='/role']")
    role_form.find_element(By.CSS_SELECTOR, "option[value='supervisor']").click()
    submit(admin, role_form.find_element(By.CSS_SELECTOR, "button"))
    check("casey is now supervisor" in admin.find_element(By.ID, "form-notice").text, "casey's role changes")
    row = user_row(admin, "casey")
    reset = row.find_element(By.CSS_SELECTOR, "form[action$='/password']")
    reset.find_element(By.NAME, "password").send_keys("harbour-second-8812")
    submit(admin, reset.find_element(By.CSS_SELECTOR, "button"))
    check("new password for casey" in admin.find_element(By.ID, "form-notice").text, "casey's password is reset")
    check(device_token("casey", "lantern-first-2291")[0] != 200, "the old password no longer works")
    check(device_token("casey", "harbour-second-8812")[0] == 200, "the new password works")

    # Disabling bob stops his token at once.
    status, token = device_token("bob", STAFF_PASSWORD)
    check(status == 200 and token, "bob has a device token")
    auth = {"Authorization": f"Bearer {token}"}
    check(requests.get(BASE + "/odata/", headers=auth).status_code == 200, "bob's token works before")
    admin.get(BASE + "/admin/users")
    submit(admin, user_row(admin, "bob").find_element(By.CSS_SELECTOR, "form[action$='/disable'] button"))
    check("Disabled bob" in admin.find_element(By.ID, "form-notice").text, "disabling bob is confirmed")
    check(requests.get(BASE + "/odata/", headers=auth).status_code == 401, "bob's token is refused at once")
    submit(admin, user_row(admin, "bob").find_element(By.CSS_SELECTOR, "form[action$='/enable'] button"))
    check("Enabled bob" in admin.find_element(By.ID, "form-notice").text, "bob can be enabled again")

    # Deleting casey.
    submit(admin, user_row(admin, "casey").find_element(By.CSS_SELECTOR, "form[action$='/delete'] button"))
    check(user_row(admin, "casey") is None, "casey is deleted")

    # Devices: bob's tablet with its user, app version and key; revoking it stops its store key; a wipe order
    # reaches the device.
    status, bob_token = device_token("bob", STAFF_PASSWORD)
    bob = {"Authorization": f"Bearer {bob_token}"}
    check(requests.get(BASE + "/devices/tablet-9/store-key", headers=bob).status_code == 200,
          "bob's tablet gets its store key before")
    # A change the server refuses (it goes to the tablet's error archive) shows on the overview.
    refusal = requests.patch(BASE + "/odata/PreflightChecks(00000000-0000-4000-8000-00000000beef)", headers=bob,
                             json={"Remarks": "no If-Match"})
    check(refusal.status_code == 428, "a change without its ETag is refused")
    overview = requests.get(BASE + "/admin/", cookies=jar).text
    check('id="refusals-today">1<' in overview, "the overview counts the refused change")
    # A refused change claims an author of the attacker's choosing (the header's UTF-8 bytes): the audit page
    # shows it as text.
    planted = requests.patch(BASE + "/odata/PreflightChecks(00000000-0000-4000-8000-00000000beef)",
                             headers=dict(bob, **{"Baton-Author": ATTACK.encode()}), json={"Remarks": "x"})
    check(400 <= planted.status_code < 500, "a change by a made-up author is refused")

    # Bob's tablet backs up a removed user's changes, encrypted with its store key, as the app does.
    store_key = base64.b64decode(requests.get(BASE + "/devices/tablet-9/store-key", headers=bob).json()["key"])
    nonce = os.urandom(12)
    changes = json.dumps([{"author": "bob", "set": "PreflightChecks", "body": {"Remarks": "left tyre <soft>"}}])
    sealed = nonce + AESGCM(store_key).encrypt(nonce, changes.encode(), b"baton-discarded-v1")
    kept = requests.post(BASE + "/devices/tablet-9/discarded-changes", headers=bob,
                         json={"author": "bob", "count": 1, "backup": base64.b64encode(sealed).decode()})
    check(kept.status_code == 201, "the tablet's backup is kept")
    planted = requests.post(BASE + "/devices/tablet-9/discarded-changes", headers=bob,
                            json={"author": ATTACK, "count": 1, "backup": base64.b64encode(sealed).decode()})
    check(planted.status_code == 400, "a backup names only a user who was on the tablet")
    admin.get(BASE + "/admin/backups")
    row = admin.find_element(By.CSS_SELECTOR, f"tr[data-backup='{kept.json()['id']}']")
    check("tablet-9" in row.text and "bob" in row.text, "the backup is listed with its device and author")
    submit(admin, row.find_element(By.LINK_TEXT, "Read"))
    text = admin.find_element(By.ID, "backup-text").text
    check("left tyre <soft>" in text and '"Remarks"' in text, "the backup reads decrypted, HTML escaped")
    shot(admin, "backup.png")
    download = requests.get(admin.find_element(By.ID, "download").get_attribute("href"), cookies=jar)
    check(download.status_code == 200 and json.loads(download.content)[0]["body"]["Remarks"] == "left tyre <soft>"
          and "attachment" in download.headers.get("Content-Disposition", ""), "the backup downloads as JSON")
    for missing in ["999999", "abc", "-1"]:
        for suffix in ["", "/download"]:
            gone = requests.get(BASE + "/admin/backups/" + missing + suffix, cookies=jar)
            check(gone.status_code == 404 and "Not found" in gone.text and "attachment" not in
                  gone.headers.get("Content-Disposition", ""), f"backup {missing}{suffix} answers a Not found page")

    admin.get(BASE + "/admin/devices")
    check(admin.find_element(By.TAG_NAME, "h1").text == "Devices", "the devices page shows")
    row = admin.find_element(By.CSS_SELECTOR, "tr[data-device='tablet-9']")
    check("bob" in row.text and "2.4.1" in row.text and "in service" in row.text,
          "the tablet is listed with its user, app version and status")
    shot(admin, "devices.png")
    # The tablet's log: asked for, then sent with bob's token, read escaped on the device's page.
    submit(admin, row.find_element(By.CSS_SELECTOR, "form[action$='/request-logs'] button"))
    check("Asked tablet-9 for its log" in admin.find_element(By.ID, "form-notice").text, "the log request is confirmed")
    check(requests.get(BASE + "/devices/tablet-9/status", headers=bob).json()["logsRequested"] is True,
          "the tablet learns that its log is wanted")
    bare = requests.post(BASE + "/devices/tablet-9/logs", headers=bob,
                         json={"reason": "requested", "lines": ["made up"]})
    check(bare.status_code == 403 and bare.json()["error"]["code"] == "DeviceProofRequired",
          "a user's token alone cannot post the tablet's log")
    sent = device_post("/devices/tablet-9/logs", bob,
                       {"reason": "requested", "lines": ["info baton: sync done <b>uploaded=3</b>", ATTACK]})
    check(sent.status_code == 201, "the tablet's log is kept")
    usage = device_post("/devices/tablet-9/usage", bob, {"events": [
        {"id": "6f0b1c1e-0d55-4c6e-9d2b-3f1e5c2a7b10", "at": "2026-11-24T07:00:00Z", "name": "sync", "count": 3,
         "durationMs": 120}]})
    check(usage.status_code == 200 and usage.json() == {"accepted": 1}, "the tablet's usage events are kept")
    admin.get(BASE + "/admin/devices/tablet-9/logs")
    page = admin.find_element(By.TAG_NAME, "main").text if admin.find_elements(By.TAG_NAME, "main") else \
        admin.find_element(By.TAG_NAME, "body").text
    check("sync done <b>uploaded=3</b>" in page and "requested" in page and "bob" in page,
          "the log reads on the device's page, escaped")
    check(not admin.find_elements(By.ID, "log-requested"), "the upload settled the request")
    check("120" in admin.find_element(By.ID, "usage").text, "the usage events are listed")
    shot(admin, "device-logs.png")
    check(ATTACK in page, "the planted log line reads as text")
    stays_text(admin, BASE + "/admin/devices/tablet-9/logs", "the device's log page")
    admin.get(BASE + "/admin/devices?q=tablet")
    row = admin.find_element(By.CSS_SELECTOR, "tr[data-device='tablet-9']")
    submit(admin, row.find_element(By.CSS_SELECTOR, "form[action$='/revoke'] button"))
    check("Revoked tablet-9" in admin.find_element(By.ID, "form-notice").text, "revoking the tablet is confirmed")
    stopped = requests.get(BASE + "/odata/", headers=bob)
    check(stopped.status_code == 401 and stopped.json()["error"]["code"] == "DeviceRevoked",
          "the tokens the revoked tablet used stop at once, and say why")
    bob = {"Authorization": f"Bearer {device_token('bob', STAFF_PASSWORD)[1]}"}
    check(requests.get(BASE + "/odata/", headers=bob).status_code == 200, "bob signs in anew elsewhere")
    refused = requests.get(BASE + "/devices/tablet-9/store-key", headers=bob)
    check(refused.status_code == 403 and refused.json()["error"]["code"] == "DeviceRevoked",
          "the revoked tablet's store key is refused")
    registered = requests.put(BASE + "/devices/tablet-9/registration", headers=bob, json={"publicKey": "AAAA"})
    check(registered.status_code in (400, 403), "nobody registers on the revoked tablet")
    again = requests.post(BASE + "/admin/devices/tablet-9/revoke", cookies=jar, data={"csrf": csrf})
    check(again.status_code == 200 and "was already revoked" in again.text, "revoking twice changes nothing")
    admin.get(BASE + "/admin/devices?q=tablet")
    row = admin.find_element(By.CSS_SELECTOR, "tr[data-device='tablet-9']")
    submit(admin, row.find_element(By.CSS_SELECTOR, "form[action$='/wipe'] button"))
    check("wipe itself" in admin.find_element(By.ID, "form-notice").text, "the wipe order is confirmed")
    told = requests.get(BASE + "/devices/tablet-9/status", headers=bob).json()
    check(told == {"revoked": True, "wipeOrdered": True, "withdrawnUsers": [], "logsRequested": False},
          "the tablet learns it was revoked and must wipe")
    other = requests.get(BASE + "/devices/tablet-1/status", headers=bob)
    check(other.status_code == 404, "nobody learns about a device they never used")

    # Settings: a bad value is refused with what the key takes; a good one is saved and audited.
    admin.get(BASE + "/admin/settings")
    check(admin.find_element(By.TAG_NAME, "h1").text == "Settings", "the settings page shows")
    answer = requests.post(BASE + "/admin/settings", cookies=jar,
                           data={"csrf": csrf, "key": "passcode.min-length", "value": "sixty"})
    check(answer.status_code == 400 and "takes an integer from 0 to 64" in answer.text,
          "a bad setting value is refused with what the key takes")
    answer = requests.post(BASE + "/admin/settings", cookies=jar,
                           data={"csrf": csrf, "key": "passcode.colour", "value": "blue"})
    check(answer.status_code == 400 and "Unknown setting" in answer.text, "an unknown setting is refused")
    row = admin.find_element(By.CSS_SELECTOR, "tr[data-key='passcode.min-length']")
    field = row.find_element(By.NAME, "value")
    check(field.get_attribute("value") == "8", "bad values changed nothing")
    field.clear()
    field.send_keys("10")
    submit(admin, row.find_element(By.CSS_SELECTOR, "button"))
    check("passcode.min-length is now '10'" in admin.find_element(By.ID, "form-notice").text, "a setting is saved")
    settings = requests.get(BASE + "/settings", headers={"Authorization": f"Bearer {device_token('dana', STAFF_PASSWORD)[1]}"})
    check(settings.status_code == 200 and settings.json()["passcode"]["minLength"] == 10,
          "devices receive the new setting")
    shot(admin, "settings.png")

    # Photos: bob's photo of his check (uploaded by the test before the browser starts) with its thumbnail, the
    # photo's own bytes from this server, loaded under the cockpit's CSP; who took and who uploaded it.
    admin.get(BASE + "/admin/photos")
    check(admin.find_element(By.TAG_NAME, "h1").text == "Photos", "the photos page shows")
    rows = admin.find_elements(By.CSS_SELECTOR, "tr[data-photo]")
    check(len(rows) == 1, f"bob's photo is listed ({len(rows)})")
    cells = [cell.text for cell in rows[0].find_elements(By.TAG_NAME, "td")]
    check(cells[2] == "bob" and cells[3] == "bob" and cells[4] == "left main tyre", f"taken and uploaded by bob ({cells})")
    thumb = rows[0].find_element(By.CSS_SELECTOR, "img.thumb")
    WebDriverWait(admin, 10).until(lambda d: d.execute_script("return arguments[0].complete", thumb))
    check(admin.execute_script("return arguments[0].naturalWidth", thumb) == 1, "the thumbnail loads under the CSP")
    image = requests.get(thumb.get_attribute("src"), cookies=jar)
    check(image.status_code == 200 and image.headers["Content-Type"] == "image/png"
          and image.headers["X-Content-Type-Options"] == "nosniff" and image.content.startswith(b"\x89PNG"),
          "the image is served as a PNG, never sniffed")
    check(requests.get(thumb.get_attribute("src"), allow_redirects=False).status_code in (302, 303),
          "without a cockpit session the image is not served")
    shot(admin, "photos.png")

    # Audit: filter by user and action, page, download the CSV.
    stays_text(admin, BASE + "/admin/audit", "the audit page")
    check(admin.find_element(By.TAG_NAME, "h1").text == "Audit", "the audit page shows")
    check(ATTACK in admin.find_element(By.TAG_NAME, "main").text, "the planted author reads as text in the audit")
    filter_form = admin.find_element(By.ID, "audit-filter")
    filter_form.find_element(By.NAME, "user").send_keys("admin")
    filter_form.find_element(By.NAME, "action").send_keys("settings-changed")
    submit(admin, filter_form.find_element(By.CSS_SELECTOR, "button"))
    rows = admin.find_elements(By.CSS_SELECTOR, "#audit tr[data-id]")
    check(len(rows) == 1 and "passcode.min-length" in rows[0].text, "filtering by user and action finds the change")
    shot(admin, "audit.png")
    csv_link = admin.find_element(By.ID, "csv").get_attribute("href")
    download = requests.get(csv_link, cookies=jar)
    check(download.status_code == 200 and download.headers.get("Content-Type", "").startswith("text/csv")
          and "attachment" in download.headers.get("Content-Disposition", ""), "the CSV downloads as an attachment")
    lines = download.text.strip().split("\r\n")
    check(lines[0].startswith("id,at,actor,action") and len(lines) == 2 and "settings-changed" in lines[1],
          "the CSV holds the filtered entries")
    everything = requests.get(BASE + "/admin/audit.csv", cookies=jar).text
    check(everything.count(",device-revoked,") == 1, "one revocation, one audit entry")
    check(everything.count(",backup-read,") == 1 and everything.count(",backup-downloaded,") == 1,
          "a backup read or downloaded is audited once; one that is not there is not audited")
    check(",change-refused,PATCH PreflightChecks(" in everything and "PreconditionRequired, uploaded by bob" in everything,
          "the refused change is audited with its reason")
    for action in ["backup-read", "backup-downloaded", "device-revoked", "device-wipe-ordered", "user-added", "user-role-changed", "user-password-reset", "user-disabled", "user-enabled",
                   "user-deleted", "sign-in"]:
        check(f",{action}," in everything, f"the audit log records {action}")
    bad = requests.get(BASE + "/admin/audit?from=2026-13-40", cookies=jar)
    check(bad.status_code == 400 and "must be a date" in bad.text, "a bad date filter is refused with a message")

    # At 390 px wide the pages still read.
    narrow = browser(390, 844, phone=True)
    try:
        narrow.get(BASE + "/admin/")
        narrow.add_cookie({"name": "baton_cockpit", "value": cookie["value"], "path": "/admin"})
        narrow.get(BASE + "/admin/users")
        shot(narrow, "users-390.png")
        wide = narrow.execute_script(
            "return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > "
            "document.documentElement.clientWidth + 1 && !(e.parentElement && e.parentElement.closest('.scroll'))).map(e => e.tagName + '.' + "
            "e.className + '#' + e.id).slice(0, 5).join(' ')")
        width = narrow.execute_script("return document.documentElement.scrollWidth")
        check(narrow.execute_script("return window.innerWidth") == 390, "the phone's viewport is 390 px wide")
        check(width <= 390, f"the users page fits 390 px (tables scroll inside): {width} {wide}")
    finally:
        narrow.quit()

    # Sign out: the cookie of the ended session is refused.
    admin.get(BASE + "/admin/")
    submit(admin, admin.find_element(By.CSS_SELECTOR, "form[action='/admin/sign-out'] button"))
    check(admin.find_element(By.TAG_NAME, "h1").text == "Signed out", "signing out says so")
    old = requests.get(BASE + "/admin/users", cookies=jar, allow_redirects=False)
    check(old.status_code == 303 and old.headers.get("Location") == "/admin/sign-in",
          "a cookie from a signed-out session is refused (sent to sign in)")
    old = requests.post(BASE + "/admin/users/bob/disable", cookies=jar, data={"csrf": csrf})
    check(old.status_code == 401, "a form with a signed-out session's cookie changes nothing (401)")
    check(device_token("bob", STAFF_PASSWORD)[0] == 200, "bob was not disabled")
finally:
    admin.quit()

# A non-admin signs in and gets a clear 403 page, and no cockpit data.
staff = browser()
try:
    sign_in(staff, "dana", STAFF_PASSWORD)
    check(staff.find_element(By.TAG_NAME, "h1").text == "Not an administrator", "a non-admin gets the 403 page")
    check(session_cookie(staff) is None, "a non-admin gets no session")
    check("Users" not in staff.find_element(By.TAG_NAME, "header").text, "a non-admin sees no cockpit navigation")
    shot(staff, "forbidden.png")
    staff.get(BASE + "/admin/users")
    check("/oauth/authorize" in staff.current_url, "a non-admin asking for a cockpit page is sent to sign in")
finally:
    staff.quit()
# The real sign-in page with a state that would close its form and open one posting the attacker's device code:
# in printable ASCII it is reflected, escaped, into the page's one form; joined to a non-ASCII code point it is
# refused (400) before anything is reflected. Either way the browser stays and finds no second form.
visitor = browser()
try:
    visitor.get(BASE + "/admin/")
    start = visitor.current_url
    check("/oauth/authorize" in start and "state=" in start, "the cockpit sends a visitor to the sign-in page")
    attack = ("\"><form action=/oauth/device method=post><input name=user_code value=BBBB-CCCC>"
              "<input name=action value=approve><meta http-equiv=refresh content=0;url=/health>")
    visitor.get(re.sub(r"state=[^&]*", "state=" + requests.utils.quote(attack, safe=""), start))
    time.sleep(1.5)
    check("/oauth/authorize" in visitor.current_url, "the browser stays on the sign-in page")
    forms = visitor.find_elements(By.TAG_NAME, "form")
    check(len(forms) == 1 and forms[0].get_attribute("action").endswith("/oauth/authorize"),
          "an ASCII state that closes the form stays inside its hidden input")
    check(not visitor.find_elements(By.CSS_SELECTOR, "meta[http-equiv]"), "and writes no meta element")
    hidden = visitor.find_element(By.CSS_SELECTOR, "input[name='state']").get_attribute("value")
    check(hidden == attack, "the state reads back as sent")
    visitor.get(re.sub(r"state=[^&]*", "state=" + requests.utils.quote("\u0600" + attack, safe=""), start))
    time.sleep(1.5)
    check("/oauth/authorize" in visitor.current_url, "the browser stays on the sign-in address")
    check(not visitor.find_elements(By.CSS_SELECTOR, "form, meta[http-equiv]"),
          "a state outside printable ASCII writes no form (the page refuses it)")
    check("state must be at most 512 printable ASCII" in visitor.page_source, "the refusal says why")
finally:
    visitor.quit()
# The pages a person signs in on, at phone size: the cockpit's stylesheet (allowed by their CSP), nothing wider
# than the screen.
phone = browser(width=390, height=844, phone=True)
try:
    phone.get(BASE + "/admin/")
    check("/oauth/authorize" in phone.current_url, "a phone is sent to the sign-in page")
    styled = phone.execute_script("return getComputedStyle(document.querySelector('header')).backgroundColor")
    check(styled not in ("", "rgba(0, 0, 0, 0)", "transparent"), f"the sign-in page has the cockpit's look ({styled})")
    width = phone.execute_script("return document.documentElement.scrollWidth")
    check(width <= 390, f"the sign-in page fits 390 px: {width}")
    shot(phone, "sign-in-390.png")
    phone.get(BASE + "/oauth/device?user_code=BDFH-KLMN")
    check(phone.find_element(By.NAME, "user_code").get_attribute("value") == "BDFH-KLMN",
          "the device page shows the code being allowed")
    width = phone.execute_script("return document.documentElement.scrollWidth")
    check(width <= 390, f"the device page fits 390 px: {width}")
    shot(phone, "device-390.png")
finally:
    phone.quit()
print("cockpit browser checks passed", flush=True)
