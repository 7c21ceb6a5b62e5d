"""A small but real OpenID Connect provider for the tests: an HTTP server on a loopback port, in a thread.

It speaks the authorization code flow the way a site's provider (Keycloak, Authentik, Dex) does, as far as Corral
uses it: discovery, authorize (the configured person is signed in and approves at once, or denies when told),
token (client secret by post or basic auth, one use per code, the redirect URI and the PKCE verifier checked), an
RS256 ID token signed with joserfc (so the signature Corral checks was made by another library than the one that
checks it), userinfo and the JWKS. Knobs let a test make it misbehave: deny consent, change ID token claims
(expiry, nonce, audience, issuer), sign with a key it does not publish, or alter the token after signing.

Run it by hand to try single sign-on with ``make run`` (docs/oidc.md):
``.venv/bin/python -m tests.portal.accounts.provider --port 9400 --user ada --groups corral-demo,corral-staff``
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

CLIENT_ID = "corral-test"
CLIENT_SECRET = "corral-test-secret"  # noqa: S105 (a test client's)


def new_key(kid: str = "test-key-1") -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"}, private=True)


@dataclass
class Grant:
    claims: dict[str, Any]
    client_id: str
    redirect_uri: str
    nonce: str | None
    code_challenge: str | None
    code_challenge_method: str | None


@dataclass
class Provider:
    """The provider's state and knobs; ``issuer`` is set once it listens."""

    key: RSAKey
    issuer: str = ""
    client_id: str = CLIENT_ID
    client_secret: str = CLIENT_SECRET
    #: Redirect URIs the client registered; empty accepts any (the hand-run provider).
    redirect_uris: list[str] = field(default_factory=list)
    #: Who signs in at the next authorize: ``sub`` and their claims (``preferred_username``, ``email``, ``groups``…).
    person: dict[str, Any] = field(default_factory=dict)
    #: Answer the next authorizations with this error (``access_denied``: the person declined) instead of a code.
    deny: str = ""
    #: Merged into each ID token's claims (a past ``exp``, another ``nonce``, ``aud`` or ``iss``).
    id_token_changes: dict[str, Any] = field(default_factory=dict)
    #: Sign ID tokens with this key instead (it has the published key's kid but is not published).
    sign_with: RSAKey | None = None
    #: Applied to each signed ID token before it is sent (to alter it after signing).
    after_signing: Callable[[str], str] | None = None
    codes: dict[str, Grant] = field(default_factory=dict)
    access_tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: (method, path) of every request, in order.
    seen: list[tuple[str, str]] = field(default_factory=list)

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "scopes_supported": ["openid", "email", "profile", "groups"],
            "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic"],
            "code_challenge_methods_supported": ["S256", "plain"],
            "grant_types_supported": ["authorization_code"],
        }

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], dict[str, Any]]:
        """(status, headers, JSON body): a redirect back to the client, or a 400 for a request that cannot be."""
        redirect_uri = query.get("redirect_uri", "")
        if query.get("client_id") != self.client_id:
            return 400, {}, {"error": "unauthorized_client"}
        if not redirect_uri or (self.redirect_uris and redirect_uri not in self.redirect_uris):
            return 400, {}, {"error": "invalid_request", "error_description": "unregistered redirect_uri"}
        state = query.get("state", "")
        if self.deny:
            answer = {"error": self.deny, "state": state}
        elif query.get("response_type") != "code" or "openid" not in query.get("scope", "").split():
            answer = {"error": "unsupported_response_type", "state": state}
        else:
            code = secrets.token_urlsafe(24)
            self.codes[code] = Grant(
                claims=dict(self.person),
                client_id=self.client_id,
                redirect_uri=redirect_uri,
                nonce=query.get("nonce"),
                code_challenge=query.get("code_challenge"),
                code_challenge_method=query.get("code_challenge_method"),
            )
            answer = {"code": code, "state": state}
        return 302, {"Location": f"{redirect_uri}?{urlencode(answer)}"}, {}

    def _client_ok(self, form: dict[str, str], authorization: str) -> bool:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization.startswith("Basic "):
            client_id, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
        return secrets.compare_digest(client_id, self.client_id) and secrets.compare_digest(secret, self.client_secret)

    def token(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, Any]]:
        if not self._client_ok(form, authorization):
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        grant = self.codes.pop(form.get("code", ""), None)  # one use: a second try finds nothing
        if grant is None or grant.redirect_uri != form.get("redirect_uri"):
            return 400, {"error": "invalid_grant"}
        if grant.code_challenge is not None:
            verifier = form.get("code_verifier", "")
            if grant.code_challenge_method == "S256":
                digest = hashlib.sha256(verifier.encode("ascii")).digest()
                expected = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
            else:
                expected = verifier
            if not secrets.compare_digest(expected, grant.code_challenge):
                return 400, {"error": "invalid_grant", "error_description": "PKCE verification failed"}
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": grant.client_id,
            "iat": now,
            "auth_time": now,
            "exp": now + 300,
            **grant.claims,
        }
        if grant.nonce is not None:
            claims["nonce"] = grant.nonce
        claims.update(self.id_token_changes)
        signer = self.sign_with or self.key
        id_token = jwt.encode({"alg": "RS256", "kid": signer.kid, "typ": "JWT"}, claims, signer)
        if self.after_signing is not None:
            id_token = self.after_signing(id_token)
        access_token = secrets.token_urlsafe(24)
        self.access_tokens[access_token] = dict(grant.claims)
        return 200, {"access_token": access_token, "token_type": "Bearer", "expires_in": 300, "id_token": id_token}

    def userinfo(self, authorization: str) -> tuple[int, dict[str, Any]]:
        claims = self.access_tokens.get(authorization.removeprefix("Bearer ").strip())
        if claims is None:
            return 401, {"error": "invalid_token"}
        return 200, claims

    def jwks(self) -> dict[str, Any]:
        return KeySet([self.key]).as_dict(private=False)


