"""Single sign-on tests run against a real OpenID Connect provider (``provider.py``) on a loopback port: the
browser's side of the flow is Django's test client, the provider's side real HTTP (httpx, and requests inside
mozilla-django-oidc), so the real backend fetches the real JWKS and checks the real signature."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from django.test import Client
from django.test.utils import override_settings

from portal.accounts.provider import forget_discovery
from tests.portal.accounts.provider import CLIENT_ID, CLIENT_SECRET, Provider, new_key, serve_provider

CALLBACK = "http://testserver/accounts/oidc/callback/"


@pytest.fixture(scope="session")
def signing_key():  # noqa: ANN201
    return new_key()


def person(username: str = "ada", groups: list[str] | None = None, **claims: object) -> dict[str, object]:
    return {
        "sub": f"sub-{username}",
        "preferred_username": username,
        "email": f"{username}@example.org",
        "given_name": username.title(),
        "groups": groups if groups is not None else [],
        **claims,
    }


@pytest.fixture
def provider(signing_key, db) -> Iterator[Provider]:  # noqa: ANN001
    """The provider, and the site configured to use it (by discovery from its issuer)."""
    forget_discovery()
    with serve_provider(Provider(key=signing_key, redirect_uris=[CALLBACK], person=person())) as running:
        with override_settings(
            CORRAL_OIDC_ISSUER=running.issuer,
            CORRAL_OIDC_CLIENT_ID=CLIENT_ID,
            CORRAL_OIDC_CLIENT_SECRET=CLIENT_SECRET,
            CORRAL_OIDC_PROVIDER_NAME="Test IdP",
            CORRAL_OIDC_STAFF_GROUP="corral-staff",
            CORRAL_OIDC_TIMEOUT=5.0,
        ):
            yield running
    forget_discovery()


def start(client: Client, next_url: str = "") -> str:
    """Press "Sign in with …": the provider's authorize URL the site redirects to."""
    response = client.get("/accounts/oidc/start/" + (f"?next={next_url}" if next_url else ""))
    assert response.status_code == 302, response.content
    return str(response["Location"])


def at_provider(authorize_url: str) -> str:
    """The browser at the provider (real HTTP): the path and query of the redirect back to the site."""
    answer = httpx.get(authorize_url, follow_redirects=False, timeout=5)
    assert answer.status_code == 302, answer.text
    back = urlsplit(answer.headers["location"])
    assert f"{back.scheme}://{back.netloc}{back.path}" == CALLBACK
    return f"{back.path}?{back.query}"


def sign_in(client: Client, next_url: str = "") -> object:
    """The whole flow: start, the provider, the callback; the callback's response."""
    return client.get(at_provider(start(client, next_url)))
