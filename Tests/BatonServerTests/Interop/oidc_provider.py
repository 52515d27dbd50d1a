"""A real OpenID Provider for the tests: oidc-provider-mock (PyPI; Flask and Authlib) on loopback.

Usage: oidc_provider.py
Starts the provider on a free port of localhost with client registration and `nonce` required, and the people of
BATON_IDP_USERS (a JSON list of claim sets, each with `sub`, e.g. `groups`, `preferred_username`). Registers Baton
as a client (client_secret_basic) with the redirect URIs of BATON_IDP_REDIRECTS (JSON list). Prints one JSON line
{"issuer": …, "client_id": …} and writes the client secret to the file BATON_IDP_SECRET_FILE (never to stdout).
Runs until standard input closes.
"""

import json
import os
import sys

import requests
from oidc_provider_mock import run_server_in_thread
from oidc_provider_mock._storage import User

users = [User(sub=claims["sub"], claims={k: v for k, v in claims.items() if k != "sub"})
         for claims in json.loads(os.environ.get("BATON_IDP_USERS", "[]"))]

with run_server_in_thread(port=0, require_client_registration=True, require_nonce=True,
                          user_claims=users) as server:
    # `localhost`, while Baton is on 127.0.0.1: another site to the browser, as a real provider is (cookies that
    # SameSite keeps to one site must survive the way back).
    issuer = f"http://localhost:{server.server_port}"
    registration = requests.post(issuer + "/oauth2/clients", json={
        "redirect_uris": json.loads(os.environ["BATON_IDP_REDIRECTS"]),
        "token_endpoint_auth_method": "client_secret_basic",
    })
    registration.raise_for_status()
    client = registration.json()
    with open(os.environ["BATON_IDP_SECRET_FILE"], "w") as secret:
        secret.write(client["client_secret"])
    print(json.dumps({"issuer": issuer, "client_id": client["client_id"]}), flush=True)
    sys.stdin.read()