def replace_payload(token: str, **changes: Any) -> str:
    """``token`` with claims changed in its payload and its signature left as it was (a forgery)."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


@contextmanager
def serve_provider(provider: Provider, *, port: int = 0) -> Iterator[Provider]:
    """``provider`` listening on 127.0.0.1 (a free port unless given) until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-store")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            provider.seen.append(("GET", url.path))
            query = {name: values[0] for name, values in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                self._send(200, provider.discovery())
            elif url.path == "/authorize":
                status, headers, body = provider.authorize(query)
                self._send(status, body, headers)
            elif url.path == "/userinfo":
                self._send(*provider.userinfo(self.headers.get("Authorization", "")))
            elif url.path == "/jwks":
                self._send(200, provider.jwks())
            else:
                self._send(404, {"error": "not_found"})

        def do_POST(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            provider.seen.append(("POST", url.path))
            body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
            form = {name: values[0] for name, values in parse_qs(body).items()}
            if url.path == "/token":
                self._send(*provider.token(form, self.headers.get("Authorization", "")))
            else:
                self._send(404, {"error": "not_found"})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    provider.issuer = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description="A test OpenID Connect provider that signs one person in.")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--user", default="ada", help="preferred_username (and the subject) of who signs in")
    parser.add_argument("--groups", default="corral-demo", help="comma-separated groups")
    args = parser.parse_args()
    person = {
        "sub": f"sub-{args.user}",
        "preferred_username": args.user,
        "email": f"{args.user}@example.org",
        "groups": [group for group in args.groups.split(",") if group],
    }
    with serve_provider(Provider(key=new_key(), person=person), port=args.port) as provider:
        print(f"issuer {provider.issuer}, client id {CLIENT_ID}, secret {CLIENT_SECRET}; signs in {person}")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
