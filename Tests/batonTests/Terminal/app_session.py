"""Drives the built `baton` app in an 80x24 pseudo-terminal against a real baton-server, as people at the stand
would: onboard alice and bob, alice records a check with the network cut, locks, bob signs in offline, the
network comes back, bob syncs and sees alice's check attributed to her. Invalid input at every prompt, wrong
passcodes up to the limit, `baton lock`, and the inactivity lock.

Usage: app_session.py BATON BATON_SERVER WORKDIR TRANSCRIPT < passwords (alice's, then bob's, one per line)
Prints "terminal ok" when every expectation held.
"""

import atexit
import base64
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time

import pexpect

baton, server_binary, work, transcript_path = sys.argv[1:5]
alice_password = sys.stdin.readline().strip()
bob_password = sys.stdin.readline().strip()
server_dir = os.path.join(work, "server")
device_dir = os.path.join(work, "device")
transcript = open(transcript_path, "w", encoding="utf-8")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(*arguments, stdin=None):
    result = subprocess.run(
        [server_binary, *arguments, "--data-dir", server_dir], input=stdin, capture_output=True, text=True
    )
    assert result.returncode == 0, f"baton-server {arguments}: {result.stderr}"
    return result.stdout


port = free_port()
url = f"http://127.0.0.1:{port}"


servers = []


@atexit.register
def stop_leftover_servers():
    """A failed expectation must not leave a server running."""
    for process in servers:
        if process.poll() is None:
            process.kill()
            process.wait()


