"""The authentication backend for sign-in through the provider: mozilla-django-oidc's code flow (state, nonce,
PKCE, the token exchange, the ID token's signature, RS256 by default, against the provider's JWKS), with Corral's
rules on top.

What it adds to the library: endpoints from discovery at sign-in time (``provider``), the issuer and audience of the
ID token checked (the library checks neither), users found by issuer and subject rather than by email, and every
failure turned into a ``SignInFailed`` that the callback page shows in words instead of a 500 or a silent redirect.
With single sign-on off it answers nothing, so it can stay in ``AUTHENTICATION_BACKENDS`` always.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import jwt
import requests
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from portal.accounts.provider import ProviderUnavailable, endpoints, library_setting, oidc_enabled
from portal.accounts.services import PROVIDER_UNREACHABLE, SignInFailed, oidc_sign_in
from portal.errors import NotAllowed

if TYPE_CHECKING:
    from django.contrib.auth.models import User
    from django.http import HttpRequest

logger = logging.getLogger(__name__)


class OidcBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with Corral's settings, checks and user mapping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The library's constructor reads its settings once; ours answer them (no network here: this runs for
        # every password sign-in too).
        super().__init__(*args, **kwargs)
        self.issuer = ""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback view passes the flow's nonce and verifier: a password form posted to a URL that
        # happens to carry ?code=&state= must not start a token exchange.
        if request is None or "code_verifier" not in kwargs or not oidc_enabled():
            return None
        if "code" not in request.GET or "state" not in request.GET:
            return None
        try:
            found = endpoints()
            self.issuer = found.issuer
            self.OIDC_OP_TOKEN_ENDPOINT = found.token
            self.OIDC_OP_USER_ENDPOINT = found.userinfo
            self.OIDC_OP_JWKS_ENDPOINT = found.jwks
            user: User | None = super().authenticate(request, **kwargs)
        except (ProviderUnavailable, requests.ConnectionError, requests.Timeout) as exc:
            logger.warning("OIDC sign-in failed, the provider is unreachable: %s", exc)
            raise SignInFailed(PROVIDER_UNREACHABLE, status=503) from exc
        except requests.HTTPError as exc:
            logger.warning("OIDC sign-in failed, the provider refused: %s", exc)
            raise SignInFailed(
                "The identity provider refused to complete the sign-in (the code may have expired or been used "
                "already). Please sign in again.",
                status=403,
            ) from exc
        except (jwt.PyJWTError, SuspiciousOperation, KeyError, ValueError) as exc:
            logger.warning("OIDC sign-in refused, the answer did not check out: %s", exc)
            raise SignInFailed(
                "The identity provider's answer could not be verified, so you were not signed in. Please sign in "
                "again; if it keeps happening, tell the administrators.",
                status=403,
            ) from exc
        return user

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The library checks the signature, the expiry and the nonce; the issuer and the audience are checked
        here, so a token the same provider issued to another application is refused."""
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("ID token audience is not this client")
        if self.issuer and payload.get("iss") != self.issuer:
            raise SuspiciousOperation(f"ID token issuer {payload.get('iss')!r} is not {self.issuer!r}")
        if not isinstance(payload.get("sub"), str) or not payload["sub"]:
            raise SuspiciousOperation("ID token has no subject")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Userinfo when the provider has the endpoint, on top of the ID token's claims; a userinfo answer about
        another subject is refused (OpenID Connect Core, 5.3.2)."""
        claims = dict(payload)
        if self.OIDC_OP_USER_ENDPOINT:
            info: dict[str, Any] = super().get_userinfo(access_token, id_token, payload)
            if info.get("sub") != payload["sub"]:
                raise SuspiciousOperation("userinfo is about another subject")
            claims.update(info)
        return claims

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User:
        claims = self.get_userinfo(access_token, id_token, payload)
        try:
            return oidc_sign_in(issuer=str(payload.get("iss", self.issuer)), subject=payload["sub"], claims=claims)
        except NotAllowed as exc:
            raise SignInFailed(exc.message, status=exc.status_code) from exc
        except IntegrityError as exc:
            # Two first sign-ins of one person at the same moment: the other one made the account.
            raise SignInFailed(
                "Your account was being set up by another sign-in. Please sign in again.", status=409
            ) from exc
