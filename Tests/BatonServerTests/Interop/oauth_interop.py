"""Interoperability check: a third-party OAuth 2.0 client (Authlib) against a running baton-server.

Usage: oauth_interop.py BASE_URL USER   (the user's password on standard input, never as an argument)
Exits 0 and prints "interop ok" when every step passes; otherwise prints the failing step and exits 1.
"""

import sys
import time
import urllib.parse

import requests
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session
from authlib.jose import JsonWebKey, jwt
from interop_common import check



def verify_access_token(token, jwks, user):
    claims = jwt.decode(token, JsonWebKey.import_key_set(jwks))
    claims.validate()
    check(claims.header["alg"] == "ES256", "access token is ES256")
    check(claims["sub"] == user, "access token names the user")
    check(claims["exp"] - claims["iat"] <= 900, "access token lives at most 15 minutes")
    check("baton" in (claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]), "audience is baton")


def expect_oauth_error(call, error, step):
    try:
        call()
    except Exception as failure:  # Authlib raises its OAuthError with .error set
        check(getattr(failure, "error", None) == error, f"{step}: expected {error}, got {failure!r}")
        return
    check(False, f"{step}: expected {error}, but it succeeded")


def main():
    base, user = sys.argv[1], sys.argv[2]
    password = sys.stdin.readline().rstrip("\n")
    metadata = requests.get(base + "/.well-known/oauth-authorization-server", timeout=10).json()
    check(metadata["issuer"] == base, "metadata issuer is the server URL")
    token_url = metadata["token_endpoint"]
    jwks = requests.get(metadata["jwks_uri"], timeout=10).json()

    # Password grant, as the first-party device app.
    device = OAuth2Session(client_id="baton-device", token_endpoint_auth_method="none")
    token = device.fetch_token(token_url, grant_type="password", username=user, password=password)
    check(token["token_type"].lower() == "bearer", "token type is Bearer")
    verify_access_token(token["access_token"], jwks, user)
    me = device.get(base + "/me", timeout=10)
    check(me.status_code == 200 and me.json()["name"] == user, "the access token opens /me")

    # Refresh rotation: a new refresh token each time; the old one is dead and its reuse kills the family.
    first = token["refresh_token"]
    rotated = device.refresh_token(token_url, refresh_token=first)
    check(rotated["refresh_token"] != first, "refresh rotates the refresh token")
    expect_oauth_error(lambda: device.refresh_token(token_url, refresh_token=first), "invalid_grant", "reused refresh token")
    expect_oauth_error(
        lambda: device.refresh_token(token_url, refresh_token=rotated["refresh_token"]),
        "invalid_grant", "family revoked after reuse")

    # Revocation (RFC 7009).
    fresh = device.fetch_token(token_url, grant_type="password", username=user, password=password)
    revoked = device.revoke_token(metadata["revocation_endpoint"], token=fresh["refresh_token"],
                                  token_type_hint="refresh_token")
    check(revoked.status_code == 200, "revocation answers 200")
    expect_oauth_error(lambda: device.refresh_token(token_url, refresh_token=fresh["refresh_token"]),
                       "invalid_grant", "revoked refresh token")

    # Authorization code with PKCE S256, the browser played by requests.
    redirect = "http://127.0.0.1:53682/callback"
    web = OAuth2Session(client_id="baton-web", redirect_uri=redirect, code_challenge_method="S256",
                        token_endpoint_auth_method="none")
    verifier = generate_token(64)
    url, state = web.create_authorization_url(metadata["authorization_endpoint"], code_verifier=verifier)
    page = requests.get(url, timeout=10)
    check(page.status_code == 200 and "<form" in page.text, "authorization endpoint shows a sign-in page")
    form = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    answer = requests.post(metadata["authorization_endpoint"], data={**form, "username": user, "password": password},
                           allow_redirects=False, timeout=10)
    check(answer.status_code == 302, "sign-in redirects back to the client")
    location = answer.headers["Location"]
    check(location.startswith(redirect), "redirect goes to the registered URI")
    code_token = web.fetch_token(metadata["token_endpoint"], authorization_response=location, code_verifier=verifier)
    verify_access_token(code_token["access_token"], jwks, user)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
    check(query.get("state") == state, "state comes back unchanged")
    expect_oauth_error(lambda: web.fetch_token(metadata["token_endpoint"], authorization_response=location,
                                               code_verifier=verifier), "invalid_grant", "reused authorization code")
    # Device authorization grant (RFC 8628): Authlib polls the token endpoint while the person approves the
    # user code on the server's page (requests plays the browser).
    device_grant = "urn:ietf:params:oauth:grant-type:device_code"
    check(device_grant in metadata["grant_types_supported"], "metadata lists the device code grant")
    started = requests.post(metadata["device_authorization_endpoint"],
                            data={"client_id": "baton-device", "scope": "odata settings devices"}, timeout=10).json()
    check(len(started["user_code"]) == 9 and started["interval"] == 5, "a short user code and a 5 s interval")
    polling = OAuth2Session(client_id="baton-device", token_endpoint_auth_method="none")
    expect_oauth_error(lambda: polling.fetch_token(token_url, grant_type=device_grant,
                                                   device_code=started["device_code"]),
                       "authorization_pending", "polling before the approval")
    page = requests.get(started["verification_uri_complete"], timeout=10)
    check(page.status_code == 200 and started["user_code"] in page.text, "the verification page shows the code")
    approved = requests.post(started["verification_uri"], timeout=10, data={
        "user_code": started["user_code"], "username": user, "password": password, "action": "approve"})
    check(approved.status_code == 200 and "Signed in as" in approved.text, "the person approves on the page")
    time.sleep(started["interval"] + 0.5)
    device_token = polling.fetch_token(token_url, grant_type=device_grant, device_code=started["device_code"])
    verify_access_token(device_token["access_token"], jwks, user)
    check(polling.get(base + "/me", timeout=10).json()["name"] == user, "the device's token opens /me")
    time.sleep(started["interval"] + 0.5)
    expect_oauth_error(lambda: polling.fetch_token(token_url, grant_type=device_grant,
                                                   device_code=started["device_code"]),
                       "invalid_grant", "a device code is used once")
    print("interop ok")


if __name__ == "__main__":
    main()