def start_server():
    process = subprocess.Popen(
        [server_binary, "serve", "--data-dir", server_dir, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    servers.append(process)
    line = process.stdout.readline()
    assert line.startswith("listening on"), line
    return process


def stop_server(process):
    process.terminate()
    process.wait(timeout=20)


server_command("user", "add", "alice", "--display-name", "Alice", "--password-stdin", "--bcrypt-cost", "4",
               stdin=alice_password + "\n")
server_command("user", "add", "bob", "--display-name", "Bob", "--password-stdin", "--bcrypt-cost", "4",
               stdin=bob_password + "\n")
server_command("seed", "--aircraft", "6", "--checks", "12")
server_command("settings", "set", "passcode.lock-timeout-seconds", "10")
server = start_server()

environment = dict(os.environ, NO_COLOR="1", TERM="xterm")


def spawn(*arguments, directory=None):
    app = pexpect.spawn(
        baton, ["--data-dir", directory or device_dir, *arguments], dimensions=(24, 80), env=environment, encoding="utf-8",
        timeout=40, cwd=work,
    )
    app.logfile_read = transcript
    transcript.flush()
    app.transcript_start = transcript.tell()
    return app


def step(title):
    transcript.write(f"\n#### {title}\n")
    transcript.flush()


def expect(app, text):
    app.expect_exact(text)


def answer(app, prompt, text):
    app.expect_exact(prompt)
    app.sendline(text)


def wide_lines(app):
    """Every line this app printed fits the 80-column terminal (the script's own notes aside)."""
    transcript.flush()
    with open(transcript_path, encoding="utf-8") as f:
        f.seek(app.transcript_start)
        for line in f.read().splitlines():
            if line.startswith("#### "):
                continue
            assert len(line.rstrip("\r")) <= 80, f"line wider than 80 columns: {line!r}"


# 1. First start: the server is remembered, alice onboards. Wrong password, then passcodes breaking each rule.
step("alice onboards")
app = spawn("--server", url)
expect(app, "Welcome! Nobody uses this device yet")
answer(app, "User name:", "alice")
answer(app, "Password (hidden):", "not-her-password")
expect(app, "✗")
answer(app, "User name:", "alice")
answer(app, "Password (hidden):", alice_password)
# Consent: declining data consent ends the onboarding with the reason; nothing is kept.
expect(app, "Data consent — Alice")
answer(app, "Do you agree? (y/n):", "maybe")
expect(app, "'maybe' is not y or n.")
answer(app, "Do you agree? (y/n):", "n")
expect(app, "Alice did not agree to data consent")
answer(app, "Enter tries again · q quits:", "")
answer(app, "User name:", "alice")
answer(app, "Password (hidden):", alice_password)
answer(app, "Do you agree? (y/n):", "y")
expect(app, "Usage data — Alice")
answer(app, "Do you agree? (y/n):", "n")
answer(app, "New passcode (hidden):", "short1")
answer(app, "Type it again:", "short1")
expect(app, "at least 8 characters")
answer(app, "New passcode (hidden):", "no-digits-here")
answer(app, "Type it again:", "no-digits-here")
expect(app, "digit")
answer(app, "New passcode (hidden):", "alice-2468")
answer(app, "Type it again:", "alice-2469")
expect(app, "differ")
answer(app, "New passcode (hidden):", "alice-2468")
answer(app, "Type it again:", "alice-2468")
expect(app, "Signed in as Alice.")
expect(app, "0 pending (0 yours)")
assert alice_password not in app.before, "the password was echoed"

step("bad menu input, then bob is added")
answer(app, "Choose:", "42")
expect(app, "'42' is not on the menu")
answer(app, "Choose:", "8")
answer(app, "User name:", "bob")
answer(app, "Password (hidden):", bob_password)
answer(app, "Do you agree? (y/n):", "y")
answer(app, "Do you agree? (y/n):", "y")
answer(app, "New passcode (hidden):", "bob-13579x")
answer(app, "Type it again:", "bob-13579x")
expect(app, "Added. Bob is signed in.")

step("the aircraft list")
answer(app, "Choose:", "1")
app.expect(r"\n(D-[A-Z]{4}) ")
tail = app.match.group(1)
answer(app, "Aircraft:", "")

# 2. The network is cut. Alice switches in (passcode only) and records a check.
step("the network is cut; alice switches in and records a check offline")
stop_server(server)
answer(app, "Choose:", "7")
expect(app, "Who is working on this device?")
answer(app, "Choose:", "9")
expect(app, "'9' is not on the list")
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-2468")
expect(app, "Signed in as Alice.")
expect(app, "OFFLINE")
answer(app, "Choose:", "2")
answer(app, "Aircraft tail number:", "X-NONE")
expect(app, "No aircraft X-NONE")
# Characters that mean something in a URL or a literal are only a name that is not there.
answer(app, "Aircraft tail number:", "D-'&#?%")
expect(app, "No aircraft D-'&#?%")
answer(app, "Aircraft tail number:", tail.lower())
answer(app, "Flight (Enter for none):", "LH0000")
expect(app, "is not one of")
answer(app, "Flight (Enter for none):", "")
answer(app, "Fuel (kg, 0–400000):", "lots")
expect(app, "'lots' is not a number")
answer(app, "Fuel (kg, 0–400000):", "-5")
expect(app, "is not a number")
answer(app, "Fuel (kg, 0–400000):", "999999")
expect(app, "is outside 0–400000 kg")
answer(app, "Fuel (kg, 0–400000):", "5200")
answer(app, "Main tyre pressure (psi, 30–350):", "200.5")
answer(app, "Nose tyre pressure (psi, 30–350):", "1e3")
expect(app, "is not a number")
answer(app, "Nose tyre pressure (psi, 30–350):", "60")
answer(app, "Oil (quarts, 0–50):", "15.125")
expect(app, "more than 2 decimal places")
answer(app, "Oil (quarts, 0–50):", "15")
answer(app, "Remarks (Enter for none):", "Fuel sample clear")
answer(app, "Status (final/draft, Enter for final):", "done")
expect(app, "'done' is not one of final, draft")
answer(app, "Status (final/draft, Enter for final):", "")
answer(app, "Save this check? [y/N]", "y")
expect(app, f"{tail} check saved on this device")
expect(app, "1 pending (1 yours)")

step("alice locks at the end of her shift; bob signs in with no network")
answer(app, "Choose:", "6")
expect(app, "Alice (alice) · 1 change waiting")
answer(app, "Choose:", "2")
answer(app, "Passcode for Bob (hidden", "bob-wrong-1")
expect(app, "wrong")
answer(app, "Passcode for Bob (hidden", "bob-13579x")
expect(app, "Signed in as Bob.")
expect(app, "OFFLINE · 1 pending (0 yours)")
answer(app, "Choose:", "3")
expect(app, f"new check {tail} 5200 kg")
expect(app, "by alice")
answer(app, "Enter goes back:", "")

# 3. The network comes back: bob syncs, alice's check goes on her behalf.
step("the network comes back; bob syncs")
server = start_server()
answer(app, "Choose:", "5")
expect(app, "uploaded 1 change: 1 alice's on their behalf")
expect(app, "online · 0 pending (0 yours)")
answer(app, "Choose:", "1")
app.expect(re.escape(tail) + r" [^\n]*5200 +alice")
answer(app, "Aircraft:", "")

step("bob resets his passcode (he signs in again as himself)")
answer(app, "Choose:", "9")
expect(app, "User: bob")
answer(app, "Password (hidden):", bob_password)
answer(app, "New passcode (hidden):", "bob-24680x")
answer(app, "Type it again:", "bob-24680x")
expect(app, "Your passcode is changed.")
answer(app, "Choose:", "q")
expect(app, "Bye.")
app.expect(pexpect.EOF)
app.close()
assert app.exitstatus == 0, app.exitstatus
wide_lines(app)

# 4. What the server has, through the scriptable commands (passcode on standard input).
step("the check on the server: CheckedBy alice, UploadedBy bob")
listed = subprocess.run(
    [baton, "checks", "list", "--data-dir", device_dir, "--user", "bob", "--passcode-stdin", "--tail", tail,
     "--json"],
    input="bob-24680x\n", capture_output=True, text=True,
)
assert listed.returncode == 0, listed.stderr
checks = [c for c in json.loads(listed.stdout) if c["fuelKg"] == "5200"]
assert len(checks) == 1, listed.stdout
assert checks[0]["checkedBy"] == "alice" and checks[0]["uploadedBy"] == "bob", checks[0]
assert checks[0]["onDevice"] is False and checks[0]["remarks"] == "Fuel sample clear", checks[0]
transcript.write(json.dumps(checks[0], indent=2) + "\n")

# 4b. The tutorial's step 12, literally: alice signs in, the server stops, she updates an existing check and
# finalizes a draft, locks; bob signs in offline; the server returns; bob syncs; the server has alice's update
# (CheckedBy alice, UploadedBy bob) and its audit log lists both changes as alice's, uploaded by bob.
step("alice records a draft and syncs it")
app = spawn()
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-2468")
expect(app, "Signed in as Alice.")
answer(app, "Choose:", "2")
answer(app, "Aircraft tail number:", tail)
answer(app, "Flight (Enter for none):", "")
for prompt, value in [("Fuel", "3900"), ("Main tyre", "198"), ("Nose tyre", "59"), ("Oil", "13")]:
    answer(app, prompt, value)
answer(app, "Remarks (Enter for none):", "")
answer(app, "Status (final/draft, Enter for final):", "draft")
answer(app, "Save this check? [y/N]", "y")
answer(app, "Choose:", "5")
expect(app, "uploaded 1 change: 1 yours")

step("the server stops; alice updates her check and finalizes her draft")
stop_server(server)
answer(app, "Choose:", "1")
answer(app, "Aircraft:", tail)
app.expect_exact(f"{tail}:")
updated = re.search(r"\n(\d)  5200 kg [^\n]*final · alice", app.before).group(1)
assert re.search(r"\n(\d)  3900 kg [^\n]*draft · alice", app.before), app.before
app.sendline("s maintenance")
expect(app, "Only a supervisor sets an aircraft's status.")
answer(app, "Press Enter.", "")
answer(app, f"{tail}:", updated)
expect(app, "Checked by          alice")
answer(app, "Check:", "f")
expect(app, "is not one of the choices")
answer(app, "Check:", "e")
answer(app, "Fuel (kg, 0–400000): [5200]", "lots")
expect(app, "'lots' is not a number")
answer(app, "Fuel (kg, 0–400000): [5200]", "5350")
answer(app, "Main tyre pressure (psi, 30–350): [200.5]", "")
answer(app, "Nose tyre pressure (psi, 30–350): [60]", "")
answer(app, "Oil (quarts, 0–50): [15]", "")
answer(app, "Remarks [Fuel sample clear]:", "Refuelled after the delay")
expect(app, "Changed on this device; it is sent with the next sync.")
expect(app, "• on this device, not sent yet")
answer(app, "Check:", "")
# Changes not sent yet come first: the list is numbered anew.
app.expect_exact(f"{tail}:")
assert re.search(r"\n1  5350 kg [^\n]*final · alice · • on device", app.before), app.before
draft = re.search(r"\n(\d)  3900 kg [^\n]*draft · alice", app.before).group(1)
app.sendline(draft)
answer(app, "Check:", "f")
expect(app, "Finalized on this device")
answer(app, "Check:", "")

step("alice photographs the tyre of her updated check, offline")
# A JPEG's structure (start, a scan, its end); no Exif, so its bytes are what the server keeps.
photo_bytes = bytes([0xFF, 0xD8, 0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]) + bytes(range(0, 250, 2)) * 40 + bytes([0xFF, 0xD9])
photo_path = os.path.join(work, "tyre.jpg")
with open(photo_path, "wb") as handle:
    handle.write(photo_bytes)
with open(os.path.join(work, "notes.html"), "w") as handle:
    handle.write("<html><script>alert(1)</script></html>")
app.expect_exact(f"{tail}:")
updated = re.search(r"\n(\d)  5350 kg [^\n]*final · alice", app.before).group(1)
app.sendline(updated)
answer(app, "Check:", "p")
answer(app, "Photo file (JPEG, PNG or HEIC; Enter goes back):", "notes.html")
answer(app, "What it shows (Enter for nothing):", "")
expect(app, "not a JPEG, PNG or HEIC image")
answer(app, "Press Enter.", "")
answer(app, "Check:", "p")
answer(app, "Photo file (JPEG, PNG or HEIC; Enter goes back):", "tyre.jpg")
answer(app, "What it shows (Enter for nothing):", "main tyre, cut on the sidewall")
expect(app, "Photo saved on this device, its location removed")
expect(app, "Photo               main tyre, cut on the sidewall · alice · not sent yet")
answer(app, "Check:", "")
answer(app, f"{tail}:", "")
answer(app, "Aircraft:", "")
expect(app, "OFFLINE · 3 pending (3 yours)")
answer(app, "Choose:", "6")
expect(app, "Alice (alice) · 3 changes waiting")

step("bob signs in offline; the server returns; bob syncs alice's update and photo on her behalf")
answer(app, "Choose:", "2")
answer(app, "Passcode for Bob (hidden", "bob-24680x")
expect(app, "OFFLINE · 3 pending (0 yours)")
server = start_server()
answer(app, "Choose:", "5")
expect(app, "uploaded 3 changes: 3 alice's on their behalf; downloaded 3 updates")
answer(app, "Choose:", "q")
app.expect(pexpect.EOF)
app.close()
assert app.exitstatus == 0, app.exitstatus
wide_lines(app)

step("on the server: alice's update, uploaded by bob, and the audit log on alice's behalf")
listed = subprocess.run(
    [baton, "checks", "list", "--data-dir", device_dir, "--user", "bob", "--passcode-stdin", "--tail", tail,
     "--json"],
    input="bob-24680x\n", capture_output=True, text=True,
)
assert listed.returncode == 0, listed.stderr
checks = {c["fuelKg"]: c for c in json.loads(listed.stdout)}
assert "5200" not in checks, listed.stdout
changed, finalized = checks["5350"], checks["3900"]
assert changed["checkedBy"] == "alice" and changed["uploadedBy"] == "bob", changed
assert changed["remarks"] == "Refuelled after the delay" and changed["onDevice"] is False, changed
assert finalized["status"] == "final" and finalized["uploadedBy"] == "bob", finalized

step("on the server: alice's photo, TakenBy alice, UploadedBy bob, the same SHA-256")
photos = subprocess.run(
    [baton, "photos", "list", changed["id"], "--data-dir", device_dir, "--user", "bob", "--passcode-stdin",
     "--json"],
    input="bob-24680x\n", capture_output=True, text=True,
)
assert photos.returncode == 0, photos.stderr
photo = json.loads(photos.stdout)
assert len(photo) == 1, photos.stdout
photo = photo[0]
import hashlib
assert photo["takenBy"] == "alice" and photo["uploadedBy"] == "bob" and photo["pending"] is False, photo
assert photo["sha256"] == hashlib.sha256(photo_bytes).hexdigest(), photo
transcript.write(json.dumps(photo, indent=2) + "\n")
exported = os.path.join(work, "exported.jpg")
export = subprocess.run(
    [baton, "photos", "export", photo["id"], "--to", exported, "--data-dir", device_dir, "--user", "bob",
     "--passcode-stdin"],
    input="bob-24680x\n", capture_output=True, text=True,
)
assert export.returncode == 0, export.stderr
with open(exported, "rb") as handle:
    assert handle.read() == photo_bytes
assert (os.stat(exported).st_mode & 0o777) == 0o600, oct(os.stat(exported).st_mode)
again = subprocess.run(
    [baton, "photos", "export", photo["id"], "--to", exported, "--data-dir", device_dir, "--user", "bob",
     "--passcode-stdin"],
    input="bob-24680x\n", capture_output=True, text=True,
)
assert again.returncode == 6 and "exists already" in again.stderr, (again.returncode, again.stderr)
with sqlite3.connect(os.path.join(server_dir, "server.sqlite")) as audit:
    rows = audit.execute(
        "SELECT actor, action, subject, detail FROM audit WHERE action = 'entity-updated' ORDER BY at"
    ).fetchall()
behalf = [row for row in rows if row[2] in (changed["id"], finalized["id"])]
assert [(row[0], row[3]) for row in behalf] == [("alice", "uploaded by bob")] * 2, rows
transcript.write("\n$ sqlite3 server.sqlite 'SELECT actor, action, subject, detail FROM audit'\n")
transcript.write("\n".join(" | ".join(map(str, row)) for row in behalf) + "\n")

# 5. `baton lock` from another terminal, and the inactivity lock (10 s policy).
step("baton lock, then the inactivity lock")
app = spawn()
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-2468")
expect(app, "Signed in as Alice.")
expect(app, "Choose:")
locked = subprocess.run([baton, "lock", "--data-dir", device_dir], capture_output=True, text=True)
assert locked.returncode == 0 and "Locked the baton app" in locked.stdout, locked
expect(app, "Locked by `baton lock`. Press Enter to sign in.")
app.sendline("")
expect(app, "Who is working on this device?")
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-2468")
expect(app, "Signed in as Alice.")
started = time.monotonic()
app.expect_exact("Locked after inactivity. Press Enter to sign in.", timeout=30)
waited = time.monotonic() - started
assert waited >= 9, f"locked after {waited:.1f} s, before the 10 s policy"
app.sendline("")
expect(app, "Who is working on this device?")

# 6. Wrong passcodes up to the limit (5): bob's secure store is wiped and he leaves the list.
step("wrong passcodes up to the limit")
answer(app, "Choose:", "2")
for attempt in range(5):
    answer(app, "Passcode for Bob (hidden", f"not-bobs-{attempt}")
expect(app, "wiped")
answer(app, "Enter tries again · q quits:", "")
expect(app, "Who is working on this device?")
app.expect(r"1  Alice[^\n]*\r?\n +a  Add a user")

step("alice signs out")
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-2468")
answer(app, "Choose:", "10")
answer(app, "[y/N]", "y")
expect(app, "Signed out.")
answer(app, "Choose:", "q")
app.expect(pexpect.EOF)
app.close()
assert app.exitstatus == 0, app.exitstatus
wide_lines(app)

# 7. Removing the last user with an unsynced change: refused, a wrong confirmation discards nothing, then a
# confirmed discard keeps an encrypted backup, and the device goes back to onboarding.
step("alice signs in again after signing out, then removes herself with a pending change")
app = spawn()
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-2468")
# She signed out: with the network there, her password is asked again.
expect(app, "User: alice")
answer(app, "Password (hidden):", alice_password)
expect(app, "Signed in as Alice.")
answer(app, "Choose:", "2")
answer(app, "Aircraft tail number:", tail)
answer(app, "Flight (Enter for none):", "")
for prompt, value in [("Fuel", "4100"), ("Main tyre", "199"), ("Nose tyre", "58"), ("Oil", "14")]:
    answer(app, prompt, value)
answer(app, "Remarks (Enter for none):", "Left main tyre worn")
answer(app, "Status (final/draft, Enter for final):", "draft")
answer(app, "Save this check? [y/N]", "y")
expect(app, "1 pending (1 yours)")
answer(app, "Choose:", "11")
app.expect(r"1  Alice \(alice\) · 1 change waiting[^\n]*— you")
answer(app, "Number · Enter back:", "1")
answer(app, "[y/N]", "y")
expect(app, "alice has 1 change on this device that the server does not have")
answer(app, "Choose:", "d")
answer(app, "Type DISCARD to confirm:", "discard")
expect(app, "Nothing was discarded or removed.")
expect(app, "1 pending (1 yours)")
answer(app, "Choose:", "11")
answer(app, "Number · Enter back:", "1")
answer(app, "[y/N]", "y")
answer(app, "Choose:", "d")
answer(app, "Type DISCARD to confirm:", "DISCARD")
expect(app, "Discarded 1 change(s); encrypted backup sent to the server.")
# The last user left: the device starts onboarding again.
expect(app, "Sign in to")
expect(app, "User name:")
app.sendeof()
app.expect(pexpect.EOF)
app.close()
assert app.exitstatus == 0, app.exitstatus
backups = os.listdir(os.path.join(device_dir, "backups"))
assert len(backups) == 1 and backups[0].endswith(".sealed.sent"), backups
with open(os.path.join(device_dir, "backups", backups[0]), "rb") as f:
    assert b"Left main tyre worn" not in f.read(), "the backup is not encrypted"
listed = server_command("backups", "list")
assert "1 change(s) by alice, sent by alice" in listed, listed
backup_id = listed.split()[0]
shown = json.loads(server_command("backups", "show", backup_id))
assert shown[0]["author"] == "alice", shown
assert b"Left main tyre worn" in base64.b64decode(shown[0]["body"]), shown
transcript.write("\n$ baton-server backups list\n" + listed)

# 8. The end of input at a prompt never crashes the app.
step("end of input")
app = spawn()
expect(app, "User name:")
app.sendeof()
app.expect(pexpect.EOF)
app.close()
assert app.exitstatus == 0, app.exitstatus

# 9. The server's policy reaches the device: "forgot passcode" at the prompt, changing the passcode, a user
# deleted on the server leaving the device at the next sync, and the screen of an app version the server retired.
step("alice onboards on a second tablet and forgets her passcode at the prompt")
# (The first tablet still has bob registered on the server: his store was wiped by the passcode limit, offline.)
app = spawn("--server", url, directory=os.path.join(work, "second-device"))
answer(app, "User name:", "alice")
answer(app, "Password (hidden):", alice_password)
answer(app, "Do you agree? (y/n):", "y")
answer(app, "Do you agree? (y/n):", "n")
answer(app, "New passcode (hidden):", "alice-1357")
answer(app, "Type it again:", "alice-1357")
expect(app, "Signed in as Alice.")
answer(app, "Choose:", "6")
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden; ? if you forgot it):", "?")
expect(app, "User: alice")
answer(app, "Password (hidden):", alice_password)
answer(app, "New passcode (hidden):", "alice-9753")
answer(app, "Type it again:", "alice-9753")
expect(app, "Signed in as Alice.")

step("alice changes her passcode from the menu")
answer(app, "Choose:", "12")
answer(app, "Passcode for Alice (hidden", "alice-1357")
expect(app, "wrong")
answer(app, "Passcode for Alice (hidden", "alice-9753")
answer(app, "New passcode (hidden):", "alice-8642")
answer(app, "Type it again:", "alice-8642")
expect(app, "Your passcode is changed; your data is as it was.")

step("alice turns usage data on (she declined it at onboarding); the reset kept her answers")
answer(app, "Choose:", "13")
expect(app, "Data consent: agreed")
expect(app, "Usage data:   off")
answer(app, "u turns usage data on · Enter back:", "x")
expect(app, "'x' is not u.")
answer(app, "Choose:", "13")
answer(app, "u turns usage data on · Enter back:", "u")
expect(app, "Usage data is on for you.")
answer(app, "Choose:", "13")
expect(app, "Usage data:   on")
answer(app, "u turns usage data off · Enter back:", "")

step("alice sends the device's log to support")
answer(app, "Choose:", "14")
answer(app, "[y/N]", "y")
app.expect(r"Sent (\d+) log lines? to support\.")
assert int(app.match.group(1)) >= 2, app.match.group(0)
second_device = open(os.path.join(work, "second-device", "device.id")).read().strip()
shown = server_command("logs", "show", second_device)
assert "support, sent by alice" in shown and "info baton: signed in" in shown, shown
for secret in (alice_password, "alice-1357", "alice-9753", "alice-8642"):
    assert secret not in shown, "a passcode or password reached the log"
transcript.write("\n$ baton-server logs show DEVICE (head)\n" + "\n".join(shown.splitlines()[:6]) + "\n")

step("bob joins; the server deletes him; alice's next sync removes him from the device")
answer(app, "Choose:", "8")
answer(app, "User name:", "bob")
answer(app, "Password (hidden):", bob_password)
answer(app, "Do you agree? (y/n):", "y")
answer(app, "Do you agree? (y/n):", "n")
answer(app, "New passcode (hidden):", "bob-97531x")
answer(app, "Type it again:", "bob-97531x")
expect(app, "Added. Bob is signed in.")
answer(app, "Choose:", "7")
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-8642")
expect(app, "Signed in as Alice.")
server_command("user", "delete", "bob")
answer(app, "Choose:", "5")
expect(app, "removed Bob (withdrawn on the server)")
answer(app, "Choose:", "7")
expect(app, "Who is working on this device?")
app.expect(r"1  Alice[^\n]*\r?\n +a  Add a user")
answer(app, "Choose:", "1")
answer(app, "Passcode for Alice (hidden", "alice-8642")
expect(app, "Signed in as Alice.")

step("the server retires this app version: a blocking screen, and quit")
server_command("settings", "set", "app-versions.inactive", "1.0")
answer(app, "Choose:", "5")
expect(app, "This version of Baton can no longer be used")
expect(app, "no longer allowed by the server")
answer(app, "q quits:", "q")
app.expect(pexpect.EOF)
app.close()
assert app.exitstatus == 0, app.exitstatus
server_command("settings", "set", "app-versions.inactive", "")
wide_lines(app)

stop_server(server)
transcript.close()
print("terminal ok")
