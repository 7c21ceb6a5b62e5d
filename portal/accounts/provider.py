"""Where the identity provider is and how to talk to it, read from ``CORRAL_OIDC_*`` settings at call time.

Single sign-on is on when a client id and either an issuer or the authorization, token and JWKS endpoints are
set. Endpoints not given explicitly come from the issuer's discovery document
(``<issuer>/.well-known/openid-configuration``), fetched on the first sign-in rather than at start-up, so a
provider that is down never stops the portal from starting, and local accounts keep working meanwhile. A fetched
document is kept for an hour per process; a failed fetch is not kept, so the next sign-in tries again.

mozilla-django-oidc reads its options by name (``OIDC_RP_CLIENT_ID`` …); :func:`library_setting` answers those
names from ours, so the settings module holds one set of names.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings

#: How long a discovery document is trusted before it is fetched again (seconds).
DISCOVERY_TTL = 3600.0
#: The callback's URL name: mozilla-django-oidc reverses it to build the redirect URI it sends the provider.
CALLBACK_URL_NAME = "oidc-callback"


class ProviderUnavailable(Exception):
    """The provider did not answer, or answered something that is not a usable discovery document."""


@dataclass(frozen=True)
class Endpoints:
    issuer: str
    authorization: str
    token: str
    userinfo: str
    jwks: str


_discovered: dict[str, tuple[float, dict[str, Any]]] = {}
_lock = threading.Lock()


def _explicit() -> dict[str, str]:
    return {
        "authorization": settings.CORRAL_OIDC_AUTHORIZATION_ENDPOINT,
        "token": settings.CORRAL_OIDC_TOKEN_ENDPOINT,
        "userinfo": settings.CORRAL_OIDC_USERINFO_ENDPOINT,
        "jwks": settings.CORRAL_OIDC_JWKS_ENDPOINT,
    }


def oidc_enabled() -> bool:
    """Whether the site signs people in through a provider (docs/oidc.md)."""
    if not settings.CORRAL_OIDC_CLIENT_ID:
        return False
    explicit = _explicit()
    return bool(settings.CORRAL_OIDC_ISSUER) or all(explicit[name] for name in ("authorization", "token", "jwks"))


def provider_name() -> str:
    return str(settings.CORRAL_OIDC_PROVIDER_NAME)


def _discovery_document(issuer: str) -> dict[str, Any]:
    now = time.monotonic()
    with _lock:
        kept = _discovered.get(issuer)
    if kept is not None and now - kept[0] < DISCOVERY_TTL:
        return kept[1]
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=settings.CORRAL_OIDC_TIMEOUT)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"could not read {url}: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url} is not a discovery document")
    with _lock:
        _discovered[issuer] = (now, document)
    return document


def forget_discovery() -> None:
    """Drop the kept discovery documents (tests; a provider that moved its endpoints)."""
    with _lock:
        _discovered.clear()


def endpoints() -> Endpoints:
    """The provider's endpoints: explicit settings first, the rest from discovery. Raises ProviderUnavailable when
    discovery is needed and fails, or leaves a required endpoint unknown."""
    found = _explicit()
    issuer = settings.CORRAL_OIDC_ISSUER
    if issuer and not all(found.values()):
        document = _discovery_document(issuer)
        names = {
            "authorization": "authorization_endpoint",
            "token": "token_endpoint",
            "userinfo": "userinfo_endpoint",
            "jwks": "jwks_uri",
        }
        for ours, theirs in names.items():
            if not found[ours] and isinstance(document.get(theirs), str):
                found[ours] = document[theirs]
        # The issuer the provider names itself by is what its tokens carry in `iss`.
        if isinstance(document.get("issuer"), str):
            issuer = document["issuer"]
    missing = [name for name in ("authorization", "token", "jwks") if not found[name]]
    if missing:
        raise ProviderUnavailable(f"the provider's {', '.join(missing)} endpoint is not known")
    return Endpoints(issuer=issuer, **found)


def library_setting(name: str, *default: Any) -> Any:
    """mozilla-django-oidc's option ``name``, from Corral's settings (the endpoints are filled in per sign-in by the
    views and the backend, from :func:`endpoints`). Names we do not set fall back to Django settings, then to the
    library's default."""
    ours: dict[str, Any] = {
        "OIDC_RP_CLIENT_ID": settings.CORRAL_OIDC_CLIENT_ID,
        "OIDC_RP_CLIENT_SECRET": settings.CORRAL_OIDC_CLIENT_SECRET,
        "OIDC_RP_SIGN_ALGO": settings.CORRAL_OIDC_SIGN_ALGO,
        "OIDC_RP_SCOPES": settings.CORRAL_OIDC_SCOPES,
        "OIDC_OP_AUTHORIZATION_ENDPOINT": settings.CORRAL_OIDC_AUTHORIZATION_ENDPOINT,
        "OIDC_OP_TOKEN_ENDPOINT": settings.CORRAL_OIDC_TOKEN_ENDPOINT,
        "OIDC_OP_USER_ENDPOINT": settings.CORRAL_OIDC_USERINFO_ENDPOINT,
        "OIDC_OP_JWKS_ENDPOINT": settings.CORRAL_OIDC_JWKS_ENDPOINT,
        # The library's default is to wait forever on a provider that accepted the connection and went quiet.
        "OIDC_TIMEOUT": settings.CORRAL_OIDC_TIMEOUT,
        "OIDC_USE_PKCE": True,
        "OIDC_AUTHENTICATION_CALLBACK_URL": CALLBACK_URL_NAME,
        "LOGIN_REDIRECT_URL": settings.LOGIN_REDIRECT_URL,
        "OIDC_CREATE_USER": True,
    }
    if name in ours:
        return ours[name]
    return getattr(settings, name, *default) if default else getattr(settings, name)
