"""What every interop script shares: the step check, and a password-grant sign-in as the device client.

The scripts run as `python3 SCRIPT BASE_URL USER` with the user's password on standard input (never an
argument), from this directory, so `import interop_common` finds this file.
"""

import sys

import requests


def check(condition, step):
    """Stops the script with a message naming the step when `condition` is false."""
    if not condition:
        print(f"FAILED: {step}")
        sys.exit(1)


def sign_in():
    """Reads BASE_URL and USER from the arguments and the password from standard input; returns the base URL, the
    user and an access token from the password grant."""
    base, user = sys.argv[1], sys.argv[2]
    password = sys.stdin.readline().rstrip("\n")
    answer = requests.post(base + "/oauth/token", data={
        "grant_type": "password", "client_id": "baton-device", "username": user, "password": password,
    }, timeout=10)
    check(answer.status_code == 200, f"sign-in as {user}: {answer.status_code} {answer.text}")
    return base, user, answer.json()["access_token"]
